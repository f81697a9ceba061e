"""Write operations on campaigns and runs. Keyword-only, typed; admin, commands, API and tasks
all call these."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now

from connectors.registry import configured_model
from tenancy.models import Tenant

from .expansion import expand_samples
from .models import (
    Brand,
    Campaign,
    CollectionState,
    Competitor,
    OutboxMessage,
    PlatformTarget,
    Question,
    QuestionRevision,
    Run,
    Sample,
    SubmissionState,
    UpstreamCancel,
)
from .planning import (
    CampaignSpec,
    EntitySpec,
    PlanError,
    as_typed,
    batch_sizes,
    parse_campaign_spec,
)
from .snapshots import (
    DroppedDuplicate,
    EntitySnapshot,
    QuestionSnapshot,
    RunConfig,
    TargetSnapshot,
)


@dataclass(frozen=True)
class PlanPreview:
    samples: int
    batches: list[int]
    batch_platforms: list[str]
    duplicates: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def preview_plan(*, spec: CampaignSpec) -> PlanPreview:
    sizes = batch_sizes(spec)
    return PlanPreview(
        samples=spec.sample_count,
        batches=[size for _, size in sizes],
        batch_platforms=[platform for platform, _ in sizes],
        duplicates=[
            {"row": d.row, "duplicate_of": d.duplicate_of, "text": d.text} for d in spec.duplicates
        ],
    )


# --- campaigns ------------------------------------------------------------------------------


def save_campaign(*, spec: CampaignSpec) -> Campaign:
    """Create or update a campaign from a validated spec. A changed question text becomes a new
    revision of the question in that position; runs already launched are unaffected."""
    with transaction.atomic():
        tenant = _existing_tenant(spec.tenant)
        brand, _ = Brand.objects.update_or_create(
            tenant=tenant,
            name=spec.brand.name,
            defaults={"aliases": list(spec.brand.aliases), "domains": list(spec.brand.domains)},
        )
        campaign, _ = Campaign.objects.update_or_create(
            tenant=tenant,
            name=spec.name,
            defaults={
                "brand": brand,
                "repeats": spec.repeats,
                "screenshot_policy": spec.screenshot_policy,
                "priority": spec.priority,
            },
        )
        _replace_competitors(campaign, spec)
        _replace_targets(campaign, spec)
        _sync_questions(campaign, spec.questions, spec.topics)
    return campaign


def _existing_tenant(slug: str) -> Tenant:
    """Tenants are created on purpose (a command or a superuser), never by a campaign file."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise PlanError([f"tenant: {slug!r} does not exist; an administrator creates tenants"])
    return tenant


def _replace_competitors(campaign: Campaign, spec: CampaignSpec) -> None:
    campaign.competitors.all().delete()
    Competitor.objects.bulk_create(
        Competitor(
            campaign=campaign,
            name=c.name,
            aliases=list(c.aliases),
            domains=list(c.domains),
            position=i,
        )
        for i, c in enumerate(spec.competitors)
    )


def _replace_targets(campaign: Campaign, spec: CampaignSpec) -> None:
    campaign.targets.all().delete()
    PlatformTarget.objects.bulk_create(
        PlatformTarget(campaign=campaign, **t.as_dict()) for t in spec.targets
    )


def _sync_questions(
    campaign: Campaign, texts: list[str], topics: dict[str, tuple[str, ...]] | None = None
) -> None:
    """The questions in their positions; `topics` (None: keep each question's) replaces
    every question's topics, a question it leaves out having none."""
    existing = list(campaign.questions.select_related("current_revision").order_by("position"))
    for position, text in enumerate(texts):
        if position < len(existing):
            question = existing[position]
            question.is_active = True
            question.save(update_fields=["is_active"])
        else:
            question = Question.objects.create(campaign=campaign, position=position)
        revise_question(question=question, text=text)
        if topics is not None and question.topics != list(topics.get(text, ())):
            question.topics = list(topics.get(text, ()))
            question.save(update_fields=["topics"])
    for question in existing[len(texts) :]:
        question.is_active = False
        question.save(update_fields=["is_active"])


def revise_question(*, question: Question, text: str) -> QuestionRevision:
    """Give a question new text, kept as typed (`as_typed`: "？" stays "？", the engine is
    asked what the operator wrote). Unchanged text keeps the current revision."""
    text = as_typed(text)
    current = question.current_revision
    if current is not None and current.text == text:
        return current
    revision_no = (current.revision_no if current else 0) + 1
    revision = QuestionRevision.objects.create(
        question=question, revision_no=revision_no, text=text
    )
    question.current_revision = revision
    question.save(update_fields=["current_revision"])
    return revision


def campaign_spec_data(*, campaign: Campaign) -> dict[str, Any]:
    """The live campaign in the launch file's shape, for validation before a launch."""
    questions = campaign.questions.filter(is_active=True).select_related("current_revision")
    return {
        "tenant": campaign.tenant.slug,
        "name": campaign.name,
        "brand": {
            "name": campaign.brand.name,
            "aliases": campaign.brand.aliases,
            "domains": campaign.brand.domains,
        },
        "competitors": [
            {"name": c.name, "aliases": c.aliases, "domains": c.domains}
            for c in campaign.competitors.all()
        ],
        "questions": [q.current_revision.text for q in questions if q.current_revision],
        **_topics_data(questions),
        "targets": [
            {"platform": t.platform, "device": t.device, "region": t.region, "mode": t.mode}
            | ({"language": t.language} if t.language else {})
            for t in campaign.targets.order_by("id")
        ],
        "repeats": campaign.repeats,
        "screenshot_policy": campaign.screenshot_policy,
        "priority": campaign.priority,
    }


def _topics_data(questions: Iterable[Question]) -> dict[str, Any]:
    """`topics` of the launch file's shape, when any active question has some."""
    topics = {
        q.current_revision.text: list(q.topics)
        for q in questions
        if q.current_revision is not None and q.topics
    }
    return {"topics": topics} if topics else {}


def campaign_as_spec(*, campaign: Campaign, submission_limit: int | None = None) -> CampaignSpec:
    return parse_campaign_spec(
        campaign_spec_data(campaign=campaign), submission_limit=submission_limit
    )


# --- runs ---------------------------------------------------------------------------------


def plan_run(*, campaign: Campaign, submission_limit: int | None = None) -> Run:
    """Freeze the campaign into a run and expand its samples in bulk. Call inside the
    launch's transaction (pipeline.launch), which also holds the run's quote.

    After this returns nothing about the run depends on the live campaign: the snapshot holds
    the question revision ids and every setting the workers need.
    """
    spec = campaign_as_spec(campaign=campaign, submission_limit=submission_limit)
    revisions = _current_revisions(campaign, spec)
    config = _run_config(campaign, spec, revisions)
    with transaction.atomic():
        run = Run.objects.create(
            tenant=campaign.tenant,
            campaign=campaign,
            config_snapshot=config.to_json(),
            planned_samples=spec.sample_count,
            priority=spec.priority,
        )
        expand_samples(run=run, spec=spec, revision_ids=[r.pk for r in revisions])
    return run


def _current_revisions(campaign: Campaign, spec: CampaignSpec) -> list[QuestionRevision]:
    by_text: dict[str, QuestionRevision] = {}
    for question in campaign.questions.filter(is_active=True).select_related("current_revision"):
        revision = question.current_revision
        if revision is not None:
            by_text.setdefault(revision.text, revision)
    missing = [text for text in spec.questions if text not in by_text]
    if missing:
        raise PlanError([f"questions: no stored revision for {text!r}" for text in missing])
    return [by_text[text] for text in spec.questions]


def _run_config(
    campaign: Campaign, spec: CampaignSpec, revisions: list[QuestionRevision]
) -> RunConfig:
    topics: dict[int, list[str]] = dict(
        Question.objects.filter(campaign=campaign).values_list("pk", "topics")
    )
    return RunConfig(
        tenant=spec.tenant,
        campaign_id=campaign.pk,
        campaign_name=spec.name,
        brand=_entity(spec.brand),
        competitors=tuple(_entity(c) for c in spec.competitors),
        questions=tuple(
            QuestionSnapshot(
                revision_id=r.pk,
                question_id=r.question_id,
                revision_no=r.revision_no,
                text=r.text,
                topics=tuple(topics.get(r.question_id, ())),
            )
            for r in revisions
        ),
        targets=tuple(
            TargetSnapshot(
                platform=t.platform,
                device=t.device,
                region=t.region,
                mode=t.mode,
                language=t.language,
            )
            for t in spec.targets
        ),
        # The model per platform, frozen: every attempt of the run asks this one.
        models={t.platform: configured_model(t.platform) for t in spec.targets},
        repeats=spec.repeats,
        screenshot_policy=spec.screenshot_policy,
        priority=spec.priority,
        submission_limits=dict(spec.submission_limits),
        duplicates_dropped=tuple(
            DroppedDuplicate(row=d.row, duplicate_of=d.duplicate_of, text=d.text)
            for d in spec.duplicates
        ),
    )


def _entity(spec: EntitySpec) -> EntitySnapshot:
    return EntitySnapshot(name=spec.name, aliases=spec.aliases, domains=spec.domains)


def enqueue_outbox(
    *, task: str, payload: dict[str, Any], queue: str = "default", dedupe_key: str | None = None
) -> None:
    """Record work that must follow the current transaction's commit. Must run inside it."""
    if dedupe_key is not None:
        OutboxMessage.objects.get_or_create(
            dedupe_key=dedupe_key, defaults={"task": task, "payload": payload, "queue": queue}
        )
    else:
        OutboxMessage.objects.create(task=task, payload=payload, queue=queue)


# The keyword argument the relay adds to every outbox task's kwargs: the row's id, which the
# consumer passes to `complete_outbox` (an id, like the payload).
OUTBOX_ID = "outbox_id"


def complete_outbox(*, outbox_id: int | None) -> None:
    """Mark an outbox message done: called by its consumer inside the transaction that did the
    message's effect, so "completed" is committed with the effect or not at all. Until then the
    relay publishes it again after GEO_OUTBOX_REDELIVER_SECONDS (a broker restarted empty
    forgot it); consumers are idempotent. None: the consumer was called directly (tests, a
    sweep), not for a message."""
    if outbox_id is not None:
        OutboxMessage.objects.filter(pk=outbox_id, completed_at=None).update(completed_at=Now())


# --- a cancelled run's upstream cancels (pipeline/upstream_cancel.py) ----------------------

# What the upstream may still be working on: accepted, with its task id, collection not ended.
_UNFINISHED_UPSTREAM = Q(
    submission_state=SubmissionState.ACCEPTED,
    collection_state__in=[CollectionState.QUEUED, CollectionState.RUNNING],
) & ~Q(upstream_id="")


def plan_upstream_cancels(*, run_id: UUID | str, platform: str) -> list[tuple[int, str]]:
    """Record one planned cancel per task of the run on `platform` that the upstream accepted
    and has not finished; a task planned before (a redelivered message, a second cancel) is
    not planned again. Returns (cancel id, upstream id) of this run's and platform's cancels
    not yet requested, oldest first."""
    unfinished = Sample.objects.filter(_UNFINISHED_UPSTREAM, run_id=run_id, platform=platform)
    UpstreamCancel.objects.bulk_create(
        [
            UpstreamCancel(run_id=run_id, sample_id=pk, platform=platform, upstream_id=upstream_id)
            for pk, upstream_id in unfinished.values_list("pk", "upstream_id")
        ],
        ignore_conflicts=True,  # upstream_cancel_once_per_task
    )
    return list(
        UpstreamCancel.objects.filter(run_id=run_id, platform=platform, requested_at=None)
        .order_by("pk")
        .values_list("pk", "upstream_id")
    )


def claim_upstream_cancel(*, cancel_id: int) -> bool:
    """Take a planned cancel for sending: one conditional update, so exactly one worker sends
    it, once. False when it was claimed already, or its task finished since it was planned
    (the upstream need not be asked: the answer is in)."""
    still_unfinished = Sample.objects.filter(
        _UNFINISHED_UPSTREAM, pk=OuterRef("sample_id"), upstream_id=OuterRef("upstream_id")
    )
    claimed = UpstreamCancel.objects.filter(
        Exists(still_unfinished), pk=cancel_id, requested_at=None
    ).update(requested_at=Now())
    return claimed == 1


def record_upstream_cancel(*, cancel_id: int, acknowledged: bool, error: str = "") -> bool:
    """The upstream's answer to a claimed cancel, written once (a conditional update):
    whether it stopped the task and, when the request failed, why (redacted by the caller's
    error type, never a payload). False when an answer was already recorded."""
    return (
        UpstreamCancel.objects.filter(
            pk=cancel_id, requested_at__isnull=False, answered_at=None
        ).update(answered_at=Now(), acknowledged=acknowledged, error=error[:2000])
        == 1
    )
