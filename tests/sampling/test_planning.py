from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from pipeline.launch import launch_run
from sampling.models import Batch, Campaign, QuestionRevision, Run, Sample
from sampling.planning import PlanError, normalize_text, parse_campaign_spec
from sampling.services import preview_plan, revise_question, save_campaign
from tests.conftest import make_campaign_data, spec_with_tenant

FOUR_COLLECTOR_TARGETS = [
    {"platform": "collector", "device": device, "region": region, "mode": "web_search"}
    for device in ("desktop", "mobile")
    for region in ("us", "cn")
]


def _launch(data: dict[str, Any], submission_limit: int | None = None) -> Run:
    spec = spec_with_tenant(data, funded=True, submission_limit=submission_limit)
    return launch_run(campaign=save_campaign(spec=spec), submission_limit=submission_limit)


@pytest.mark.django_db
def test_twenty_questions_four_targets_two_repeats_make_160_samples_in_two_batches() -> None:
    data = make_campaign_data(questions=20, targets=FOUR_COLLECTOR_TARGETS, repeats=2)

    run = _launch(data, submission_limit=100)

    assert run.planned_samples == 160
    assert Sample.objects.filter(run=run).count() == 160
    assert list(Batch.objects.filter(run=run).values_list("size", flat=True)) == [100, 60]
    assert all(b.samples.count() == b.size for b in Batch.objects.filter(run=run))


@pytest.mark.django_db
def test_batches_are_per_platform_and_within_each_limit() -> None:
    targets = [
        *FOUR_COLLECTOR_TARGETS[:2],
        {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    ]
    data = make_campaign_data(questions=30, targets=targets, repeats=2)

    preview = preview_plan(spec=parse_campaign_spec(data, submission_limit=50))

    assert preview.samples == 180
    assert list(zip(preview.batch_platforms, preview.batches, strict=True)) == [
        ("collector", 50),
        ("collector", 50),
        ("collector", 20),
        ("openai", 50),
        ("openai", 10),
    ]


@pytest.mark.django_db
def test_sample_identity_is_unique_in_the_database() -> None:
    run = _launch(make_campaign_data(questions=2, targets=FOUR_COLLECTOR_TARGETS[:1], repeats=1))
    sample = Sample.objects.filter(run=run).first()
    assert sample is not None
    # The same identity (run, question revision, target, repeat) in the same batch.
    identity = ["run_id", "batch_id", "tenant_id", "question_revision_id", "platform", "device"]
    identity += ["region", "mode", "repeat_index"]
    duplicate = Sample(**{name: getattr(sample, name) for name in identity})
    with pytest.raises(IntegrityError), transaction.atomic():
        duplicate.save()


def test_normalisation_strips_collapses_whitespace_and_applies_nfkc() -> None:
    assert normalize_text("  Which\tCRM \n is\u3000best？ ") == "Which CRM is best?"
    assert normalize_text("ＡＣＭＥ　ｃｒｍ") == "ACME crm"


@pytest.mark.django_db
def test_duplicates_after_normalisation_are_reported_and_planned_once() -> None:
    data = make_campaign_data(questions=0, targets=FOUR_COLLECTOR_TARGETS[:1], repeats=1)
    data["questions"] = ["Best CRM?", "  Best   CRM？", "Other question"]

    spec = parse_campaign_spec(data)

    assert spec.questions == ["Best CRM?", "Other question"]
    assert [(d.row, d.duplicate_of) for d in spec.duplicates] == [(1, 0)]
    assert preview_plan(spec=spec).samples == 2


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["questions"].append("   "), "questions[2]: must not be empty"),
        (
            lambda d: d["questions"].append("x" * 2001),
            "questions[2]: 2001 characters, over the 2000 limit",
        ),
        (lambda d: d["questions"].append(42), "questions[2]: expected a string, got int"),
        (lambda d: d.update(questions=[]), "questions: a campaign needs at least one question"),
        (lambda d: d.update(targets=[{"platform": "nope"}]), "targets[0]: unknown platform 'nope'"),
        (
            lambda d: d["targets"].append({"platform": "openai", "device": "fridge"}),
            "targets[1]: platform 'openai' does not support device 'fridge'",
        ),
        (
            lambda d: d.update(repeats=0),
            "repeats: 0 is not possible: each question is asked 1 to 100 times per target",
        ),
        (lambda d: d.update(targets=[]), "targets: a campaign needs at least one platform target"),
        (lambda d: d.update(repeats="2"), "repeats: expected a whole number"),
        (lambda d: d["brand"].update(name=" "), "brand.name: must not be empty"),
        (
            lambda d: d.update(screenshot_policy="always"),
            "screenshot_policy: 'always' is not one of",
        ),
        (
            lambda d: d.update(repeats=100, questions=[f"q{i}" for i in range(20001)]),
            "plan: 20001 questions x 1 targets x 100 repeats = 2000100 samples, "
            "over the 2000000 limit",
        ),
    ],
)
def test_each_bad_input_is_named(mutate: Any, expected: str, campaign_data: dict[str, Any]) -> None:
    mutate(campaign_data)
    with pytest.raises(PlanError) as caught:
        parse_campaign_spec(campaign_data)
    assert any(problem.startswith(expected) for problem in caught.value.problems), (
        caught.value.problems
    )


def test_screenshot_required_is_rejected_for_a_platform_without_screenshots(
    campaign_data: dict[str, Any],
) -> None:
    campaign_data["screenshot_policy"] = "required"
    with pytest.raises(PlanError) as caught:
        parse_campaign_spec(campaign_data)
    assert "targets[0]: platform 'openai' cannot take screenshots" in caught.value.problems[0]


@pytest.mark.django_db
def test_editing_the_campaign_after_launch_changes_nothing_in_the_run(
    campaign_data: dict[str, Any],
) -> None:
    run = _launch(campaign_data)
    snapshot_before = dict(run.config_snapshot)
    revisions_before = set(
        Sample.objects.filter(run=run).values_list("question_revision__text", flat=True)
    )

    campaign = Campaign.objects.get(pk=run.campaign_id)
    question = campaign.questions.order_by("position").first()
    assert question is not None
    revise_question(question=question, text="A completely different question")
    campaign.repeats = 5
    campaign.save()
    campaign.targets.all().delete()

    run.refresh_from_db()
    assert run.config_snapshot == snapshot_before
    assert (
        set(Sample.objects.filter(run=run).values_list("question_revision__text", flat=True))
        == revisions_before
    )
    assert Sample.objects.filter(run=run).count() == 2 * 1 * 2
    assert question.revisions.count() == 2


@pytest.mark.django_db
def test_question_revisions_are_immutable(campaign_data: dict[str, Any]) -> None:
    run = _launch(campaign_data)
    revision = QuestionRevision.objects.filter(samples__run=run).first()
    assert revision is not None
    revision.text = "changed"
    with pytest.raises(Exception, match="immutable"):
        revision.save()
