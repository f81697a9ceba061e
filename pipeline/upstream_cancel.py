"""A cancelled run asks its upstreams to stop the tasks they accepted (issue 27, point 3).

`cancel_run` (pipeline/runs.py) stays local: in its transaction it writes one outbox row per
platform of the run whose connector can cancel (`Capabilities.cancellable`) and that has
work the upstream may hold (`enqueue_upstream_cancels`). The relay publishes it after the
commit to the platform's queue, and `cancel_accepted_tasks` (that row's task,
`pipeline.cancel_upstream`) then, outside any transaction, asks the upstream to stop every
accepted task of the run on that platform that has not finished, one call per task through
`upstream_call` (the platform's circuit counts it like any other call), and records each
answer (sampling.models.UpstreamCancel).

At most once per task: each cancel is claimed by a conditional update before it is sent, so
a redelivered message or a second cancel of the run asks nothing twice; a worker that dies
between the claim and the answer leaves the cancel asked and unanswered, never sent again
(docs/decisions.md, "A cancel reaches the upstream once, after the commit").

Billing does not follow the cancel: a task the upstream stopped ends through its own poll as
a failed sample (released as failed), a task it finished anyway is collected and charged.
"""

from __future__ import annotations

import logging
from functools import partial
from uuid import UUID

from django.db import transaction

from connectors.base import UpstreamError
from connectors.redaction import redact
from connectors.registry import get_connector
from pipeline.runs import cancels_upstream
from pipeline.step_context import upstream_call
from sampling.services import (
    claim_upstream_cancel,
    complete_outbox,
    plan_upstream_cancels,
    record_upstream_cancel,
)

log = logging.getLogger(__name__)


def cancel_accepted_tasks(
    *, run_id: UUID | str, platform: str, outbox_id: int | None = None
) -> int:
    """Ask the upstream to stop the run's accepted, unfinished tasks on `platform`, each
    once, and record every answer; then complete the outbox event. Returns how many were
    asked by this call."""
    if not cancels_upstream(platform):
        # Configured otherwise since the cancel (another vendor, the platform gone): there is
        # nothing to ask, and an event that never completes would be published forever.
        log.warning("upstream cancel run=%s: %s can no longer cancel", run_id, platform)
        with transaction.atomic():
            complete_outbox(outbox_id=outbox_id)
        return 0
    connector = get_connector(platform)
    asked = 0
    for cancel_id, upstream_id in plan_upstream_cancels(run_id=run_id, platform=platform):
        if not claim_upstream_cancel(cancel_id=cancel_id):
            continue  # asked by an earlier delivery, or finished since it was planned
        asked += 1
        acknowledged, error = False, ""
        try:
            acknowledged = upstream_call(platform, partial(connector.cancel, upstream_id))
        except UpstreamError as failure:
            error = str(failure)  # class, redacted message and status; never the body
        except Exception as failure:  # a connector's bug must not leave the others unasked
            log.exception("upstream cancel of %s on %s failed", upstream_id, platform)
            error = redact(f"{type(failure).__name__}: {failure}")
        record_upstream_cancel(cancel_id=cancel_id, acknowledged=acknowledged, error=error)
    log.info("upstream cancel run=%s platform=%s asked=%s", run_id, platform, asked)
    with transaction.atomic():
        complete_outbox(outbox_id=outbox_id)
    return asked
