"""Prices, quotes and an append-only double-entry ledger (docs/architecture.md).

Amounts are integers in minor units (fen for CNY, cents for USD); never floats.

Ledger shape (learned from TigerBeetle and django-hordak):

* `Account` — one per (purpose, owner, currency). Value flows between accounts; a posting's
  signed `amount` is added to its account's balance, and the postings of an entry sum to zero
  per currency, so the sum over the whole ledger is always zero.
* `JournalEntry` — one business event with a client-chosen, unique `idempotency_key` and the
  hash of its content: the same key with the same content returns the original entry, the
  same key with different content is an error (Stripe's rule).
* `Posting` — one signed, non-zero amount on one account.
* `SampleSettlement` — how a sample's share of its run's hold was disposed of (captured,
  released); unique per sample, so a sample can be charged at most once (TigerBeetle's
  "post or void a pending transfer exactly once").

In PostgreSQL the migrations add triggers: postings, entries, settlements, prices and
statement lines refuse UPDATE and DELETE; a deferred constraint trigger refuses an entry whose
postings do not sum to zero per currency at COMMIT; a trigger keeps the cached balance of
accounts with `tracks_balance` equal to the sum of their postings, and a CHECK keeps those
balances non-negative. See `billing/migrations/0002_ledger_triggers.py`.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class ImmutableError(Exception):
    """An append-only row was about to be changed."""


class AppendOnlyModel(models.Model):
    """Rows are inserted once and never updated or deleted (also enforced by triggers)."""

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise ImmutableError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ImmutableError(f"{type(self).__name__} rows are append-only")


# --- prices ---------------------------------------------------------------------------------


class PriceVersion(AppendOnlyModel):
    """An immutable price list. The active one is the latest whose `effective_from` has
    passed; a price change is a new version, and runs keep the quote they were launched with."""

    name = models.CharField(max_length=64, unique=True)
    currency = models.CharField(max_length=3)
    effective_from = models.DateTimeField()
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-effective_from", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="priceversion_currency_iso"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.currency})"


class PriceComponent(models.TextChoices):
    BASE = "base", "Per answered sample"
    DEEP_THINKING = "deep_thinking", "Deep-thinking surcharge"
    SCREENSHOT = "screenshot", "Screenshot"


class Price(AppendOnlyModel):
    version = models.ForeignKey(PriceVersion, on_delete=models.PROTECT, related_name="prices")
    platform = models.CharField(max_length=32)
    component = models.CharField(max_length=16, choices=PriceComponent.choices)
    amount = models.BigIntegerField(help_text="minor units of the version's currency")

    class Meta:
        ordering = ["version", "platform", "component"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "platform", "component"], name="price_unique_component"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="price_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.platform}/{self.component}={self.amount}"


# --- ledger ---------------------------------------------------------------------------------


class AccountKind(models.TextChoices):
    FUNDING = "funding", "External funding (money in, per currency)"
    AVAILABLE = "available", "Tenant available balance"
    HOLD = "hold", "Run hold (reserved estimated maximum)"
    REVENUE = "revenue", "Tenant charges (captured, net of refunds)"
    UPSTREAM_COST = "upstream_cost", "Upstream cost (per platform)"
    UPSTREAM_PAYABLE = "upstream_payable", "Owed to the upstream (per platform)"


class Account(models.Model):
    """A ledger account. Its balance is the sum of its postings.

    `balance` is a cache kept by a database trigger for accounts with `tracks_balance` (tenant
    available balances and run holds); a CHECK keeps it non-negative, so an overdraft is
    refused by the database even if Python got it wrong. `check_ledger` compares it with the
    derived sum.
    """

    code = models.CharField(max_length=120, unique=True)
    kind = models.CharField(max_length=20, choices=AccountKind.choices)
    currency = models.CharField(max_length=3)
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    run = models.ForeignKey(
        "sampling.Run", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    platform = models.CharField(max_length=32, blank=True, default="")
    tracks_balance = models.BooleanField(default=False)
    balance = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(tracks_balance=False) | Q(balance__gte=0),
                name="account_tracked_balance_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="account_currency_iso"
            ),
        ]

    def __str__(self) -> str:
        return self.code

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None and not self._state.adding:
            raise ImmutableError("accounts are never edited; balances move only by postings")
        super().save(*args, **kwargs)


class EntryKind(models.TextChoices):
    TOP_UP = "top_up", "Top-up"
    RESERVE = "reserve", "Reserve (hold on launch)"
    REHOLD = "rehold", "Re-hold (a released sample asked again by a resume)"
    CAPTURE = "capture", "Capture (completed sample)"
    RELEASE = "release", "Release (rest of a hold)"
    REFUND = "refund", "Refund"
    UPSTREAM_COST = "upstream_cost", "Upstream cost"
    ADJUSTMENT = "adjustment", "Adjustment"
    REVERSAL = "reversal", "Reversal"


class JournalEntry(AppendOnlyModel):
    idempotency_key = models.CharField(max_length=200, unique=True)
    content_hash = models.CharField(max_length=64)
    kind = models.CharField(max_length=20, choices=EntryKind.choices)
    tenant = models.ForeignKey(
        "tenancy.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    run = models.ForeignKey(
        "sampling.Run", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    sample = models.ForeignKey(
        "sampling.Sample", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    capture = models.ForeignKey(
        "evidence.Capture", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    platform = models.CharField(max_length=32, blank=True, default="")
    upstream_id = models.CharField(max_length=200, blank=True, default="", db_index=True)
    reverses = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="reversed_by"
    )
    memo = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    # The hash chain (billing/ledger_chain.py). NULL, not "", marks entries written before the
    # chain existed, and adding a nullable column leaves SQLite's triggers in place.
    chain_prev = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001
    chain_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001
    # NULL: an unkeyed sha256 link (entries written before billing migration 0006); 2: HMAC.
    chain_version = models.SmallIntegerField(null=True, blank=True, editable=False)
    # PostgreSQL: the creating transaction's id, set by a trigger; postings may be inserted
    # only by that transaction (billing/migrations/0003_ledger_chain.py).
    created_xact = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "journal entries"
        indexes = [
            models.Index(fields=["run", "kind"], name="entry_run_kind_idx"),
            models.Index(fields=["tenant", "created_at"], name="entry_tenant_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} {self.idempotency_key}"


class Posting(AppendOnlyModel):
    entry = models.ForeignKey(JournalEntry, on_delete=models.PROTECT, related_name="postings")
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="postings")
    amount = models.BigIntegerField(help_text="signed minor units; added to the account")

    class Meta:
        ordering = ["entry", "id"]
        constraints = [
            models.CheckConstraint(condition=~Q(amount=0), name="posting_amount_non_zero"),
        ]
        indexes = [models.Index(fields=["account", "entry"], name="posting_account_idx")]

    def __str__(self) -> str:
        return f"{self.account_id} {self.amount:+d}"


class SettlementReason(models.TextChoices):
    COMPLETED = "completed", "Completed: captured by the quote's rules"
    FAILED = "failed", "Failed: released"
    INVALID = "invalid", "Completed but invalid: released"
    CANCELLED = "cancelled", "Cancelled before the upstream accepted it: released"


class SampleSettlement(AppendOnlyModel):
    """How one sample's reserved share was disposed of. Unique per sample and round: a sample
    is settled once per round and charged at most once, whatever is repeated. A round is a
    resume of the run that asked a released sample again (`Sample.resumes`); its share was
    held again first (a `rehold` entry), so each round settles what it held."""

    entry = models.ForeignKey(JournalEntry, on_delete=models.PROTECT, related_name="settlements")
    run = models.ForeignKey("sampling.Run", on_delete=models.PROTECT, related_name="+")
    sample = models.ForeignKey("sampling.Sample", on_delete=models.PROTECT, related_name="+")
    round = models.PositiveSmallIntegerField(default=0)
    reason = models.CharField(max_length=16, choices=SettlementReason.choices)
    reserved = models.BigIntegerField()
    captured = models.BigIntegerField()
    released = models.BigIntegerField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(captured__gte=0) & Q(released__gte=0),
                name="settlement_amounts_non_negative",
            ),
            models.CheckConstraint(
                condition=Q(reserved=models.F("captured") + models.F("released")),
                name="settlement_reserved_is_captured_plus_released",
            ),
            models.UniqueConstraint(fields=["sample", "round"], name="settlement_once_per_round"),
            models.UniqueConstraint(
                fields=["sample"],
                condition=Q(reason=SettlementReason.COMPLETED),
                name="settlement_charged_once",
            ),
        ]

    def __str__(self) -> str:
        return f"sample {self.sample_id}: {self.reason} {self.captured}/{self.released}"


# --- upstream statements (reconciliation input) ---------------------------------------------


class UpstreamStatement(AppendOnlyModel):
    """A provider's bill to the platform operator, imported as CSV (amounts in major units).
    Statements are the platform's, not a tenant's: only platform finance (and superusers)
    import, read and void them (docs/decisions.md, "Provider statements are the platform's").
    The same file under the same provider is one statement while it is not voided; the same
    bytes under another provider are another statement."""

    provider = models.CharField(max_length=32)
    filename = models.CharField(max_length=255)
    sha256 = models.CharField(max_length=64)
    rows = models.PositiveIntegerField()
    imported_by = models.CharField(max_length=150, blank=True, default="")
    imported_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-imported_at", "-id"]
        indexes = [models.Index(fields=["provider", "sha256"], name="statement_provider_sha_idx")]

    def __str__(self) -> str:
        return f"{self.provider}: {self.filename}"


class StatementVoid(AppendOnlyModel):
    """The correction of a mistaken statement: appended, never a delete or an edit. A voided
    statement's lines stay as they were imported but count nowhere (reconciliation, the check
    for a task already known), so the right file can be imported again."""

    statement = models.OneToOneField(
        UpstreamStatement, on_delete=models.PROTECT, related_name="void"
    )
    reason = models.TextField()
    voided_by = models.CharField(max_length=150)
    voided_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-voided_at", "-id"]

    def __str__(self) -> str:
        return f"void of statement #{self.statement_id}"


class UpstreamStatementLine(AppendOnlyModel):
    """One task of a statement, in minor units. A task is listed by at most one live (not
    voided) statement of its provider, checked under the provider's import lock
    (billing/reconciliation.py): the database cannot see a void in a unique index."""

    statement = models.ForeignKey(UpstreamStatement, on_delete=models.PROTECT, related_name="lines")
    row_no = models.PositiveIntegerField()
    provider = models.CharField(max_length=32)
    upstream_id = models.CharField(max_length=200)
    amount = models.BigIntegerField(help_text="minor units of the line's currency")
    currency = models.CharField(max_length=3)
    occurred_at = models.DateTimeField()

    class Meta:
        ordering = ["statement", "row_no"]
        indexes = [models.Index(fields=["provider", "upstream_id"], name="statement_line_task_idx")]

    def __str__(self) -> str:
        # What a person reads (the statement page's rows): major units with the code.
        from billing.services.errors import format_amount  # services import the models

        return f"{self.provider}:{self.upstream_id} {format_amount(self.amount, self.currency)}"


# --- charges and costs on their way to the ledger -------------------------------------------


class _Queued(models.Model):
    """A row on its way to the ledger, deleted once posted."""

    run = models.ForeignKey("sampling.Run", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        abstract = True
        ordering = ["id"]


class PendingCapture(_Queued):
    """A valid sample's charge, written in the fenced transaction of its verdict and posted by
    the dispatcher with every other pending charge of its run in one capture entry
    (`billing.services.post_pending_captures`), so no sample waits on its run's and tenant's
    account rows. The charge itself stays unique per sample (`SampleSettlement`,
    settlement_charged_once)."""

    sample = models.OneToOneField("sampling.Sample", on_delete=models.CASCADE, related_name="+")

    class Meta(_Queued.Meta):
        indexes = [models.Index(fields=["run", "id"], name="pendingcapture_run_idx")]

    def __str__(self) -> str:
        return f"pending charge of sample {self.sample_id}"


class PendingAttemptCost(_Queued):
    """An upstream attempt's cost, queued by the worker that recorded it and booked by the
    dispatcher (`billing.costs.book_pending_attempt_costs`), one entry per attempt as before;
    the run's end books any attempt still queued (`book_run_attempt_costs`)."""

    attempt = models.OneToOneField("sampling.Attempt", on_delete=models.CASCADE, related_name="+")

    class Meta(_Queued.Meta):
        indexes = [models.Index(fields=["run", "id"], name="pendingattemptcost_run_idx")]

    def __str__(self) -> str:
        return f"pending cost of attempt {self.attempt_id}"


# --- statement imports (background) ---------------------------------------------------------


class ImportStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class StatementImport(models.Model):
    """An uploaded statement on its way in: the file is kept in the default storage
    (`stored_name`), a worker checks and writes it (billing/imports.py) and reports progress
    here. Mutable on purpose (a job, not a record): the statement it made is the record.
    Platform finance's, like statements."""

    provider = models.CharField(max_length=32)
    filename = models.CharField(max_length=255)
    stored_name = models.CharField(max_length=255)
    size = models.BigIntegerField(help_text="bytes")
    status = models.CharField(max_length=8, choices=ImportStatus.choices, default="queued")
    rows_total = models.PositiveIntegerField(null=True, blank=True, help_text="known once checked")
    rows_checked = models.PositiveIntegerField(default=0)
    rows_done = models.PositiveIntegerField(default=0, help_text="rows written")
    errors = models.JSONField(default=list, blank=True)
    statement = models.ForeignKey(
        UpstreamStatement, null=True, blank=True, on_delete=models.PROTECT, related_name="imports"
    )
    created = models.BooleanField(null=True, help_text="false: the file was imported before")
    imported = models.PositiveIntegerField(default=0)
    already_known = models.PositiveIntegerField(default=0)
    imported_by = models.CharField(max_length=150, blank=True, default="")
    queued_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-queued_at", "-id"]

    def __str__(self) -> str:
        return f"import #{self.pk} of {self.filename} ({self.status})"
