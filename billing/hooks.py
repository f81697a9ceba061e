"""The calls sampling makes into billing (the integration contract). Each is idempotent: a
repeated task, message or callback books nothing new.

* `quote_and_reserve(run=...)` — inside launch_run's transaction, after the samples exist.
* `capture_sample(sample_id=...)` — a sample's collection completed with a valid answer.
* `record_upstream_cost(capture_id=...)` — a capture carrying the provider's cost was stored.
* `settle_run(run_id=...)` — the run finished (delivered at least once).
* `cancel_run(run_id=...)` — the run was cancelled locally.
"""

from __future__ import annotations

from uuid import UUID

from sampling.models import Run

from . import services


def quote_and_reserve(*, run: Run) -> None:
    """Raises services.InsufficientFunds or services.NoActivePrice (both ValueError)."""
    services.quote_and_reserve(run=run)


def capture_sample(*, sample_id: int) -> None:
    services.capture_sample(sample_id=sample_id)


def record_upstream_cost(*, capture_id: int) -> None:
    services.record_upstream_cost(capture_id=capture_id)


def settle_run(*, run_id: UUID | str) -> None:
    services.settle_run(run_id=run_id)


def cancel_run(*, run_id: UUID | str) -> None:
    services.cancel_run(run_id=run_id)
