"""Campaigns, immutable question revisions, runs, batches, samples, attempts, outbox.

A campaign is editable configuration. A run freezes it (`config_snapshot`) and expands it
into samples; nothing in a run ever reads the live campaign again.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django_fsm import FSMField, transition

# By name, not by import: `from sampling.models import Tenant` must fail, tenants live in
# tenancy (docs/decisions.md "Tenancy at the bottom").
TENANT = "tenancy.Tenant"


def copied_key(to: str, *, null: bool = False) -> models.ForeignKey[Any, Any]:
    """A reference copied onto a row when it is written, for reads that must not join (the
    report, docs/decisions.md "The report reads mentions and citations per run"): no foreign
    key constraint, no index of its own (tables index what they read by), no reverse accessor,
    and nothing happens to the row when the referenced one goes (it never does: samples, runs
    and question revisions are kept)."""
    return models.ForeignKey(
        to,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=null,
        blank=null,
        related_name="+",
    )


class Brand(models.Model):
    tenant = models.ForeignKey(TENANT, on_delete=models.PROTECT, related_name="brands")
    name = models.CharField(max_length=200)
    aliases = models.JSONField(default=list, blank=True)
    domains = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="brand_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return self.name


class ScreenshotPolicy(models.TextChoices):
    NONE = "none", "No screenshot"
    OPTIONAL = "optional", "Screenshot if the platform can"
    REQUIRED = "required", "Screenshot required"


class Campaign(models.Model):
    tenant = models.ForeignKey(TENANT, on_delete=models.PROTECT, related_name="campaigns")
    name = models.CharField(max_length=200)
    brand = models.ForeignKey(Brand, on_delete=models.PROTECT, related_name="campaigns")
    repeats = models.PositiveSmallIntegerField(default=1)
    screenshot_policy = models.CharField(
        max_length=16, choices=ScreenshotPolicy.choices, default=ScreenshotPolicy.OPTIONAL
    )
    priority = models.SmallIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="campaign_unique_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class MissedSlotPolicy(models.TextChoices):
    SKIP = "skip", "Skip missed slots"
    CATCH_UP_ONE = "catch_up_one", "Run once for the missed slots"


class Schedule(models.Model):
    """A campaign run on a cron schedule in a timezone (e.g. `0 9 * * *` Asia/Shanghai). Each
    slot launches a new run from the campaign's current config (pipeline/schedules.py);
    `next_slot_at` is the first slot not yet handled, so a restarted dispatcher carries on."""

    campaign = models.OneToOneField(Campaign, on_delete=models.CASCADE, related_name="schedule")
    cron = models.CharField(max_length=100, help_text="minute hour day-of-month month weekday")
    timezone = models.CharField(max_length=64, default="UTC")
    missed_policy = models.CharField(
        max_length=16, choices=MissedSlotPolicy.choices, default=MissedSlotPolicy.SKIP
    )
    paused = models.BooleanField(default=False)
    next_slot_at = models.DateTimeField()
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.campaign} at '{self.cron}' {self.timezone}"


class SlotOutcome(models.TextChoices):
    LAUNCHED = "launched"
    CAUGHT_UP = "caught_up"  # a missed slot launched late under catch_up_one
    SKIPPED = "skipped"  # missed, and the policy does not run it
    FAILED = "failed"  # the launch was refused (e.g. insufficient funds); reason says why


class ScheduleSlot(models.Model):
    """What happened at one slot of a schedule. Unique per campaign and slot time: a slot
    never launches twice, whichever dispatcher handles it."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="slots")
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    slot_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=SlotOutcome.choices)
    run = models.OneToOneField(
        "Run", null=True, blank=True, on_delete=models.PROTECT, related_name="schedule_slot"
    )
    reason = models.CharField(max_length=200, blank=True, default="")
    handled_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["schedule", "slot_at"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "slot_at"], name="slot_once_per_campaign")
        ]

    def __str__(self) -> str:
        return f"{self.campaign_id} slot {self.slot_at:%Y-%m-%d %H:%M} {self.outcome}"


class Competitor(models.Model):
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="competitors")
    name = models.CharField(max_length=200)
    aliases = models.JSONField(default=list, blank=True)
    domains = models.JSONField(default=list, blank=True)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.name


class Question(models.Model):
    """A question slot in a campaign; its text lives in immutable revisions."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="questions")
    position = models.PositiveIntegerField(default=0)
    is_active = models.BooleanField(default=True)
    current_revision = models.ForeignKey(
        "QuestionRevision", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Its topics (tags), frozen with each run (sampling.snapshots.QuestionSnapshot.topics);
    # the metrics series has a row per topic (monitoring). Not part of the text: changing
    # them makes no new revision.
    topics = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.current_revision.text if self.current_revision else f"question {self.pk}"


class ImmutableRowError(Exception):
    pass


class QuestionRevision(models.Model):
    question = models.ForeignKey(Question, on_delete=models.PROTECT, related_name="revisions")
    revision_no = models.PositiveIntegerField()
    text = models.TextField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["question", "revision_no"], name="question_revision_unique"
            )
        ]

    def __str__(self) -> str:
        return f"r{self.revision_no}: {self.text[:60]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ImmutableRowError("question revisions are immutable; create a new revision")
        super().save(*args, **kwargs)


class PlatformTarget(models.Model):
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="targets")
    platform = models.CharField(max_length=32)
    device = models.CharField(max_length=32, default="desktop")
    region = models.CharField(max_length=16, default="us")
    mode = models.CharField(max_length=32, default="web_search")
    # The answer language asked of a collection vendor; empty: the region's language.
    language = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "platform", "device", "region", "mode"],
                name="target_unique_per_campaign",
            )
        ]

    def __str__(self) -> str:
        return f"{self.platform}/{self.device}/{self.region}/{self.mode}"


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(TENANT, on_delete=models.PROTECT, related_name="runs")
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="runs")
    config_snapshot = models.JSONField()
    quote_snapshot = models.JSONField(null=True, blank=True)
    planned_samples = models.PositiveIntegerField()
    priority = models.SmallIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # How many times an operator resumed the run (pipeline/resume.py); each finish after a
    # resume is its own run-finished event.
    resumes = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.id}"

    @property
    def run_id(self) -> uuid.UUID:
        return self.id


class Batch(models.Model):
    """A controlled slice of a run's samples on one platform, within its submission limit."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="batches")
    index = models.PositiveIntegerField()
    platform = models.CharField(max_length=32)
    size = models.PositiveIntegerField()

    class Meta:
        ordering = ["index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="batch_unique_index"),
            models.CheckConstraint(condition=Q(size__gt=0), name="batch_size_positive"),
        ]

    def __str__(self) -> str:
        return f"batch {self.index} ({self.platform}, {self.size})"


class SubmissionState(models.TextChoices):
    PLANNED = "planned"
    SUBMITTING = "submitting"
    ACCEPTED = "accepted"
    UNCERTAIN = "uncertain"


class CollectionState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class EvidenceState(models.TextChoices):
    PENDING = "pending"
    STORED = "stored"
    PARTIAL = "partial"
    FAILED = "failed"


class AnalysisState(models.TextChoices):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REVIEW = "review"
    FAILED = "failed"


class Step(models.TextChoices):
    """The next piece of work a sample needs; the dispatcher routes it to a queue."""

    SUBMIT = "submit"
    # A direct answer kept in the answer inbox, to be archived to the evidence store
    ARCHIVE = "archive"
    VERIFY = "verify"  # resolve an uncertain submission with the upstream
    POLL = "poll"
    EVIDENCE = "evidence"
    ANALYSE = "analyze", "Analyse"  # stored value predates the spelling; one word in code
    NONE = "none"


class QueueState(models.TextChoices):
    READY = "ready"  # due work, claimable once due_at has passed
    LEASED = "leased"  # claimed by a worker until lease_until
    PARKED = "parked"  # waits for a person (uncertain without lookup, poison message)
    DONE = "done"  # terminal


class Sample(models.Model):
    """One sampling event: (run, question revision, platform, device, region, mode, repeat).

    Four independent state layers (docs/architecture.md), each changed only through the transition
    methods below. Queue fields (`step`, `queue_state`, `due_at`, lease, fencing token) say
    what work is due; every result write is conditional on the fencing token.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="samples")
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="samples")
    tenant = models.ForeignKey(TENANT, on_delete=models.PROTECT, related_name="+")
    question_revision = models.ForeignKey(
        QuestionRevision, on_delete=models.PROTECT, related_name="samples"
    )
    platform = models.CharField(max_length=32)
    device = models.CharField(max_length=32)
    region = models.CharField(max_length=16)
    mode = models.CharField(max_length=32)
    repeat_index = models.PositiveSmallIntegerField()

    submission_state = FSMField(default=SubmissionState.PLANNED, choices=SubmissionState.choices)
    collection_state = FSMField(default=CollectionState.QUEUED, choices=CollectionState.choices)
    evidence_state = FSMField(default=EvidenceState.PENDING, choices=EvidenceState.choices)
    analysis_state = FSMField(default=AnalysisState.PENDING, choices=AnalysisState.choices)

    step = models.CharField(max_length=16, choices=Step.choices, default=Step.SUBMIT)
    queue_state = models.CharField(
        max_length=16, choices=QueueState.choices, default=QueueState.READY
    )
    priority = models.SmallIntegerField(default=0)
    due_at = models.DateTimeField(db_default=Now())
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=128, blank=True, default="")
    fencing_token = models.BigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)  # submit attempts so far
    # Re-opened by a resume this many times (the billing settlement round); the attempts made
    # before the latest re-open belong to earlier rounds (retry budget, invariants).
    resumes = models.PositiveSmallIntegerField(default=0)
    attempts_before_resume = models.PositiveIntegerField(default=0)
    claims = models.PositiveIntegerField(default=0)  # claims of the current step (poison cap)

    upstream_id = models.CharField(max_length=200, blank=True, default="")
    accepted_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.CharField(max_length=200, blank=True, default="")
    validity = models.CharField(max_length=16, blank=True, default="")  # "", valid, invalid
    validity_reason = models.CharField(max_length=64, blank=True, default="")
    evidence_reason = models.CharField(max_length=200, blank=True, default="")
    # Why analysis ended where it did when that is not a validity verdict: no answer was
    # collected, or the parser did not understand the answer's format (its error).
    analysis_reason = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "run",
                    "question_revision",
                    "platform",
                    "device",
                    "region",
                    "mode",
                    "repeat_index",
                ],
                name="sample_identity_unique",
            ),
        ]
        indexes = [
            # The claim scans only due, unclaimed work; claimed and finished rows never enter
            # this index, so claiming stays cheap however many rows are leased or done. Keyed
            # by what a claim names (platform, step, tenant), then due time: a claim reads its
            # own rows in due order, never another tenant's backlog, and the dispatcher finds
            # which (platform, step, tenant) have due work by skipping from key to key
            # (pipeline/dispatch.py `_DUE_GROUPS`), whatever the backlog.
            models.Index(
                fields=["platform", "step", "tenant", "due_at"],
                name="sample_ready_idx",
                condition=Q(queue_state="ready"),
            ),
            models.Index(
                fields=["lease_until"],
                name="sample_leased_idx",
                condition=Q(queue_state="leased"),
            ),
            models.Index(fields=["run", "collection_state"], name="sample_run_collection_idx"),
            # The report's run samples that are not succeeded (analysis/report_scan.py): their
            # mention and citation rows do not count. Small next to the succeeded ones.
            models.Index(
                fields=["run", "id"],
                name="sample_run_unsucceeded_idx",
                condition=~Q(
                    collection_state="completed", analysis_state="accepted", validity="valid"
                ),
            ),
            # The run page's failure reasons: an index-only GROUP BY over the failed rows.
            models.Index(
                fields=["run", "failure_reason"],
                name="sample_run_failure_idx",
                condition=Q(collection_state="failed"),
            ),
        ]

    def __str__(self) -> str:
        return f"sample {self.pk} ({self.platform} r{self.repeat_index})"

    # --- submission layer ---------------------------------------------------------------
    @transition(field=submission_state, source=SubmissionState.PLANNED, target="submitting")
    def begin_submit(self) -> None:
        pass

    @transition(field=submission_state, source=SubmissionState.SUBMITTING, target="accepted")
    def accept(self) -> None:
        pass

    @transition(field=submission_state, source=SubmissionState.SUBMITTING, target="planned")
    def reject_submit(self) -> None:
        """The upstream refused before accepting (we know it did not run)."""

    @transition(field=submission_state, source=SubmissionState.SUBMITTING, target="uncertain")
    def mark_uncertain(self) -> None:
        """Sent, but we do not know whether the upstream accepted it."""

    @transition(field=submission_state, source=SubmissionState.UNCERTAIN, target="accepted")
    def confirm_accepted(self) -> None:
        pass

    @transition(field=submission_state, source=SubmissionState.UNCERTAIN, target="planned")
    def confirm_not_accepted(self) -> None:
        pass

    # --- collection layer ---------------------------------------------------------------
    @transition(field=collection_state, source=CollectionState.QUEUED, target="running")
    def start_collection(self) -> None:
        pass

    @transition(field=collection_state, source=CollectionState.RUNNING, target="completed")
    def complete_collection(self) -> None:
        pass

    @transition(
        field=collection_state,
        source=[CollectionState.QUEUED, CollectionState.RUNNING],
        target="failed",
    )
    def fail_collection(self) -> None:
        pass

    # --- evidence layer -----------------------------------------------------------------
    @transition(field=evidence_state, source=EvidenceState.PENDING, target="stored")
    def store_evidence(self) -> None:
        pass

    @transition(field=evidence_state, source=EvidenceState.PENDING, target="partial")
    def store_partial_evidence(self) -> None:
        pass

    @transition(field=evidence_state, source=EvidenceState.PENDING, target="failed")
    def fail_evidence(self) -> None:
        pass

    @transition(field=evidence_state, source=EvidenceState.PARTIAL, target="stored")
    def repair_evidence(self) -> None:
        """A later revision supplied what was missing."""

    # --- analysis layer -----------------------------------------------------------------
    @transition(field=analysis_state, source=AnalysisState.PENDING, target="accepted")
    def accept_analysis(self) -> None:
        pass

    @transition(field=analysis_state, source=AnalysisState.PENDING, target="review")
    def send_to_review(self) -> None:
        pass

    @transition(field=analysis_state, source=AnalysisState.PENDING, target="failed")
    def fail_analysis(self) -> None:
        pass

    @transition(field=analysis_state, source=AnalysisState.REVIEW, target="accepted")
    def approve_review(self) -> None:
        pass

    @transition(field=analysis_state, source=AnalysisState.REVIEW, target="failed")
    def reject_review(self) -> None:
        pass

    # --- re-open (resume) ---------------------------------------------------------------
    # The only way out of a terminal state: an operator's resume of the run asks the sample
    # again as a new attempt. Written (and recorded as a SampleReopen) only by
    # sampling.transitions.reopen_for_resume.
    @transition(
        field=submission_state,
        source=[SubmissionState.PLANNED, SubmissionState.ACCEPTED, SubmissionState.UNCERTAIN],
        target="planned",
    )
    def reopen_submission(self) -> None:
        pass

    @transition(
        field=collection_state,
        source=[CollectionState.QUEUED, CollectionState.COMPLETED, CollectionState.FAILED],
        target="queued",
    )
    def reopen_collection(self) -> None:
        pass

    @transition(field=evidence_state, source="*", target="pending")
    def reopen_evidence(self) -> None:
        pass

    @transition(field=analysis_state, source="*", target="pending")
    def reopen_analysis(self) -> None:
        pass


def _count() -> models.BigIntegerField[int, int]:
    return models.BigIntegerField(default=0)


class SampleCount(models.Model):
    """A run's sample counters for one platform in one shard, maintained only by the database
    triggers of sampling/counters.py (never written by Django code). A run's figure is the sum
    over shards; `samples` is every sample row, the bucket columns follow the report buckets,
    `sub_*`, `col_*`, `ev_*`, `an_*` count the layer states."""

    # No database foreign key: the triggers write these rows while a run's samples are being
    # deleted, and a trigger on the run deletes them after the run is gone.
    run = models.ForeignKey(Run, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    platform = models.CharField(max_length=32)
    shard = models.SmallIntegerField()
    samples = _count()
    succeeded = _count()
    failed = _count()
    invalid = _count()
    review = _count()
    terminal = _count()
    parked = _count()
    sub_planned = _count()
    sub_submitting = _count()
    sub_accepted = _count()
    sub_uncertain = _count()
    col_queued = _count()
    col_running = _count()
    col_completed = _count()
    col_failed = _count()
    ev_pending = _count()
    ev_stored = _count()
    ev_partial = _count()
    ev_failed = _count()
    an_pending = _count()
    an_accepted = _count()
    an_review = _count()
    an_failed = _count()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "platform", "shard"], name="samplecount_unique_shard"
            )
        ]

    def __str__(self) -> str:
        return f"counters {self.run_id} {self.platform} shard {self.shard}"


class AttemptStatus(models.TextChoices):
    STARTED = "started"
    ACCEPTED = "accepted"
    FAILED = "failed"
    UNKNOWN = "unknown"


class Attempt(models.Model):
    """One try at submitting a sample. Never counted as an extra answer."""

    sample = models.ForeignKey(Sample, on_delete=models.CASCADE, related_name="attempt_set")
    attempt_no = models.PositiveIntegerField()
    idempotency_key = models.CharField(max_length=128, unique=True)
    fencing_token = models.BigIntegerField()
    status = models.CharField(
        max_length=16, choices=AttemptStatus.choices, default=AttemptStatus.STARTED
    )
    error_class = models.CharField(max_length=32, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    upstream_id = models.CharField(max_length=200, blank=True, default="")
    request_id = models.CharField(max_length=200, blank=True, default="")
    egress = models.CharField(max_length=200, blank=True, default="")
    model = models.CharField(max_length=100, blank=True, default="")  # the run's frozen model
    # What this attempt cost upstream (direct model APIs: its tokens x the model's price,
    # billing/costs.py); None when the upstream reported no usage or the model has no price.
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cost = models.BigIntegerField(null=True, blank=True)  # minor units of cost_currency
    cost_currency = models.CharField(max_length=3, blank=True, default="")
    retry_after_seconds = models.FloatField(null=True, blank=True)
    started_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sample", "attempt_no"]
        constraints = [
            models.UniqueConstraint(fields=["sample", "attempt_no"], name="attempt_unique_no")
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt_no} of sample {self.sample_id}"


class AnswerInbox(models.Model):
    """A direct API's answer, kept in the database the moment it was read: committed in the
    write that closes its attempt (status, cost) and moves the sample to `archive`, before the
    evidence store is asked (docs/decisions.md, "An answer in hand is kept before it is
    archived"). The archive step reads it, writes the evidence objects and the capture, and
    deletes it in that write: the evidence store is the answer's long-term home."""

    sample = models.ForeignKey(Sample, on_delete=models.CASCADE, related_name="+")
    attempt = models.OneToOneField(Attempt, on_delete=models.CASCADE, related_name="+")
    raw = models.BinaryField()  # exactly as received on the wire
    raw_mime = models.CharField(max_length=200, blank=True, default="")
    sha256 = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    request_id = models.CharField(max_length=200, blank=True, default="")
    upstream_id = models.CharField(max_length=200, blank=True, default="")
    # The rest of the connector's normalised result (answer text, citations, warnings, error,
    # states, the upstream's reported cost): what the archive step records. The attempt's
    # usage and cost are on the attempt, written in the same transaction.
    result = models.JSONField()
    received_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"answer of attempt {self.attempt_id} (sample {self.sample_id})"


class SampleReopen(models.Model):
    """A sample asked again by a resume of its run: the explicit, recorded way out of a
    terminal state. What it was before is kept here; its earlier attempts and captures stay."""

    sample = models.ForeignKey(Sample, on_delete=models.CASCADE, related_name="reopens")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    resume_no = models.PositiveSmallIntegerField()  # the run's resume that re-opened it
    reason = models.CharField(max_length=64)  # failed, invalid:<why>, parked, review, ...
    attempts_before = models.PositiveIntegerField()
    states_before = models.JSONField()  # the four layers, queue state and reasons
    actor = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["sample", "resume_no"]
        constraints = [
            models.UniqueConstraint(fields=["sample", "resume_no"], name="reopen_once_per_resume")
        ]

    def __str__(self) -> str:
        return f"sample {self.sample_id} re-opened by resume {self.resume_no} ({self.reason})"


class StaleReason(models.TextChoices):
    TOKEN = "token", "a newer claim took the sample over"
    LEASE_EXPIRED = "lease_expired", "the lease ran out before the write"


class StaleWrite(models.Model):
    """A result write refused because its fencing token was no longer current, or its lease
    had run out (not yet swept, but the step may already be due for someone else)."""

    sample = models.ForeignKey(Sample, on_delete=models.CASCADE, related_name="stale_writes")
    operation = models.CharField(max_length=32)
    presented_token = models.BigIntegerField()
    current_token = models.BigIntegerField()
    worker = models.CharField(max_length=128, blank=True, default="")
    reason = models.CharField(max_length=16, choices=StaleReason.choices, default=StaleReason.TOKEN)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"stale {self.operation} on sample {self.sample_id}: token {self.presented_token}"


class OutboxMessage(models.Model):
    """Work that must follow a commit: written in the business transaction, published after.

    `payload` holds ids and routing fields only, never prompts, answers or credentials.
    """

    task = models.CharField(max_length=200)
    payload = models.JSONField(default=dict)
    queue = models.CharField(max_length=64, default="default")
    dedupe_key = models.CharField(max_length=200, unique=True, null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    sent_at = models.DateTimeField(null=True, blank=True)
    # Set by the consumer, in the transaction that did the message's effect (sampling/services
    # `complete_outbox`): published is not done. The relay publishes again what was published
    # and not completed after GEO_OUTBOX_REDELIVER_SECONDS (a broker that forgot it).
    completed_at = models.DateTimeField(null=True, blank=True)
    publish_attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["id"], name="outbox_unsent_idx", condition=Q(sent_at=None)),
            models.Index(
                fields=["sent_at"],
                name="outbox_uncompleted_idx",
                condition=Q(completed_at=None, sent_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task} {self.payload}"


class CallbackDelivery(models.Model):
    """A provider callback we accepted, by its delivery id: a repeat is recognised, not
    acted on twice. A callback is only a hint to poll now; the result always comes from
    polling the provider."""

    provider = models.CharField(max_length=32)
    delivery_id = models.CharField(max_length=200)
    task_id = models.CharField(max_length=200)
    received_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "delivery_id"], name="callback_once")
        ]

    def __str__(self) -> str:
        return f"{self.provider} callback {self.delivery_id}"


class UpstreamCancel(models.Model):
    """The cancel a cancelled run asked of the upstream for one task it had accepted and not
    finished (pipeline/upstream_cancel.py), and the upstream's answer.

    One row per task (sample and upstream id: a resumed sample's new task is a new row). The
    row is planned with `requested_at` empty; the worker that sends the request first claims
    it by a conditional update setting `requested_at`, so a redelivered message or a second
    cancel never asks twice. `acknowledged` is None until the answer is recorded: True when
    the upstream said it stopped the task, False when it declined (the task had finished) or
    the request failed (`error`, redacted, never a payload). Billing never reads it: a task
    the upstream stopped ends as a failed sample through its own poll, one it finished anyway
    is charged."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="upstream_cancels")
    sample = models.ForeignKey(Sample, on_delete=models.CASCADE, related_name="upstream_cancels")
    platform = models.CharField(max_length=32)
    upstream_id = models.CharField(max_length=200)
    created_at = models.DateTimeField(db_default=Now())
    requested_at = models.DateTimeField(null=True, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    acknowledged = models.BooleanField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["sample", "upstream_id"], name="upstream_cancel_once_per_task"
            )
        ]
        indexes = [models.Index(fields=["run", "platform"], name="upstream_cancel_run_idx")]

    def __str__(self) -> str:
        return f"upstream cancel of {self.upstream_id} (sample {self.sample_id})"
