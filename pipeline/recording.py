"""What a worker records around each step, as a wrapper (Sentry's `instrumented_task`): the
sample's context on every log line the step writes (geo_collect/logs.py) and the step's
duration by its outcome (geo_collect/metrics.py).

The outcomes themselves (retries, upstream responses, acceptance latency, settled evidence)
are counted where they happen, by the step's outcome (sampling/steps.py): nothing here reads
the sample again to find out what a step did.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from geo_collect import logs, metrics
from sampling.models import Sample, Step
from sampling.steps import load_for_step


def observe_step(run: Callable[..., str], *, sample_id: int, token: int, worker: str) -> str:
    """Run one step (`run` is the step runner, given the sample as read here: `loaded=`) and
    record what it did."""
    logs.clear()
    # Read once, as the step runner needs it, and handed to it: the step does not read it again.
    sample = load_for_step(sample_id)
    if sample is not None:
        _bind(sample, token)
    started = time.perf_counter()
    outcome = "error"
    try:
        outcome = run(sample_id=sample_id, token=token, worker=worker, loaded=sample)
        return outcome
    finally:
        if sample is not None:
            _observe(sample, outcome, time.perf_counter() - started)


def observe_batch(
    run: Callable[..., dict[int, str]], *, held: list[tuple[int, int]], worker: str
) -> dict[int, str]:
    """A batch submit (`run` is the batch runner, given the samples as read here): each
    sample's step is recorded as if it had run alone, with the batch's time."""
    logs.clear()
    loaded = {
        sample_id: sample
        for sample_id, _ in held
        if (sample := load_for_step(sample_id)) is not None
    }
    started = time.perf_counter()
    outcomes: dict[int, str] = {}
    try:
        outcomes = run(held=held, worker=worker, loaded=loaded)
        return outcomes
    finally:
        seconds = time.perf_counter() - started
        for sample_id, sample in loaded.items():
            _observe(sample, outcomes.get(sample_id, "error"), seconds)


def _bind(sample: Sample, token: int) -> None:
    logs.bind(
        run_id=str(sample.run_id),
        sample_id=sample.pk,
        token=token,
        platform=sample.platform,
        step=sample.step,
        # A submit makes the next attempt; other steps work under the latest one.
        attempt_no=sample.attempts + (sample.step == Step.SUBMIT) or None,
    )


def _observe(sample: Sample, outcome: str, seconds: float) -> None:
    metrics.STEP_DURATION.labels(sample.platform, sample.step, outcome).observe(seconds)
