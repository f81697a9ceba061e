"""Running a run's steps in the test process (no broker): for tests about what a step writes,
not about delivery. Delivery is covered by tests/e2e with real worker processes."""

from __future__ import annotations

from typing import Any

from pipeline.execution import run_step
from sampling.leases import claim_ready, requeue_expired_leases
from sampling.models import QueueState, Sample


def drive_in_process(run_id: Any, *, max_rounds: int = 200) -> list[str]:
    """Claim and execute due steps until nothing is due. Returns every step's outcome."""
    outcomes: list[str] = []
    for _ in range(max_rounds):
        requeue_expired_leases()
        platforms = set(
            Sample.objects.filter(run_id=run_id, queue_state=QueueState.READY).values_list(
                "platform", flat=True
            )
        )
        claims = [
            claim
            for platform in platforms
            for claim in claim_ready(platform=platform, limit=50, owner="test", lease_seconds=60)
        ]
        if (
            not claims
            and not Sample.objects.filter(run_id=run_id, queue_state=QueueState.READY).exists()
        ):
            return outcomes
        for claim in claims:
            outcomes.append(run_step(sample_id=claim.sample_id, token=claim.token, worker="test"))
        if not claims:
            _make_due_now(run_id)
    raise AssertionError(f"run {run_id} still has due work after {max_rounds} rounds")


def _make_due_now(run_id: Any) -> None:
    """Skip the waiting between polls and retries: the test is about outcomes, not delays."""
    from django.db.models.functions import Now

    Sample.objects.filter(run_id=run_id, queue_state=QueueState.READY).update(due_at=Now())
