"""Run lifecycle after launch: noticing the end, and what must follow it.

A run's end is one explicit chain (docs/decisions.md, "Run end is an action chain"):

1. check (`finish_run_if_done`, on the commit of every sample's last step and in the
   dispatcher's sweep): are all the run's samples terminal? If so, mark the run finished and
   write its `pipeline.run_finished` outbox row in the same transaction: exactly once.
2. do (`on_run_finished`, that outbox row's task, at least once): settle billing, book the
   attempts' upstream costs.
3. notify: in one transaction, each follower of the run's end writes the work it needs as
   outbox rows (api: one webhook delivery per endpoint and event, webhooks.record_run_end),
   relayed by the dispatcher after the commit. Followers sit above pipeline, so they register
   by name from their AppConfig.ready (`follow_run_end`); nothing else is called. The
   run-finished event is completed in that transaction: an event is done when its effect is,
   not when it was published (the relay publishes again what was not completed).

A sweep (`settle_held_runs`) settles any finished run that still holds money with no
settlement in progress, whatever happened to its event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, transaction
from django.db.models.functions import Coalesce, Now

from billing import selectors as billing_selectors
from billing import services as billing
from billing.costs import book_run_attempt_costs
from connectors.platforms import platform_queue
from connectors.registry import UnknownPlatform, get_connector
from geo_collect import metrics
from sampling import counters
from sampling.locking import Level, lock_run, locked
from sampling.models import (
    CollectionState,
    OutboxMessage,
    QueueState,
    Run,
    Sample,
    SubmissionState,
)
from sampling.selectors import Status, run_status
from sampling.services import complete_outbox, enqueue_outbox
from sampling.transitions import cancel_unaccepted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunEnded:
    """What a follower of a run's end is told: the run, its round (how many resumes it had:
    each finish after a resume is its own end) and its status once settled."""

    run_id: UUID
    round: int
    status: Status


# A follower writes outbox rows (and the rows they point at) in the caller's transaction, and
# does nothing else: no network I/O, no commit. It is called at least once per end, so it is
# idempotent (dedupe keys).
RunEndFollower = Callable[[RunEnded], None]
_followers: dict[str, RunEndFollower] = {}


def follow_run_end(*, name: str, follower: RunEndFollower) -> None:
    """Register what an upper layer does after every run's end, from its AppConfig.ready. By
    name: a second registration under the same name replaces the first."""
    _followers[name] = follower


def run_end_followers() -> dict[str, RunEndFollower]:
    return dict(_followers)


def finish_run_if_done(*, run_id: UUID) -> bool:
    """Mark the run finished once every planned sample is terminal; exactly once. Charges
    still queued are posted first: a finished run's billing is final."""
    if counters.open_samples(run_id=run_id):  # after every sample's last step: O(platforms)
        return False
    billing.post_pending_captures(run_id=run_id)
    with transaction.atomic():
        updated = Run.objects.filter(pk=run_id, finished_at=None).update(finished_at=Now())
        if updated == 1:
            # Each finish after a resume (pipeline/resume.py) settles what that round held.
            resumes = Run.objects.values_list("resumes", flat=True).get(pk=run_id)
            enqueue_outbox(
                task=RUN_FINISHED,
                payload={"run_id": str(run_id)},
                dedupe_key=run_finished_key(run_id=run_id, resumes=resumes),
            )
    return updated == 1


RUN_FINISHED = "pipeline.run_finished"


def run_finished_key(*, run_id: UUID | str, resumes: int) -> str:
    """The dedupe key of a run's run-finished event in a round (one per finish)."""
    return f"run-finished:{run_id}" + (f":{resumes}" if resumes else "")


def finish_ended_runs() -> int:
    """Safety net for the dispatcher: mark runs finished whose last sample ended while the
    process that ended it died before checking."""
    open_runs = Run.objects.filter(finished_at=None).exclude(
        samples__queue_state__in=[QueueState.READY, QueueState.LEASED, QueueState.PARKED]
    )
    return sum(
        finish_run_if_done(run_id=run_id) for run_id in open_runs.values_list("pk", flat=True)
    )


def on_run_finished(*, run_id: UUID | str, outbox_id: int | None = None) -> None:
    """What follows a run's end, delivered through the outbox (at least once, so idempotent):
    billing charges what completed and releases the rest of the hold; then the followers are
    told, so a webhook's receiver finds the run's billing final. The event (`outbox_id`) is
    completed in the followers' transaction, the last step: until then the relay publishes it
    again, and everything before is repeated harmlessly."""
    billing.settle_run(run_id=run_id)
    book_run_attempt_costs(run_id=run_id)
    status = run_status(run_id=run_id)
    log.info("run finished run=%s outcome=%s %s", run_id, status.outcome, status.as_dict())
    metrics.run_finished(outcome=status.outcome.value)
    round_ = Run.objects.values_list("resumes", flat=True).get(pk=run_id)
    ended = RunEnded(run_id=UUID(str(run_id)), round=round_, status=status)
    notify_run_ended(ended=ended, outbox_id=outbox_id)


def notify_run_ended(*, ended: RunEnded, outbox_id: int | None = None) -> None:
    """Every follower's outbox work in one transaction: all of it is relayed, or none; the
    run-finished event is completed in it."""
    with transaction.atomic():
        for follower in _followers.values():
            follower(ended)
        complete_outbox(outbox_id=outbox_id)


def settle_held_runs(*, limit: int = 20) -> int:
    """The dispatcher's sweep (registered in pipeline/apps.py): settle every finished run
    that still holds money `settle_run` would settle now and has no settlement in progress,
    that is no run-finished event of its round younger than GEO_OUTBOX_REDELIVER_SECONDS and
    not completed. Whose event never completed (lost, or never written) gets the whole chain
    here, completing the event, so its followers are told too; whose event completed (a
    settlement that left money behind) is settled again. Returns how many it settled."""
    settled = 0
    for run_id, resumes in billing_selectors.finished_runs_holding().values_list("pk", "resumes")[
        :limit
    ]:
        event = OutboxMessage.objects.filter(
            dedupe_key=run_finished_key(run_id=run_id, resumes=resumes)
        ).first()
        if event is not None and event.completed_at is None and _in_progress(event):
            continue  # the relay publishes it again once it is overdue
        try:
            if event is None or event.completed_at is None:
                log.warning("settling run=%s: its run-finished event did not complete", run_id)
                on_run_finished(run_id=run_id, outbox_id=event.pk if event else None)
            else:
                log.warning("settling run=%s again: it still holds money", run_id)
                billing.settle_run(run_id=run_id)
                book_run_attempt_costs(run_id=run_id)
        except DatabaseError:
            raise  # an outage: the dispatcher's loop rides it out
        except Exception:  # one run that cannot settle must not keep the others held
            log.exception("settling held run=%s failed", run_id)
            continue
        settled += 1
    return metrics.held_runs_settled(settled)


def held_runs_every() -> float:
    """How often the sweep looks: a tenth of the redelivery timeout. Its query visits every
    finished run whose hold still has money, and runs with samples in review keep theirs;
    nothing it repairs is due before the timeout anyway."""
    return float(settings.GEO_OUTBOX_REDELIVER_SECONDS) / 10


def _in_progress(event: OutboxMessage) -> bool:
    """Written, or published, within the redelivery timeout (database time)."""
    recent = Now() - timedelta(seconds=float(settings.GEO_OUTBOX_REDELIVER_SECONDS))
    return (
        OutboxMessage.objects.filter(pk=event.pk)
        .annotate(last=Coalesce("sent_at", "created_at"))
        .filter(last__gte=recent)
        .exists()
    )


class RunAlreadyFinished(Exception):
    """A finished run cannot be cancelled: its outcome stands (it was `all_succeeded` and
    became `cancelled`, leaving `?status=finished`)."""


def cancel_run(*, run_id: UUID | str, reason: str = "cancelled by operator") -> int:
    """Stop a run locally. Samples the upstream never accepted (due, unclaimed, still
    `planned`) fail as cancelled and their share of the hold is released; work already
    accepted upstream or in a worker's hands goes on, and is charged if it completes. The
    upstreams that can stop a task are asked to, after the commit, through the outbox
    (pipeline/upstream_cancel.py): a task one stops fails through its own poll. Returns how
    many samples were cancelled. Idempotent on a cancelled run; a run that finished without
    being cancelled raises `RunAlreadyFinished`, changing nothing (checked under the run's
    lock: a run that finishes meanwhile is seen)."""
    with transaction.atomic():
        run = lock_run(run_id)
        if run.finished_at is not None and run.cancelled_at is None:
            raise RunAlreadyFinished(f"run {run.pk} already finished; there is nothing to cancel")
        if run.cancelled_at is None:
            Run.objects.filter(pk=run.pk).update(cancelled_at=Now())
        cancellable = locked(
            Sample.objects.filter(
                run_id=run.pk,
                queue_state__in=[QueueState.READY, QueueState.PARKED],
                submission_state=SubmissionState.PLANNED,
            ),
            level=Level.SAMPLE,
            skip_locked=True,
        )
        cancelled = sum(cancel_unaccepted(sample, reason=reason) for sample in cancellable)
        # What the upstreams accepted is asked to stop after the commit, by a worker.
        enqueue_upstream_cancels(run_id=run.pk, resumes=run.resumes)
    billing.release_unaccepted_hold(run_id=run.pk)
    finish_run_if_done(run_id=run.pk)
    return cancelled


CANCEL_UPSTREAM = "pipeline.cancel_upstream"


def cancels_upstream(platform: str) -> bool:
    """Whether `platform`'s connector, as this deployment configures it, can stop an
    accepted task. A platform no longer known or configured cannot."""
    try:
        return get_connector(platform).can_cancel()
    except (UnknownPlatform, ImproperlyConfigured):
        return False


def upstream_cancel_key(*, run_id: UUID | str, platform: str, resumes: int) -> str:
    """The dedupe key of a run's upstream cancel on a platform in a round (a resumed run
    cancelled again asks again for its new tasks)."""
    return f"upstream-cancel:{run_id}:{platform}" + (f":{resumes}" if resumes else "")


def platforms_to_stop_upstream(*, run_id: UUID | str) -> list[str]:
    """The run's platforms whose connector can cancel and whose samples the upstream
    accepted, or may be accepting, without their collection ended: those a cancel asks to
    stop (the cancel's confirmation page names them)."""
    in_upstream_hands = (
        Sample.objects.filter(
            run_id=run_id,
            submission_state__in=[SubmissionState.SUBMITTING, SubmissionState.ACCEPTED],
            collection_state__in=[CollectionState.QUEUED, CollectionState.RUNNING],
        )
        .values_list("platform", flat=True)
        .distinct()
    )
    return sorted(p for p in set(in_upstream_hands) if cancels_upstream(p))


def enqueue_upstream_cancels(*, run_id: UUID | str, resumes: int) -> list[str]:
    """In the cancelling transaction: one outbox row per platform a cancel asks to stop
    (`platforms_to_stop_upstream`). Returns those platforms."""
    platforms = platforms_to_stop_upstream(run_id=run_id)
    for platform in platforms:
        enqueue_outbox(
            task=CANCEL_UPSTREAM,
            payload={"run_id": str(run_id), "platform": platform},
            queue=platform_queue(platform),
            dedupe_key=upstream_cancel_key(run_id=run_id, platform=platform, resumes=resumes),
        )
    return platforms
