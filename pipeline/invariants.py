"""The invariants that must survive crashes, duplicates and late writers (docs/architecture.md).

Each check is SQL over the whole database (or one run) and returns the violations it found,
each naming the run and sample it concerns; an empty list means the invariant holds.
`check_all` runs every check; `python manage.py check_invariants [--run ID]` prints them.

The checks take no locks and, on PostgreSQL, read one snapshot, so they can run beside a live
run. Some are about liveness more than safety and are meant for a quiet system: a run whose
samples are all terminal but that is not marked finished (true for a moment after the last
sample's commit), an outbox row unpublished for longer than OUTBOX_GRACE_SECONDS or published
and not completed by its consumer for that long past the redelivery timeout, a run finished
that long ago still holding money its settlement would charge or release, and a costed
answer of such a run not booked. `gap_counts` gives the run-end ones as counts (metrics).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Now

from analysis.models import Mention
from analysis.reports import ReportIntegrityError, build_run_report
from billing.models import Account, AccountKind, JournalEntry, SampleSettlement
from billing.selectors import finished_runs_holding
from evidence.models import Capture
from sampling import buckets, counters
from sampling.buckets import Not, all_of
from sampling.models import (
    AnswerInbox,
    Attempt,
    OutboxMessage,
    Run,
    Sample,
    SampleReopen,
    StaleWrite,
)
from sampling.selectors import run_status

LIMIT = 50  # violations reported per check; the rest are counted in one line

SAMPLE = Sample._meta.db_table
RUN = Run._meta.db_table
ATTEMPT = Attempt._meta.db_table
STALE = StaleWrite._meta.db_table
REOPEN = SampleReopen._meta.db_table
OUTBOX = OutboxMessage._meta.db_table
CAPTURE = Capture._meta.db_table
MENTION = Mention._meta.db_table
INBOX = AnswerInbox._meta.db_table
ENTRY = JournalEntry._meta.db_table

# The outcome buckets (sampling/buckets.py, their one definition) as SQL over `s`
# (sampling_sample). The plain count here and the trigger-maintained counters behind
# run_status are two routes to the same numbers; `check_report_counts` compares them.
BUCKETS = tuple(bucket.name for bucket in buckets.OUTCOMES)
_SUCCEEDED_QUEUED = all_of(buckets.SUCCEEDED.condition, Not(buckets.DONE))
RUN_STATUS_FIELDS = ("succeeded", "failed", "invalid", "review", "pending", "uncertain", "parked")
OUTBOX_GRACE_SECONDS = 300


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    run_id: str | None = None
    sample_id: int | None = None

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.message}"


# --- helpers --------------------------------------------------------------------------------


def _rows(sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or {})
        return list(cursor.fetchall())


def _run_filter(column: str, run_id: UUID | str | None) -> tuple[str, dict[str, Any]]:
    """`AND <column> = <run>` and its parameter, or nothing when every run is checked.
    UUIDs are compared as the database stores them (PostgreSQL: uuid; SQLite: 32 hex)."""
    if run_id is None:
        return "", {}
    value = UUID(str(run_id))
    param: Any = value if connection.vendor == "postgresql" else value.hex
    return f"AND {column} = %(run)s", {"run": param}


def _sample_violations(
    name: str, sql: str, params: dict[str, Any], message: Callable[..., str]
) -> list[Violation]:
    """One violation per row of `sql`, whose first two columns are the sample id and the run
    id; `message` is called with the whole row."""
    return [
        Violation(name, message(*row), run_id=str(row[1]), sample_id=row[0])
        for row in _rows(sql, params)
    ]


def _capped(invariant: str, found: Sequence[Violation]) -> list[Violation]:
    if len(found) <= LIMIT:
        return list(found)
    more = Violation(invariant, f"... and {len(found) - LIMIT} more violations of this kind")
    return [*found[:LIMIT], more]


def _states(row: Sequence[Any]) -> str:
    """submission/collection/evidence/analysis, queue state, step and validity."""
    sub, col, ev, an, queue, step, validity = row
    return f"{sub}/{col}/{ev}/{an}, queue {queue}, step {step}, validity {validity or '-'}"


_STATE_COLUMNS = (
    "s.submission_state, s.collection_state, s.evidence_state, s.analysis_state,"
    " s.queue_state, s.step, s.validity"
)


# --- 1. every planned sample accounted for exactly once -------------------------------------


def check_planned_samples_accounted(run_id: UUID | str | None = None) -> list[Violation]:
    """Each run has exactly its planned number of samples, and each sample is in exactly one
    outcome bucket (succeeded, failed, invalid, review, pending)."""
    name = "planned_accounted"
    where, params = _run_filter("r.id", run_id)
    found = [
        Violation(
            name,
            f"run {rid}: {planned} samples planned but {actual} exist",
            run_id=str(rid),
        )
        for rid, planned, actual in _rows(
            f"""SELECT r.id, r.planned_samples, COUNT(s.id)
                  FROM {RUN} r LEFT JOIN {SAMPLE} s ON s.run_id = r.id
                 WHERE TRUE {where}
                 GROUP BY r.id, r.planned_samples
                HAVING COUNT(s.id) <> r.planned_samples
                 ORDER BY r.id""",
            params,
        )
    ]
    where, params = _run_filter("s.run_id", run_id)
    # The buckets exclude each other by definition; what can go wrong is a finished sample in
    # none of them, or a succeeded one still queued, which run_status also counts as pending.
    unclassified = buckets.UNCLASSIFIED.sql("s")
    for sample_id, rid, in_none, *states in _rows(
        f"""SELECT s.id, s.run_id, {unclassified}, {_STATE_COLUMNS}
              FROM {SAMPLE} s
             WHERE ({unclassified} OR ({_SUCCEEDED_QUEUED.sql("s")})) {where}
             ORDER BY s.id""",
        params,
    ):
        problem = (
            "is in no outcome bucket"
            if in_none
            else "is succeeded but not terminal (run_status counts it as pending too)"
        )
        found.append(
            Violation(
                name,
                f"sample {sample_id} (run {rid}) {problem}: {_states(states)}",
                run_id=str(rid),
                sample_id=sample_id,
            )
        )
    return _capped(name, found)


# --- 2. no sample counted twice in any report denominator ----------------------------------


def _sql_counts(run_id: UUID | str | None) -> dict[str, dict[str, int]]:
    where, params = _run_filter("s.run_id", run_id)
    sums = ", ".join(
        buckets.count_sql(b) for b in (*buckets.OUTCOMES, buckets.UNCERTAIN, buckets.PARKED)
    )
    counts: dict[str, dict[str, int]] = {}
    for row in _rows(
        f"""SELECT s.run_id, COUNT(*), {sums}
              FROM {SAMPLE} s WHERE TRUE {where} GROUP BY s.run_id""",
        params,
    ):
        keys = ("samples", *BUCKETS, "uncertain", "parked")
        counts[str(UUID(str(row[0])))] = {
            k: int(v or 0) for k, v in zip(keys, row[1:], strict=True)
        }
    return counts


def check_report_counts(run_id: UUID | str | None = None) -> list[Violation]:
    """The status aggregation service (sampling.selectors) agrees with a plain SQL count and
    its buckets add up to the planned samples, and the report (analysis.reports) passes its own
    conservation and double-count checks: no sample is dropped from, or counted twice in, a
    denominator."""
    name = "report_counts"
    found: list[Violation] = []
    sql_counts = _sql_counts(run_id)
    runs = Run.objects.all() if run_id is None else Run.objects.filter(pk=run_id)
    for run in runs.order_by("created_at", "id").iterator():
        rid = str(run.pk)
        status = run_status(run_id=run.pk)
        parts = (status.succeeded, status.failed, status.invalid, status.review, status.pending)
        if sum(parts) != status.planned:
            found.append(
                Violation(
                    name,
                    f"run {rid}: run_status buckets sum to {sum(parts)} "
                    f"(succeeded {parts[0]} + failed {parts[1]} + invalid {parts[2]} + review "
                    f"{parts[3]} + pending {parts[4]}), planned {status.planned}",
                    run_id=rid,
                )
            )
        counted = sql_counts.get(rid, dict.fromkeys(("samples", *RUN_STATUS_FIELDS), 0))
        for key in RUN_STATUS_FIELDS:
            if getattr(status, key) != counted[key]:
                found.append(
                    Violation(
                        name,
                        f"run {rid}: run_status says {key}={getattr(status, key)}, "
                        f"SQL count says {counted[key]}",
                        run_id=rid,
                    )
                )
        # The auditable report counts the same samples by a record scan and by SQL, per run,
        # platform and question; any difference it refuses on is a denominator violation.
        try:
            build_run_report(run_id=run.pk, with_trend=False)
        except ReportIntegrityError as refused:
            found += [
                Violation(name, f"run {rid}: report: {d}", run_id=rid) for d in refused.differences
            ]
    return _capped(name, found)


# --- 3. no accepted upstream task without its record ----------------------------------------


def check_accepted_have_records(run_id: UUID | str | None = None) -> list[Violation]:
    """An accepted sample names its upstream task and has exactly one accepted attempt with
    that id; an accepted attempt belongs to an accepted sample; a collected answer has a
    capture; a capture's upstream task is one of the sample's attempts."""
    name = "accepted_recorded"
    where, params = _run_filter("s.run_id", run_id)
    # Attempts before the sample's latest re-open (pipeline/resume.py) belong to an earlier
    # round: their acceptance is history, recorded in sampling_samplereopen.
    this_round = "a.sample_id = s.id AND a.attempt_no > s.attempts_before_resume"
    found: list[Violation] = []
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, s.upstream_id, s.accepted_at,
                   (SELECT COUNT(*) FROM {ATTEMPT} a WHERE {this_round}
                       AND a.status = 'accepted' AND a.upstream_id = s.upstream_id),
                   (SELECT COUNT(*) FROM {ATTEMPT} a WHERE {this_round}
                       AND a.status = 'accepted')
              FROM {SAMPLE} s
             WHERE s.submission_state = 'accepted' {where}
               AND (s.upstream_id = '' OR s.accepted_at IS NULL
                    OR (SELECT COUNT(*) FROM {ATTEMPT} a WHERE {this_round}
                          AND a.status = 'accepted' AND a.upstream_id = s.upstream_id) <> 1
                    OR (SELECT COUNT(*) FROM {ATTEMPT} a WHERE {this_round}
                          AND a.status = 'accepted') <> 1)
             ORDER BY s.id""",
        params,
        lambda sid, rid, upstream_id, accepted_at, matching, accepted: (
            f"sample {sid} (run {rid}) is accepted with upstream id {upstream_id or '(none)'}"
            f"{'' if accepted_at else ', no accepted_at'}: {accepted} accepted attempt(s), "
            f"{matching} of them with that upstream id (expected exactly 1)"
        ),
    )
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, s.submission_state, a.attempt_no, a.upstream_id
              FROM {ATTEMPT} a JOIN {SAMPLE} s ON s.id = a.sample_id
             WHERE a.status = 'accepted' AND s.submission_state <> 'accepted'
               AND a.attempt_no > s.attempts_before_resume {where}
             ORDER BY s.id, a.attempt_no""",
        params,
        lambda sid, rid, state, attempt_no, upstream_id: (
            f"sample {sid} (run {rid}): attempt {attempt_no} was accepted upstream "
            f"({upstream_id or 'no id'}) but the sample is {state}"
        ),
    )
    for row in _rows(
        f"""SELECT s.id, s.run_id, {_STATE_COLUMNS}
              FROM {SAMPLE} s
             WHERE ((s.collection_state IN ('running', 'completed')
                     AND s.submission_state <> 'accepted')
                    OR (s.collection_state = 'completed' AND NOT EXISTS (
                        SELECT 1 FROM {CAPTURE} c WHERE c.sample_id = s.id
                           AND c.collection_state = 'completed')
                        -- an answer the parser did not understand: kept raw, in review
                        AND s.analysis_reason NOT LIKE 'parse_failed%%')) {where}
             ORDER BY s.id""",
        params,
    ):
        found.append(
            Violation(
                name,
                f"sample {row[0]} (run {row[1]}) has a collected answer without an accepted "
                f"submission or without a completed capture: {_states(row[2:])}",
                run_id=str(row[1]),
                sample_id=row[0],
            )
        )
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, c.id, c.revision, c.upstream_id
              FROM {CAPTURE} c JOIN {SAMPLE} s ON s.id = c.sample_id
             WHERE c.upstream_id <> '' {where}
               AND NOT EXISTS (SELECT 1 FROM {ATTEMPT} a
                                WHERE a.sample_id = s.id AND a.upstream_id = c.upstream_id)
             ORDER BY s.id, c.revision""",
        params,
        lambda sid, rid, capture_id, revision, upstream_id: (
            f"sample {sid} (run {rid}): capture {capture_id} (revision {revision}) comes "
            f"from upstream task {upstream_id}, which no attempt of the sample recorded"
        ),
    )
    return _capped(name, found)


# --- 4. no upstream task submitted twice without a recorded reason --------------------------


def check_no_unrecorded_resubmit(run_id: UUID | str | None = None) -> list[Violation]:
    """A sample is submitted again only after its earlier attempt ended as failed with a
    recorded reason (an error, or "upstream has no task for this key" from verification).
    An attempt whose outcome is unknown (started / unknown) stays the latest attempt, on a
    sample that is still submitting or uncertain, until it is resolved."""
    name = "no_blind_resubmit"
    where, params = _run_filter("s.run_id", run_id)
    found: list[Violation] = []
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, a.attempt_no, a.status, a.error_class,
                   (SELECT MIN(b.attempt_no) FROM {ATTEMPT} b
                     WHERE b.sample_id = a.sample_id AND b.attempt_no > a.attempt_no),
                   a.idempotency_key
              FROM {ATTEMPT} a JOIN {SAMPLE} s ON s.id = a.sample_id
             WHERE EXISTS (SELECT 1 FROM {ATTEMPT} b
                            WHERE b.sample_id = a.sample_id AND b.attempt_no > a.attempt_no)
               AND NOT (a.status = 'failed' AND (a.error_class <> '' OR a.error_message <> ''))
               AND NOT EXISTS (SELECT 1 FROM {REOPEN} r WHERE r.sample_id = a.sample_id
                                  AND r.attempts_before >= a.attempt_no)
               {where}
             ORDER BY s.id, a.attempt_no""",
        params,
        lambda sid, rid, attempt_no, status, error_class, later, key: (
            f"sample {sid} (run {rid}): attempt {attempt_no} (key {key}) ended {status}"
            f"{' (' + error_class + ')' if error_class else ' without a recorded reason'} "
            f"and attempt {later} submitted the question again"
        ),
    )
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, a.attempt_no, a.status, s.submission_state
              FROM {ATTEMPT} a JOIN {SAMPLE} s ON s.id = a.sample_id
             WHERE a.status IN ('started', 'unknown')
               AND s.submission_state NOT IN ('submitting', 'uncertain') {where}
             ORDER BY s.id, a.attempt_no""",
        params,
        lambda sid, rid, attempt_no, status, state: (
            f"sample {sid} (run {rid}) is {state} but attempt {attempt_no} is still "
            f"{status}: an unresolved submission was left behind"
        ),
    )
    return _capped(name, found)


# --- 5. no result written with a stale token ------------------------------------------------


def check_fencing(run_id: UUID | str | None = None) -> list[Violation]:
    """No capture was written with a token after that token was refused as stale; no row
    carries a token newer than its sample's; one lease writes at most one completed answer."""
    name = "fencing"
    where, params = _run_filter("s.run_id", run_id)
    found: list[Violation] = []
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, c.id, c.fencing_token, w.id, w.operation
              FROM {CAPTURE} c
              JOIN {STALE} w ON w.sample_id = c.sample_id
                            AND w.presented_token = c.fencing_token
                            AND c.created_at >= w.created_at
              JOIN {SAMPLE} s ON s.id = c.sample_id
             WHERE TRUE {where}
             ORDER BY s.id, c.id""",
        params,
        lambda sid, rid, capture_id, token, stale_id, operation: (
            f"sample {sid} (run {rid}): capture {capture_id} was written with token {token} "
            f"after stale write {stale_id} ({operation}) refused that token"
        ),
    )
    for table, label in ((CAPTURE, "capture"), (ATTEMPT, "attempt")):
        found += _sample_violations(
            name,
            f"""SELECT s.id, s.run_id, x.id, x.fencing_token, s.fencing_token
                  FROM {table} x JOIN {SAMPLE} s ON s.id = x.sample_id
                 WHERE x.fencing_token > s.fencing_token {where}
                 ORDER BY s.id, x.id""",
            params,
            lambda sid, rid, row_id, token, current, label=label: (
                f"sample {sid} (run {rid}): {label} {row_id} carries token {token}, newer "
                f"than the sample's {current}"
            ),
        )
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, w.id, w.presented_token, w.current_token
              FROM {STALE} w JOIN {SAMPLE} s ON s.id = w.sample_id
             WHERE w.presented_token > w.current_token {where}
             ORDER BY s.id, w.id""",
        params,
        lambda sid, rid, stale_id, presented, current: (
            f"sample {sid} (run {rid}): stale write {stale_id} presented token {presented}, "
            f"newer than the current {current}"
        ),
    )
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, c.fencing_token, COUNT(*)
              FROM {CAPTURE} c JOIN {SAMPLE} s ON s.id = c.sample_id
             WHERE c.fencing_token IS NOT NULL AND c.collection_state = 'completed' {where}
             GROUP BY s.id, s.run_id, c.fencing_token HAVING COUNT(*) > 1
             ORDER BY s.id""",
        params,
        lambda sid, rid, token, n: (
            f"sample {sid} (run {rid}): {n} completed captures written under one lease "
            f"(token {token})"
        ),
    )
    return _capped(name, found)


# --- 6. mentions counted once ---------------------------------------------------------------


def check_mentions_counted_once(run_id: UUID | str | None = None) -> list[Violation]:
    """At most one mention row per (sample, entity) in each analysis revision, each on a
    completed capture of that sample: a repeated analysis replaces its rows, it never adds
    to them (a re-analysis is a new revision)."""
    name = "mentions_once"
    where, params = _run_filter("s.run_id", run_id)
    found: list[Violation] = []
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, m.entity, COUNT(*), COUNT(DISTINCT m.capture_id)
              FROM {MENTION} m JOIN {SAMPLE} s ON s.id = m.sample_id
             WHERE TRUE {where}
             GROUP BY s.id, s.run_id, m.revision_id, m.entity HAVING COUNT(*) > 1
             ORDER BY s.id, m.entity""",
        params,
        lambda sid, rid, entity, n, captures: (
            f"sample {sid} (run {rid}): entity {entity!r} has {n} mention rows "
            f"(from {captures} capture(s))"
        ),
    )
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, m.id, c.sample_id, c.collection_state
              FROM {MENTION} m JOIN {SAMPLE} s ON s.id = m.sample_id
              JOIN {CAPTURE} c ON c.id = m.capture_id
             WHERE (c.sample_id <> m.sample_id OR c.collection_state <> 'completed') {where}
             ORDER BY s.id, m.id""",
        params,
        lambda sid, rid, mention_id, capture_sample, capture_state: (
            f"sample {sid} (run {rid}): mention {mention_id} is on a capture of sample "
            f"{capture_sample} in state {capture_state}"
        ),
    )
    return _capped(name, found)


# --- 7. queue and run state agree -----------------------------------------------------------


def check_queue_states(run_id: UUID | str | None = None) -> list[Violation]:
    """Leased samples have a lease; done means no next step and back; parked samples say
    why; uncertain samples wait for verification or review; finished runs have only terminal
    samples, and runs whose samples are all terminal are marked finished."""
    name = "queue_state"
    where, params = _run_filter("s.run_id", run_id)
    rules = {
        "leased without lease_until": "s.queue_state = 'leased' AND s.lease_until IS NULL",
        "done with a next step, or no next step but not done": (
            "(s.queue_state = 'done') <> (s.step = 'none')"
        ),
        "parked without a reason": "s.queue_state = 'parked' AND s.failure_reason = ''",
        # Uncertain samples wait at `verify`, unless a reviewer kept them as failed
        # placeholders (sampling.review): acceptance stays unknown, the collection failed.
        "uncertain but not waiting for verification or review": (
            "s.submission_state = 'uncertain' AND s.step <> 'verify'"
            " AND NOT (s.queue_state = 'done' AND s.collection_state = 'failed'"
            " AND s.failure_reason LIKE 'reviewed: %%')"
        ),
        # A failed collection ends evidence and analysis too (sampling.transitions): nothing
        # may still say "analysing" for a sample that will never be analysed.
        "collection failed but evidence or analysis still pending": (
            "s.queue_state = 'done' AND s.collection_state = 'failed'"
            " AND (s.evidence_state = 'pending' OR s.analysis_state = 'pending')"
        ),
        # Or at `archive`: an unusable answer kept in the inbox is archived before it is asked
        # again (and may wait there for a person if archiving keeps failing).
        "submitting outside a submit step": (
            "s.submission_state = 'submitting'"
            " AND NOT (s.step = 'submit' AND s.queue_state IN ('leased', 'ready'))"
            " AND NOT (s.step = 'archive' AND s.queue_state IN ('leased', 'ready', 'parked'))"
        ),
    }
    found: list[Violation] = []
    for label, condition in rules.items():
        for row in _rows(
            f"""SELECT s.id, s.run_id, {_STATE_COLUMNS} FROM {SAMPLE} s
                 WHERE {condition} {where} ORDER BY s.id""",
            params,
        ):
            found.append(
                Violation(
                    name,
                    f"sample {row[0]} (run {row[1]}) {label}: {_states(row[2:])}",
                    run_id=str(row[1]),
                    sample_id=row[0],
                )
            )
    found += check_runs_finished(run_id)
    return _capped(name, found)


def check_runs_finished(run_id: UUID | str | None = None) -> list[Violation]:
    name = "queue_state"
    where, params = _run_filter("r.id", run_id)
    found: list[Violation] = []
    for rid, open_samples in _rows(
        f"""SELECT r.id, COUNT(s.id) FROM {RUN} r JOIN {SAMPLE} s ON s.run_id = r.id
             WHERE r.finished_at IS NOT NULL AND s.queue_state <> 'done' {where}
             GROUP BY r.id ORDER BY r.id""",
        params,
    ):
        found.append(
            Violation(
                name,
                f"run {rid} is marked finished but {open_samples} of its samples are not terminal",
                run_id=str(rid),
            )
        )
    for (rid,) in _rows(
        f"""SELECT r.id FROM {RUN} r
             WHERE r.finished_at IS NULL AND r.planned_samples > 0 {where}
               AND (SELECT COUNT(*) FROM {SAMPLE} s
                     WHERE s.run_id = r.id AND s.queue_state = 'done') = r.planned_samples
               AND NOT EXISTS (SELECT 1 FROM {SAMPLE} s
                                WHERE s.run_id = r.id AND s.queue_state <> 'done')
             ORDER BY r.id""",
        params,
    ):
        found.append(
            Violation(
                name,
                f"run {rid}: every sample is terminal but the run is not marked finished",
                run_id=str(rid),
            )
        )
    return found


def check_outbox_relayed(run_id: UUID | str | None = None) -> list[Violation]:
    """A finished run has its run-finished message in the outbox, nothing waits in the outbox
    unpublished for longer than a relay could take, and nothing published stays uncompleted
    by its consumer for longer than the relay takes to publish it again."""
    name = "outbox"
    where, params = _run_filter("r.id", run_id)
    found: list[Violation] = []
    key = "'run-finished:' || CAST(r.id AS TEXT)"
    if connection.vendor != "postgresql":  # SQLite stores the uuid as 32 hex digits
        key = (
            "'run-finished:' || substr(r.id, 1, 8) || '-' || substr(r.id, 9, 4) || '-' ||"
            " substr(r.id, 13, 4) || '-' || substr(r.id, 17, 4) || '-' || substr(r.id, 21)"
        )
    for (rid,) in _rows(
        f"""SELECT r.id FROM {RUN} r
             WHERE r.finished_at IS NOT NULL {where}
               AND NOT EXISTS (SELECT 1 FROM {OUTBOX} o WHERE o.dedupe_key = {key})
             ORDER BY r.id""",
        params,
    ):
        found.append(
            Violation(
                name,
                f"run {rid} is finished but its run-finished message was never written",
                run_id=str(rid),
            )
        )
    # Published but never completed by its consumer: the relay publishes it again after
    # GEO_OUTBOX_REDELIVER_SECONDS, so one still open a grace period past that was lost again
    # or its consumer keeps failing.
    for outbox_id, task, payload, seconds, sent in _rows(_open_events_sql(), _open_event_params()):
        if run_id is not None and str(run_id) not in str(payload):
            continue
        what = "published but not completed" if sent else "unpublished"
        found.append(
            Violation(
                name,
                f"outbox message {outbox_id} ({task} {payload}) {what} for {float(seconds):.0f}s",
                run_id=_payload_run(payload),
            )
        )
    return _capped(name, found)


def _open_events_sql(*, published_only: bool = False) -> str:
    """Outbox rows not completed: unpublished past OUTBOX_GRACE_SECONDS, or published and
    still not completed past the redelivery timeout and that grace (`%(redeliver)s`)."""
    if connection.vendor == "postgresql":
        age = "EXTRACT(EPOCH FROM (statement_timestamp() - o.created_at))"
    else:
        age = "(julianday('now') - julianday(o.created_at)) * 86400"
    unpublished = "FALSE" if published_only else f"(o.sent_at IS NULL AND {age} > %(grace)s)"
    return f"""SELECT o.id, o.task, o.payload, {age}, o.sent_at IS NOT NULL FROM {OUTBOX} o
             WHERE o.completed_at IS NULL
               AND ({unpublished} OR (o.sent_at IS NOT NULL AND {age} > %(redeliver)s))
             ORDER BY o.id"""


def _open_event_params() -> dict[str, float]:
    redeliver = float(settings.GEO_OUTBOX_REDELIVER_SECONDS) + OUTBOX_GRACE_SECONDS
    return {"grace": OUTBOX_GRACE_SECONDS, "redeliver": redeliver}


def _payload_run(payload: Any) -> str | None:
    data = json.loads(payload) if isinstance(payload, str) else payload
    run = data.get("run_id") if isinstance(data, dict) else None
    return str(run) if run else None


def check_finished_runs_settled(run_id: UUID | str | None = None) -> list[Violation]:
    """A run finished more than a grace period ago holds no money for samples its settlement
    disposes of (charged, or released as failed or invalid): only samples awaiting a person
    keep their share held. A lost run-finished event shows here, until the settle sweep
    (pipeline/runs.py `settle_held_runs`) repairs it."""
    name = "settled"
    runs = _held_runs()
    if run_id is not None:
        runs = runs.filter(pk=run_id)
    held = Account.objects.filter(run=OuterRef("pk"), kind=AccountKind.HOLD).values("balance")
    return _capped(
        name,
        [
            Violation(
                name,
                f"run {rid} finished but still holds {balance} minor units for samples its "
                "settlement would charge or release",
                run_id=str(rid),
            )
            for rid, balance in runs.annotate(held=Subquery(held[:1]))
            .order_by("pk")
            .values_list("pk", "held")
        ],
    )


def _held_runs() -> QuerySet[Run]:
    return finished_runs_holding().filter(
        finished_at__lt=Now() - timedelta(seconds=OUTBOX_GRACE_SECONDS)
    )


# --- 8. at most one charge per sample -------------------------------------------------------


def check_one_charge_per_sample(run_id: UUID | str | None = None) -> list[Violation]:
    """A sample has at most one (unreversed) capture entry and
    at most one settlement that captured money, only a completed sample is charged, and one
    upstream task's cost is booked at most once."""
    name = "one_charge"
    entry, settlement = JournalEntry._meta.db_table, SampleSettlement._meta.db_table
    not_reversed = f"NOT EXISTS (SELECT 1 FROM {entry} r WHERE r.reverses_id = e.id)"
    where, params = _run_filter("s.run_id", run_id)
    found: list[Violation] = []
    # A capture entry charges its own sample, or (a run batch) each sample it settles.
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, COUNT(DISTINCT e.id), MIN(e.id), MAX(e.id)
              FROM {entry} e LEFT JOIN {settlement} t ON t.entry_id = e.id
              JOIN {SAMPLE} s ON s.id = COALESCE(e.sample_id, t.sample_id)
             WHERE e.kind = 'capture' AND {not_reversed} {where}
             GROUP BY s.id, s.run_id HAVING COUNT(DISTINCT e.id) > 1 ORDER BY s.id""",
        params,
        lambda sid, rid, n, first, last: (
            f"sample {sid} (run {rid}) is charged by {n} capture entries (#{first}..#{last})"
        ),
    )
    found += _sample_violations(
        name,
        f"""SELECT s.id, s.run_id, COUNT(*)
              FROM {settlement} t JOIN {SAMPLE} s ON s.id = t.sample_id
             WHERE t.captured > 0 {where}
             GROUP BY s.id, s.run_id HAVING COUNT(*) > 1 ORDER BY s.id""",
        params,
        lambda sid, rid, n: f"sample {sid} (run {rid}) has {n} settlements that captured money",
    )
    found += _sample_violations(
        name,
        f"""SELECT DISTINCT s.id, s.run_id, s.collection_state
              FROM {SAMPLE} s
              LEFT JOIN {settlement} t ON t.sample_id = s.id AND t.captured > 0
              LEFT JOIN {entry} e ON e.sample_id = s.id AND e.kind = 'capture'
             WHERE (t.id IS NOT NULL OR e.id IS NOT NULL)
               AND s.collection_state <> 'completed' {where}
             ORDER BY s.id""",
        params,
        lambda sid, rid, state: (
            f"sample {sid} (run {rid}) is charged but its collection is {state}"
        ),
    )
    where, params = _run_filter("e.run_id", run_id)
    for platform, upstream_id, n in _rows(
        f"""SELECT e.platform, e.upstream_id, COUNT(*) FROM {entry} e
             WHERE e.kind = 'upstream_cost' AND e.upstream_id <> '' AND {not_reversed} {where}
             GROUP BY e.platform, e.upstream_id HAVING COUNT(*) > 1
             ORDER BY e.platform, e.upstream_id""",
        params,
    ):
        found.append(
            Violation(
                name,
                f"upstream task {platform}:{upstream_id} has its cost booked {n} times",
            )
        )
    return _capped(name, found)


# --- 10. every answer's attempt closed, its cost booked ---------------------------------------


def check_attempts_closed(run_id: UUID | str | None = None) -> list[Violation]:
    """A finished sample has no attempt left `started` (every attempt ends accepted, failed
    or unknown); an answer received (collected, or kept in the answer inbox) has its attempt
    closed, so its upstream cost is recorded; a costed attempt of a run finished a grace
    period ago has its cost booked in the ledger (`upstream-cost:attempt:<id>`)."""
    name = "attempts_closed"
    where, params = _run_filter("s.run_id", run_id)
    found = _sample_violations(
        name,
        _started_sql(where),
        params,
        lambda sid, rid, attempt_no: (
            f"sample {sid} (run {rid}) has its answer or is finished, but attempt "
            f"{attempt_no} is still started: its outcome and upstream cost were never recorded"
        ),
    )
    found += _sample_violations(
        name,
        _uncosted_sql(where),
        {**params, "grace": OUTBOX_GRACE_SECONDS},
        lambda sid, rid, attempt_no, cost, currency: (
            f"sample {sid} (run {rid}): attempt {attempt_no} received an answer costing {cost} "
            f"{currency} upstream, never booked although the run finished"
        ),
    )
    return _capped(name, found)


def _started_sql(where: str = "") -> str:
    """Attempts of this round left `started` on a finished sample or one with its answer."""
    return f"""SELECT s.id, s.run_id, a.attempt_no FROM {ATTEMPT} a JOIN {SAMPLE} s
                ON s.id = a.sample_id
             WHERE a.status = 'started' AND a.attempt_no > s.attempts_before_resume
               AND (s.queue_state = 'done' OR s.collection_state = 'completed'
                    OR EXISTS (SELECT 1 FROM {INBOX} i WHERE i.attempt_id = a.id)) {where}
             ORDER BY s.id, a.attempt_no"""


def _uncosted_sql(where: str = "") -> str:
    """Costed attempts of runs finished %(grace)s seconds ago whose cost was never booked."""
    return f"""SELECT s.id, s.run_id, a.attempt_no, a.cost, a.cost_currency
              FROM {ATTEMPT} a JOIN {SAMPLE} s ON s.id = a.sample_id
              JOIN {RUN} r ON r.id = s.run_id
             WHERE a.cost > 0 AND r.finished_at < {_ago()} {where}
               AND NOT EXISTS (SELECT 1 FROM {ENTRY} e
                                WHERE e.idempotency_key = {_cost_key()})
             ORDER BY s.id, a.attempt_no"""


def _ago() -> str:
    """The database time %(grace)s seconds ago."""
    if connection.vendor == "postgresql":
        return "statement_timestamp() - make_interval(secs => %(grace)s)"
    return "datetime('now', '-' || %(grace)s || ' seconds')"


def _cost_key() -> str:
    prefix = "'upstream-cost:attempt:'"
    return (
        f"{prefix} || CAST(a.id AS TEXT)"
        if connection.vendor == "postgresql"
        else (f"{prefix} || a.id")
    )


# --- counters equal a scan --------------------------------------------------------------------


def check_counters(run_id: UUID | str | None = None) -> list[Violation]:
    """The trigger-maintained counters that run_status reads (sampling/counters.py), summed
    over shards, equal a full scan of the samples they count, column by column."""
    name = "counters"
    return _capped(
        name, [Violation(name, str(d), run_id=d.run_id) for d in counters.drift(run_id=run_id)]
    )


CHECKS: dict[str, Callable[[UUID | str | None], list[Violation]]] = {
    "planned_accounted": check_planned_samples_accounted,
    "counters": check_counters,
    "report_counts": check_report_counts,
    "accepted_recorded": check_accepted_have_records,
    "no_blind_resubmit": check_no_unrecorded_resubmit,
    "fencing": check_fencing,
    "mentions_once": check_mentions_counted_once,
    "queue_state": check_queue_states,
    "outbox": check_outbox_relayed,
    "settled": check_finished_runs_settled,
    "one_charge": check_one_charge_per_sample,
    "attempts_closed": check_attempts_closed,
}


Check = Callable[[UUID | str | None], list[Violation]]


def register_check(*, name: str, check: Check) -> None:
    """An upper layer's invariant (pipeline does not import the layers above it: they
    register from their AppConfig.ready, as run-end followers and sweeps do), run by
    `check_all` and `check_invariants` with the others. By name: a second registration under
    the same name replaces the first."""
    CHECKS[name] = check


def check_all(run_id: UUID | str | None = None) -> list[Violation]:
    """Every invariant over the whole database, or over one run, from one snapshot."""
    found: list[Violation] = []
    with _snapshot():
        for check in CHECKS.values():
            found += check(run_id)
    return found


@contextmanager
def _snapshot() -> Iterator[None]:
    """On PostgreSQL, all checks read one consistent snapshot (REPEATABLE READ, read only),
    so a live run cannot make two queries disagree. Inside a caller's transaction the
    caller's isolation applies."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def gap_counts() -> dict[str, int]:
    """What the run-end checks find, as counts for the metrics (ops/collectors.py, the
    `geo_integrity_gaps` gauge), from the same queries: finished runs still holding money,
    outbox events published and never completed, attempts left started on finished samples
    (or with their answer), costed answers never booked."""
    return {
        "held_after_finish": _held_runs().count(),
        "event_not_completed": _count(_open_events_sql(published_only=True), _open_event_params()),
        "attempt_left_started": _count(_started_sql(), {}),
        "answer_cost_unbooked": _count(_uncosted_sql(), {"grace": OUTBOX_GRACE_SECONDS}),
    }


def _count(sql: str, params: dict[str, Any]) -> int:
    ((count,),) = _rows(f"SELECT COUNT(*) FROM ({sql}) AS found", params)
    return int(count)


@dataclass(frozen=True)
class Totals:
    runs: int
    samples: int
    attempts: int
    captures: int
    stale_writes: int


def totals(run_id: UUID | str | None = None) -> Totals:
    """What the checks looked at, for the one-line summary."""
    samples = Sample.objects.all() if run_id is None else Sample.objects.filter(run_id=run_id)
    runs = Run.objects.all() if run_id is None else Run.objects.filter(pk=run_id)
    return Totals(
        runs=runs.count(),
        samples=samples.count(),
        attempts=Attempt.objects.filter(sample__in=samples).count(),
        captures=Capture.objects.filter(sample__in=samples).count(),
        stale_writes=StaleWrite.objects.filter(sample__in=samples).count(),
    )
