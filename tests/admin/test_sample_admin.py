"""Samples and their history in the admin: read-only, cheap to list, untrusted text escaped."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from analysis.models import AnalysisRevision, Mention
from console.admin_base import CappedCountPaginator
from evidence.models import Capture, EvidenceObject
from pipeline.launch import launch_run
from sampling.models import Attempt, OutboxMessage, Run, Sample, StaleWrite
from tests.admin.conftest import SUCCEEDED, make_campaign
from tests.conftest import make_campaign_data
from tests.factories import capture_row, citation_row

HOSTILE = "Best CRM: <script>alert(1)</script> and <img src=x onerror=alert(1)> Acme"


@pytest.fixture
def captured_sample(run: Run) -> Sample:
    sample = Sample.objects.filter(run=run).order_by("id").first()
    assert sample is not None
    Sample.objects.filter(pk=sample.pk).update(**SUCCEEDED)
    outcomes = [
        {"status": "failed", "error_class": "transient", "status_code": 503, "egress": "direct"},
        {"status": "accepted", "upstream_id": "resp_123"},
    ]
    for n, outcome in enumerate(outcomes, start=1):
        Attempt.objects.create(
            sample=sample, attempt_no=n, idempotency_key=f"k-{n}", fencing_token=n, **outcome
        )
    capture = capture_row(
        sample=sample,
        revision=1,
        attempt_no=2,
        upstream_id="resp_123",
        collection_state="completed",
        answer_text=HOSTILE,
        captured_at=timezone.now(),
    )
    EvidenceObject.objects.create(
        capture=capture,
        kind="text",
        key=f"acme/{run.pk}/{sample.pk}/1/text",
        sha256="ab" * 32,
        size=len(HOSTILE.encode()),
        mime="text/plain; charset=utf-8",
    )
    cited = [
        {"url": "javascript:alert(2)", "normalized_url": "javascript:", "title": "<b>bold</b>"},
        {
            "url": "https://acme.com/?utm_source=x",
            "normalized_url": "https://acme.com/",
            "domain": "acme.com",
            "title": "Acme",
        },
    ]
    for position, citation in enumerate(cited):
        citation_row(capture=capture, position=position, **citation)
    revision = AnalysisRevision.objects.create(
        run=sample.run, number=1, analyser="rules", analyser_version="1.0"
    )
    Mention.objects.create(
        sample=sample,
        # The columns analysis.services.derive copies from the sample with every row.
        platform=sample.platform,
        question_revision_id=sample.question_revision_id,
        capture=capture,
        revision=revision,
        entity="Acme",
        is_brand=True,
        mentioned=True,
        count=1,
        first_position=len(HOSTILE) - 4,
        rank=1,
    )
    return sample


@pytest.fixture
def sample_page(admin_client: Client, captured_sample: Sample) -> str:
    """The captured sample's detail page in the admin, as HTML."""
    url = reverse("admin:sampling_sample_change", args=[captured_sample.pk])
    return admin_client.get(url).content.decode()


@pytest.mark.django_db
def test_sample_detail_escapes_hostile_answer_text(sample_page: str) -> None:
    page = sample_page
    assert "<script>alert(1)</script>" not in page
    assert "<img src=x onerror=alert(1)>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<b>bold</b>" not in page
    assert 'href="javascript:' not in page  # only http(s) citations become links
    assert '<a href="https://acme.com/?utm_source=x"' in page


@pytest.mark.django_db
def test_sample_detail_shows_attempts_evidence_citations_and_mentions(
    sample_page: str, captured_sample: Sample
) -> None:
    page = sample_page
    assert "resp_123" in page and "transient" in page and "503" in page  # attempts
    assert f"acme/{captured_sample.run_id}/{captured_sample.pk}/1/text" in page
    assert "ab" * 32 in page and "text/plain; charset=utf-8" in page  # evidence object
    assert "https://acme.com/" in page  # citation
    assert "mentioned 1×" in page  # brand mention
    assert 'name="_save"' not in page


@pytest.mark.django_db
def test_pending_analysis_reads_analysing_never_not_mentioned(
    admin_client: Client, run: Run
) -> None:
    sample = Sample.objects.filter(run=run).first()
    assert sample is not None

    page = admin_client.get(
        reverse("admin:sampling_sample_change", args=[sample.pk])
    ).content.decode()

    assert "analysing" in page
    assert "not mentioned" not in page


@pytest.mark.django_db
def test_sample_list_filters_by_run_and_layer_state(
    admin_client: Client, run_with_outcomes: Run
) -> None:
    other = launch_run(campaign=run_with_outcomes.campaign)
    url = reverse("admin:sampling_sample_changelist")

    by_run = admin_client.get(url, {"run": str(other.pk)})
    failed = admin_client.get(
        url, {"run": str(run_with_outcomes.pk), "collection_state__exact": "failed"}
    )
    invalid = admin_client.get(url, {"validity": "invalid", "platform": "openai"})

    assert by_run.context["cl"].result_count == 4
    assert failed.context["cl"].result_count == 1
    assert invalid.context["cl"].result_count == 1
    for state in ("submission_state", "evidence_state", "analysis_state", "queue_state"):
        assert f"{state}__exact=" in by_run.content.decode()  # a filter per layer


@pytest.mark.django_db
def test_sample_list_queries_do_not_grow_with_rows(admin_client: Client, run: Run) -> None:
    url = reverse("admin:sampling_sample_changelist")
    with CaptureQueriesContext(connection) as few:
        admin_client.get(url)
    launch_run(
        campaign=make_campaign(
            make_campaign_data(
                questions=10,
                targets=[
                    {
                        "platform": "collector",
                        "device": "desktop",
                        "region": "us",
                        "mode": "web_search",
                    }
                ],
                repeats=2,
                name="bigger",
            )
        )
    )
    with CaptureQueriesContext(connection) as many:
        page = admin_client.get(url)

    assert page.context["cl"].result_count == 24
    assert len(many) == len(few)


@pytest.mark.django_db
def test_sample_list_stops_counting_at_the_cap(
    admin_client: Client, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CappedCountPaginator, "cap", 2)

    page = admin_client.get(reverse("admin:sampling_sample_changelist")).content.decode()

    assert "more than 2 samples" in page
    assert "SELECT COUNT(*) FROM" not in page


HISTORY = [
    ("sampling", "sample"),
    ("sampling", "attempt"),
    ("sampling", "stalewrite"),
    ("sampling", "outboxmessage"),
    ("evidence", "capture"),
    ("evidence", "evidenceobject"),
    ("evidence", "citation"),
    ("analysis", "mention"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("app", "model"), HISTORY)
def test_history_is_read_only(
    admin_client: Client, captured_sample: Sample, app: str, model: str
) -> None:
    StaleWrite.objects.create(
        sample=captured_sample, operation="complete", presented_token=1, current_token=2
    )
    OutboxMessage.objects.create(task="sampling.execute", payload={"sample_id": 1})
    changelist = admin_client.get(reverse(f"admin:{app}_{model}_changelist"))
    obj = changelist.context["cl"].result_list[0]

    assert changelist.status_code == 200
    assert admin_client.get(reverse(f"admin:{app}_{model}_add")).status_code == 403
    delete_url = reverse(f"admin:{app}_{model}_delete", args=[obj.pk])
    assert admin_client.post(delete_url, {"post": "yes"}).status_code == 403
    detail = admin_client.get(reverse(f"admin:{app}_{model}_change", args=[obj.pk]))
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    assert type(obj).objects.filter(pk=obj.pk).exists()


@pytest.mark.django_db
def test_capture_detail_escapes_answer_text(admin_client: Client, captured_sample: Sample) -> None:
    capture = Capture.objects.get(sample=captured_sample)

    page = admin_client.get(
        reverse("admin:evidence_capture_change", args=[capture.pk])
    ).content.decode()

    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
