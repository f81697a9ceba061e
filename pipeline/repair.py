"""Late evidence repair: a screenshot that was missing when the answer was
collected (the provider's capture timed out, a render failed) is fetched again and stored.

The screenshot is attached to the capture whose answer it shows, as new evidence objects;
stored text and objects are never overwritten (evidence.services.store_screenshot refuses to
replace one). Collection-provider screenshots are fetched from the provider again; direct-API
answers are rendered again from the stored capture. Then the sample's evidence moves
partial -> stored through its one write path. Network and rendering happen outside any
transaction.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from connectors.base import UpstreamError
from connectors.registry import get_connector
from evidence import services as evidence_services
from evidence.models import Capture
from evidence.screenshots import ScreenshotUnavailable, render_answer_page
from sampling.models import CollectionState, EvidenceState, QueueState, Sample
from sampling.transitions import ConcurrentChange, mark_evidence_repaired

SCREENSHOT = "SCREENSHOT"


@dataclass
class RepairReport:
    run_id: str
    repaired: list[int] = field(default_factory=list)
    still_missing: dict[int, str] = field(default_factory=dict)  # sample id -> why

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "repaired": len(self.repaired),
            "still_missing": len(self.still_missing),
            "reasons": {str(k): v for k, v in sorted(self.still_missing.items())},
        }


def repair_evidence(*, run_id: UUID | str) -> RepairReport:
    """Fetch again every missing screenshot of the run's finished samples."""
    report = RepairReport(run_id=str(run_id))
    samples = Sample.objects.filter(
        run_id=run_id,
        queue_state=QueueState.DONE,
        collection_state=CollectionState.COMPLETED,
        evidence_state=EvidenceState.PARTIAL,
        evidence_reason__contains=SCREENSHOT,
    ).order_by("pk")
    for sample in samples:
        try:
            _repair_one(sample)
        except (_StillMissing, ConcurrentChange) as missing:
            report.still_missing[sample.pk] = str(missing)[:200]
        else:
            report.repaired.append(sample.pk)
    return report


class _StillMissing(Exception):
    pass


def _repair_one(sample: Sample) -> None:
    capture = (
        Capture.objects.filter(sample_id=sample.pk, collection_state=CollectionState.COMPLETED)
        .order_by("-revision")
        .first()
    )
    if capture is None:
        raise _StillMissing("no completed capture")
    png = _fetch_screenshot(sample, capture)
    # EvidenceExists: stored by an earlier repair that stopped before the state change.
    with contextlib.suppress(evidence_services.EvidenceExists):
        evidence_services.store_screenshot(sample_id=sample.pk, capture_id=capture.pk, png=png)
    mark_evidence_repaired(sample_id=sample.pk, note=f"screenshot of revision {capture.revision}")


def _fetch_screenshot(sample: Sample, capture: Capture) -> bytes:
    connector = get_connector(sample.platform)
    if not connector.capabilities().asynchronous:
        try:
            return render_answer_page(capture_id=capture.pk)
        except ScreenshotUnavailable as unavailable:
            raise _StillMissing(unavailable.reason) from None
    try:
        result = connector.fetch_evidence(sample.upstream_id, sample_id=sample.pk)
    except UpstreamError as error:
        raise _StillMissing(f"{error.error_class.value}: {error.message}") from None
    shots = [a.content for a in result.attachments if a.kind == "screenshot"]
    if not shots:
        raise _StillMissing("the provider still has no screenshot")
    return shots[0]
