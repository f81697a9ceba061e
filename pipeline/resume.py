"""Resume a finished or stuck run by its valid-completed set.

Every sample that is not valid and completed (never run, failed, invalid, waiting in review
because its answer could not be parsed, parked) is asked again as a new attempt of the same
sample; valid completed samples are kept untouched. A provider task we gave up polling is
polled again instead (`task_may_be_there`): never a second task for one accepted sample. The
re-open is the one recorded way out of a terminal state
(`sampling.transitions.reopen_for_resume`). Billing holds a sample's share again only if it was
released; a sample is charged at most once whatever happens.

The console and the API call `resume_run`; `manage.py resume_run` prints its plan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import transaction

from billing.rehold import rehold_released
from connectors.registry import get_connector
from connectors.retry import GAVE_UP_ON_ACCEPTED
from sampling.locking import lock_run, lock_sample
from sampling.models import CollectionState, QueueState, Run, Sample, Step, SubmissionState
from sampling.transitions import reopen_for_resume

NEVER_RUN = "never_run"


class ResumeRefused(Exception):
    """The run cannot be resumed as it is; the message says why. Nothing was changed."""


@dataclass
class ResumePlan:
    run_id: str
    redo: dict[int, str] = field(default_factory=dict)  # sample id -> reason
    kept: int = 0
    in_flight: int = 0
    resume_no: int = 0  # the resume that applied it (0: a dry run)

    def as_dict(self) -> dict[str, Any]:
        return {
            "redo": len(self.redo),
            "kept": self.kept,
            "by_reason": dict(sorted(Counter(self.redo.values()).items())),
        }


def redo_reason(sample: Sample) -> str | None:
    """Why a sample must be asked again, or None when it is kept (valid and completed) or
    still in a worker's hands (see `_in_flight`)."""
    completed = sample.collection_state == CollectionState.COMPLETED
    if completed and sample.validity == "valid":
        return None
    if sample.queue_state == QueueState.PARKED:
        return "parked"
    if sample.queue_state != QueueState.DONE:
        return NEVER_RUN if sample.attempts == sample.attempts_before_resume else None
    if sample.collection_state == CollectionState.FAILED:
        return "failed"
    if sample.validity == "invalid":
        return f"invalid:{sample.validity_reason or 'unspecified'}"
    return f"analysis_{sample.analysis_state}"  # review (unparsed answer) or failed


def task_may_be_there(sample: Sample) -> bool:
    """An accepted provider task that we, not the provider, gave up on (polls past their
    deadline, a fetch that kept failing, a poll parked as poison): it may still be running or
    done upstream, so a resume polls it again. Submitting again would make a second task,
    billed twice upstream. A task the provider said failed or lost is asked again as usual."""
    if sample.submission_state != SubmissionState.ACCEPTED or not sample.upstream_id:
        return False
    if not get_connector(sample.platform).capabilities().asynchronous:
        return False  # a direct API's answer came with its acceptance: nothing to poll
    if sample.queue_state == QueueState.PARKED:
        return sample.step in (Step.POLL, Step.EVIDENCE)
    return sample.collection_state == CollectionState.FAILED and sample.failure_reason.startswith(
        GAVE_UP_ON_ACCEPTED
    )


def _in_flight(sample: Sample) -> bool:
    """Work a worker holds or will pick up (an accepted task to poll, a retry due later):
    resuming would race it."""
    kept = sample.collection_state == CollectionState.COMPLETED and sample.validity == "valid"
    return not kept and redo_reason(sample) is None


def plan_resume(*, run_id: UUID | str) -> ResumePlan:
    """What a resume would do now. Reads only."""
    plan = ResumePlan(run_id=str(run_id))
    for sample in Sample.objects.filter(run_id=run_id).order_by("pk"):
        reason = redo_reason(sample)
        if reason is not None:
            plan.redo[sample.pk] = reason
        elif _in_flight(sample):
            plan.in_flight += 1
        else:
            plan.kept += 1
    return plan


def resume_run(*, run_id: UUID | str, dry_run: bool = False, actor: str = "") -> ResumePlan:
    """Re-open every not-valid-completed sample of the run as a new attempt, in one
    transaction (locks: run, hold account, samples, in the order of sampling/locking.py).
    Raises ResumeRefused while samples are still in flight, Run.DoesNotExist for an unknown
    run, billing.services.InsufficientFunds when released shares cannot be held again."""
    if dry_run:
        Run.objects.only("pk").get(pk=run_id)
        return _checked(plan_resume(run_id=run_id))
    with transaction.atomic():
        run = lock_run(run_id)
        plan = _checked(plan_resume(run_id=run.pk))
        if not plan.redo:
            return plan  # every sample is valid and completed: nothing to re-open
        resume_no = run.resumes + 1
        rehold_released(run=run, sample_ids=list(plan.redo), resume_no=resume_no)
        for sample_id, reason in plan.redo.items():
            if reason == NEVER_RUN:
                continue  # still due: its first attempt is what it needs
            sample = lock_sample(sample_id)
            reopen_for_resume(
                sample,
                resume_no=resume_no,
                reason=reason,
                actor=actor,
                poll_again=task_may_be_there(sample),
            )
        Run.objects.filter(pk=run.pk).update(resumes=resume_no, finished_at=None, cancelled_at=None)
        plan.resume_no = resume_no
    return plan


def _checked(plan: ResumePlan) -> ResumePlan:
    if plan.in_flight:
        raise ResumeRefused(
            f"run {plan.run_id} has {plan.in_flight} sample(s) still in flight; resume a "
            "finished or stuck run (wait for them, or cancel the run first)"
        )
    return plan
