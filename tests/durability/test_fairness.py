"""Isolation and fairness with real workers: a slow platform does not hold up a fast one; a
tenant with ten times the work does not hold up a small tenant. Orderings, not durations."""

from __future__ import annotations

from typing import Any

from sampling.models import Sample
from simulator import SimulatorHandle

from .conftest import (
    ANTHROPIC,
    IN_PROCESSES,
    OPENAI,
    Procs,
    assert_invariants,
    drive,
    launch,
    run_finished,
)

pytestmark = IN_PROCESSES


def test_a_slow_platform_does_not_delay_a_fast_one(
    procs: Procs, simulator: SimulatorHandle
) -> None:
    """OpenAI takes 12 s per answer (several times what the fast platform's four samples need
    end to end, even on a loaded machine), Anthropic answers at once. One queue per platform:
    the fast platform's samples all finish before the first slow one does."""
    simulator.configure(profile={"platforms": {"openai": {"latency_ms": [12000, 12000]}}})
    run = launch(targets=[OPENAI, ANTHROPIC], questions=4)
    procs.worker("slow-platform", queues=["platform.openai"], concurrency=4)
    procs.worker(
        "others", queues=["platform.anthropic", "evidence", "analysis", "default"], concurrency=4
    )
    samples = Sample.objects.filter(run=run)
    seen: dict[str, Any] = {}

    def watch() -> None:
        fast_done = not samples.filter(platform="anthropic").exclude(queue_state="done").exists()
        if fast_done and "slow_when_fast_done" not in seen:
            seen["slow_when_fast_done"] = list(
                samples.filter(platform="openai").values_list("collection_state", "queue_state")
            )

    drive(run_finished(run), timeout=120, on_tick=watch)

    # When the last fast sample was done, no slow sample had its answer yet.
    assert seen["slow_when_fast_done"]
    assert all(c != "completed" and q != "done" for c, q in seen["slow_when_fast_done"])
    # And by the database's own clock: every fast answer came before the first slow one.
    fast = list(samples.filter(platform="anthropic").values_list("completed_at", flat=True))
    slow = list(samples.filter(platform="openai").values_list("completed_at", flat=True))
    assert None not in fast and None not in slow
    assert max(t for t in fast if t) < min(t for t in slow if t)
    assert {s.collection_state for s in samples} == {"completed"}
    assert_invariants(run)


def test_a_tenant_with_ten_times_the_samples_does_not_hold_up_a_small_one(
    procs: Procs, settings: Any
) -> None:
    """Tenant "big" has 100 samples, queued first; tenant "small" has 10. Fair shares give the
    small tenant slots from the first tick: its first answer comes before the big tenant's
    20th, and all of it before the big tenant is half done."""
    settings.GEO_PLATFORM_CONCURRENCY = 6
    big = launch(targets=[ANTHROPIC], questions=100, tenant="big", name="big")
    small = launch(targets=[ANTHROPIC], questions=10, tenant="small", name="small")
    procs.worker("w1", concurrency=6)
    first_claims: dict[str, int] = {}

    def watch() -> None:
        if not first_claims:
            leased = Sample.objects.filter(queue_state="leased").values_list(
                "tenant__slug", flat=True
            )
            for slug in leased:
                first_claims[slug] = first_claims.get(slug, 0) + 1

    drive(lambda: run_finished(big)() and run_finished(small)(), timeout=120, on_tick=watch)

    # The very first claims went to both tenants.
    assert first_claims.get("small", 0) >= 1 and first_claims.get("big", 0) >= 1, first_claims

    def answered(run: Any) -> list[Any]:
        return sorted(Sample.objects.filter(run=run).values_list("completed_at", flat=True))

    big_times, small_times = answered(big), answered(small)
    assert len(big_times) == 100 and len(small_times) == 10
    assert small_times[0] < big_times[19]  # before the big tenant's 20% mark
    assert small_times[-1] < big_times[49]  # all of it before the big tenant is half done
    assert_invariants()
