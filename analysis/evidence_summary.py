"""Evidence completeness per platform: how many samples have all their evidence, how many only
part of it (and why: a screenshot the platform could not take, a render that failed), how
many none because no answer was collected. The evidence-missing rate is over planned samples,
like every rate in the report (analysis/reports.py)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from sampling.models import EvidenceState

from .stats import Rate, rate

MISSING_STATES = (EvidenceState.PARTIAL, EvidenceState.FAILED)


@dataclass(frozen=True)
class EvidenceSummary:
    platform: str
    planned: int
    stored: int
    partial: int
    failed: int
    pending: int
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def missing_rate(self) -> Rate:
        return rate(self.partial + self.failed, self.planned)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        reasons = data.pop("reasons")
        return data | {"evidence_missing_rate": self.missing_rate.as_dict(), "reasons": reasons}


def evidence_summaries(rows: Iterable[tuple[str, str, str, int]]) -> list[EvidenceSummary]:
    """From the report's sample pass (analysis.report_scan, `Groups.evidence`): samples per
    (platform, evidence state, reason), the reason read only for MISSING_STATES. Rows grow with
    distinct reasons, not samples."""
    states: dict[str, Counter[str]] = defaultdict(Counter)
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    for platform, state, reason, n in rows:
        states[platform][state] += n
        if state in MISSING_STATES:
            reasons[platform][_reason_kind(reason)] += n
    return [
        EvidenceSummary(
            platform=platform,
            planned=sum(tally.values()),
            stored=tally[EvidenceState.STORED],
            partial=tally[EvidenceState.PARTIAL],
            failed=tally[EvidenceState.FAILED],
            pending=tally[EvidenceState.PENDING],
            reasons=dict(sorted(reasons[platform].items())),
        )
        for platform, tally in sorted(states.items())
    ]


def _reason_kind(reason: str) -> str:
    """The stable head of a reason ("SCREENSHOT_UNAVAILABLE", "no answer collected"), so the
    counts group by cause rather than by each upstream message."""
    return reason.split(":", 1)[0].strip() or "unknown"
