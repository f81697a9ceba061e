"""Evidence rows a test writes directly, through the ORM, instead of collecting an answer.

They carry the columns the write path copies with every row (evidence.services.record_capture;
docs/decisions.md, "The report reads mentions and citations per run"): the models do not fill
them, so a row created without them would be one the pipeline never writes.
"""

from __future__ import annotations

from typing import Any

from evidence.models import Capture, Citation
from sampling.models import CollectionState, Run, Sample


def capture_row(*, sample: Sample, revision: int, **fields: Any) -> Capture:
    """A new capture of `sample`, with its run and, when completed, the capture it supersedes:
    the sample's newest completed capture below `revision` (revisions only grow,
    evidence.services.next_revision)."""
    fields.setdefault("run_id", sample.run_id)
    if fields.get("collection_state") == CollectionState.COMPLETED:
        fields.setdefault(
            "supersedes_id",
            Capture.objects.filter(
                sample_id=sample.pk,
                collection_state=CollectionState.COMPLETED,
                revision__lt=revision,
            )
            .order_by("-revision")
            .values_list("pk", flat=True)
            .first(),
        )
    return Capture.objects.create(sample=sample, revision=revision, **fields)


def citation_row(*, capture: Capture, **fields: Any) -> Citation:
    """A new citation of `capture`, with its sample's identity (run, platform, question
    revision) copied onto the row."""
    sample = Sample.objects.only("run_id", "platform", "question_revision_id").get(
        pk=capture.sample_id
    )
    return Citation.objects.create(
        capture=capture,
        sample_id=sample.pk,
        run_id=sample.run_id,
        platform=sample.platform,
        question_revision_id=sample.question_revision_id,
        **fields,
    )


def ended_run(*, tenant: str, review: bool = False, finished: bool = False) -> Run:
    """A launched one-sample run whose samples all ended (valid, or in analysis review), as the
    run-end chain finds it; `finished` also marks the run finished."""
    from tests.conftest import launch_funded, make_campaign_data

    data = make_campaign_data(
        questions=1,
        targets=[{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
        repeats=1,
        tenant=tenant,
    )
    run = launch_funded(data)
    run.samples.update(
        queue_state="done",
        collection_state="completed",
        submission_state="accepted",
        analysis_state="review" if review else "accepted",
        validity="valid",
    )
    if finished:
        Run.objects.filter(pk=run.pk).update(finished_at=run.created_at)
    return run
