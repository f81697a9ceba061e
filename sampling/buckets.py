"""A sample's outcome bucket, defined once (docs/decisions.md, "One definition of the outcome
buckets").

Every sample is in exactly one of succeeded, failed, invalid, review and pending, read from its
layers and its queue state; a finished sample in none of them is `UNCLASSIFIED` (a bug the
report and the invariants name). Each bucket is a small condition tree that renders both as
SQL over one sample row (`.sql(alias)`: the counters' triggers, the report's record scan, the
invariant checks) and as a Django `Q` (`.q()`: selectors and querysets), so the two cannot
disagree; tests/sampling/test_buckets.py builds every state combination and checks that each
bucket's SQL and Q select the same rows and that the buckets partition the samples.

"succeeded" does not ask for the queue state: an answer analysed as valid counts from the
write that accepts it. "review" is terminal for the run (a person decides next) but is not yet
counted as succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import and_, or_

from django.db.models import Q

from .models import AnalysisState, CollectionState, QueueState, SubmissionState


class Condition:
    """A condition on one sample row, as SQL and as a Q. Only the sample's own columns, and
    only NOT NULL ones: SQL's NOT and the Q's negation then select the same rows."""

    def sql(self, alias: str) -> str:
        raise NotImplementedError

    def q(self) -> Q:
        raise NotImplementedError

    def grouped(self, alias: str) -> str:
        """As an operand of AND / OR."""
        return self.sql(alias)


@dataclass(frozen=True)
class Is(Condition):
    column: str
    value: str

    def sql(self, alias: str) -> str:
        return f"{alias}.{self.column} = '{self.value}'"

    def q(self) -> Q:
        return Q(**{self.column: self.value})


@dataclass(frozen=True)
class StartsWith(Condition):
    """A text column that begins with a fixed prefix. `substr`, not LIKE: the SQL goes into
    parametrised queries, where a `%` would be read as a placeholder (PostgreSQL and SQLite
    both have substr)."""

    column: str
    prefix: str

    def __post_init__(self) -> None:
        assert self.prefix.isascii() and "'" not in self.prefix, self.prefix

    def sql(self, alias: str) -> str:
        return f"substr({alias}.{self.column}, 1, {len(self.prefix)}) = '{self.prefix}'"

    def q(self) -> Q:
        return Q(**{f"{self.column}__startswith": self.prefix})


@dataclass(frozen=True)
class Not(Condition):
    of: Condition

    def sql(self, alias: str) -> str:
        if isinstance(self.of, Is):
            return f"{alias}.{self.of.column} <> '{self.of.value}'"
        return f"NOT ({self.of.sql(alias)})"

    def q(self) -> Q:
        return ~self.of.q()


@dataclass(frozen=True)
class All(Condition):
    parts: tuple[Condition, ...]

    def sql(self, alias: str) -> str:
        return " AND ".join(part.grouped(alias) for part in self.parts)

    def q(self) -> Q:
        return reduce(and_, (part.q() for part in self.parts))

    def grouped(self, alias: str) -> str:
        return f"({self.sql(alias)})"


@dataclass(frozen=True)
class AnyOf(Condition):
    parts: tuple[Condition, ...]

    def sql(self, alias: str) -> str:
        return " OR ".join(part.grouped(alias) for part in self.parts)

    def q(self) -> Q:
        return reduce(or_, (part.q() for part in self.parts))

    def grouped(self, alias: str) -> str:
        return f"({self.sql(alias)})"


def all_of(*parts: Condition) -> All:
    return All(parts)


def any_of(*parts: Condition) -> AnyOf:
    return AnyOf(parts)


@dataclass(frozen=True)
class Bucket:
    name: str
    condition: Condition

    def sql(self, alias: str = "s") -> str:
        return self.condition.sql(alias)

    def q(self) -> Q:
        return self.condition.q()


# The layer states the buckets read.
DONE = Is("queue_state", QueueState.DONE.value)
COMPLETED = Is("collection_state", CollectionState.COMPLETED.value)
VALID = Is("validity", "valid")
MARKED_INVALID = Is("validity", "invalid")

SUCCEEDED = Bucket(
    "succeeded", all_of(COMPLETED, Is("analysis_state", AnalysisState.ACCEPTED.value), VALID)
)
FAILED = Bucket(
    "failed",
    all_of(
        any_of(
            Is("collection_state", CollectionState.FAILED.value),
            all_of(
                COMPLETED, Is("analysis_state", AnalysisState.FAILED.value), Not(MARKED_INVALID)
            ),
        ),
        DONE,
    ),
)
INVALID = Bucket("invalid", all_of(COMPLETED, MARKED_INVALID, DONE))
REVIEW = Bucket(
    "review",
    all_of(COMPLETED, Is("analysis_state", AnalysisState.REVIEW.value), Not(MARKED_INVALID), DONE),
)
PENDING = Bucket("pending", all_of(Not(DONE), Not(SUCCEEDED.condition)))

# The partition, in the order reports show it.
OUTCOMES: tuple[Bucket, ...] = (SUCCEEDED, FAILED, INVALID, REVIEW, PENDING)
BY_NAME = {bucket.name: bucket for bucket in OUTCOMES}
UNCLASSIFIED = Bucket(
    "unclassified", all_of(DONE, Not(any_of(*(bucket.condition for bucket in OUTCOMES))))
)

# A failed sample that a cancel ended before the upstream was asked (pipeline/runs.py
# `cancel_run`, a step's `cancelled` outcome): its failure reason starts with CANCELLED_REASON.
# The status counters and the run's status count it as failed (it is); the report shows it as
# its own bucket (REPORTED), so a cancelled run's failures are not mistaken for the engines'.
CANCELLED_REASON = "cancelled"
CANCELLED = Bucket(
    "cancelled",
    all_of(
        Is("collection_state", CollectionState.FAILED.value),
        StartsWith("failure_reason", CANCELLED_REASON),
        DONE,
    ),
)
FAILED_NOT_CANCELLED = Bucket("failed", all_of(FAILED.condition, Not(CANCELLED.condition)))
# The report's partition: OUTCOMES with failed split into failed and cancelled.
REPORTED: tuple[Bucket, ...] = (
    SUCCEEDED,
    FAILED_NOT_CANCELLED,
    CANCELLED,
    INVALID,
    REVIEW,
    PENDING,
)

# Counted beside the outcome buckets (a sample in any bucket may also be one of these).
TERMINAL = Bucket("terminal", DONE)
PARKED = Bucket("parked", Is("queue_state", QueueState.PARKED.value))
UNCERTAIN = Bucket("uncertain", Is("submission_state", SubmissionState.UNCERTAIN.value))


def case_sql(alias: str = "s", partition: tuple[Bucket, ...] = OUTCOMES) -> str:
    """The sample's bucket name (of `partition`: OUTCOMES, or the report's REPORTED) as one
    SQL expression; NULL for an unclassified sample."""
    whens = "".join(f"\n  WHEN {b.sql(alias)} THEN '{b.name}'" for b in partition)
    return f"CASE{whens}\nEND"


def count_sql(bucket: Bucket, alias: str = "s") -> str:
    """How many of the grouped rows are in `bucket`."""
    return f"SUM(CASE WHEN {bucket.sql(alias)} THEN 1 ELSE 0 END)"
