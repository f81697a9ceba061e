"""Alert rules per campaign, the alerts they fire, and the deliveries of those alerts.

An alert is one condition of one rule (its `condition_key`, e.g. "visibility:openai") that
holds: it is fired once, stays open (or acknowledged) while the condition holds, and is
resolved when it no longer does. One unresolved alert per (rule, condition key): a partial
unique index, so a second evaluation of the same run, or a later run with the same change,
finds the open alert instead of firing again (docs/decisions.md, "Alerts fire once per
condition").
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from sampling.deliveries import DeliveryState


class RuleKind(models.TextChoices):
    VISIBILITY_DROP = "visibility_drop", "visibility drop"
    COMPETITOR_AHEAD = "competitor_ahead", "a competitor overtakes the brand"
    NEGATIVE_SENTIMENT = "negative_sentiment", "negative sentiment rise"
    CITATION_DROP = "citation_drop", "own-domain citation share drop"
    PLATFORM_GAP = "platform_gap", "platform gap"
    RUN_FAILED = "run_failed", "run failed or partly failed"
    EVIDENCE_MISSING = "evidence_missing", "evidence-missing rate above a threshold"


class Window(models.TextChoices):
    PREVIOUS = "previous", "the previous comparable run"
    BASELINE = "baseline", "the last K comparable runs, pooled"


class AlertRule(models.Model):
    """What to watch on a campaign, and who is told. `params` tune the kind (rules.py
    `DEFAULTS`: min_effect, fdr, threshold). The Slack URL is a secret (whoever has it can
    post to the channel): it is never logged, listed or put in a message."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    campaign = models.ForeignKey(
        "sampling.Campaign", on_delete=models.CASCADE, related_name="alert_rules"
    )
    kind = models.CharField(max_length=32, choices=RuleKind.choices)
    window = models.CharField(max_length=16, choices=Window.choices, default=Window.PREVIOUS)
    baseline_runs = models.PositiveSmallIntegerField(
        default=7, help_text="K: comparable runs pooled as the baseline (window: baseline)"
    )
    params = models.JSONField(default=dict, blank=True)
    email = models.BooleanField(default=True, help_text="email the tenant's subscribers")
    slack_webhook_url = models.CharField(
        max_length=500, blank=True, default="", help_text="a Slack incoming webhook (secret)"
    )
    webhooks = models.BooleanField(
        default=True, help_text="the signed `alert.fired` event to the tenant's endpoints"
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "kind"], name="alertrule_one_per_kind")
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on campaign {self.campaign_id}"


class AlertState(models.TextChoices):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


UNRESOLVED = [AlertState.OPEN, AlertState.ACKNOWLEDGED]


class Alert(models.Model):
    """A fired condition: what changed (`summary`), the figures before and after with their n
    and 95 % intervals, p and q (`details`), and the samples behind it (`details["links"]`).
    open -> acknowledged (by a person) -> resolved (by an evaluation); open -> resolved."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    campaign = models.ForeignKey("sampling.Campaign", on_delete=models.CASCADE, related_name="+")
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    condition_key = models.CharField(max_length=200)
    state = models.CharField(max_length=16, choices=AlertState.choices, default=AlertState.OPEN)
    run = models.ForeignKey("sampling.Run", on_delete=models.CASCADE, related_name="+")
    summary = models.CharField(max_length=300)
    details = models.JSONField(default=dict)
    last_run = models.ForeignKey(
        "sampling.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    fired_at = models.DateTimeField(db_default=Now())
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_run = models.ForeignKey(
        "sampling.Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resolution = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "condition_key"],
                condition=Q(state__in=["open", "acknowledged"]),
                name="alert_one_unresolved_per_condition",
            ),
            models.CheckConstraint(
                condition=Q(state__in=["open", "acknowledged", "resolved"]),
                name="alert_state_known",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "-fired_at"], name="alert_tenant_fired_idx")]

    def __str__(self) -> str:
        return self.summary


class AlertSubscription(models.Model):
    """A person's alert email for one tenant: each alert at once (unless in quiet hours),
    and/or a daily digest at `digest_hour`, both in their time zone. Quiet hours run from
    `quiet_start` to `quiet_end` (local hours, may wrap midnight; equal: none); an alert
    fired in them waits for the digest."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_subscriptions"
    )
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    immediate = models.BooleanField(default=True)
    daily_digest = models.BooleanField(default=True)
    time_zone = models.CharField(max_length=64, default="UTC")
    digest_hour = models.PositiveSmallIntegerField(default=8)
    quiet_start = models.PositiveSmallIntegerField(default=0)
    quiet_end = models.PositiveSmallIntegerField(default=0)
    last_digest_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="alertsub_one_per_tenant"),
            models.CheckConstraint(
                condition=Q(digest_hour__lt=24, quiet_start__lt=24, quiet_end__lt=24),
                name="alertsub_hours_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} on {self.tenant}"


class Channel(models.TextChoices):
    EMAIL = "email"
    SLACK = "slack"
    DIGEST = "digest"


class AlertDelivery(models.Model):
    """One message on one channel: an alert's email to one subscriber, its Slack post, or a
    subscriber's digest (`alert` empty, `alert_ids` listed). Sent by an outbox task after
    the commit, retried with backoff; the log keeps statuses, never an address's secret."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    alert = models.ForeignKey(
        Alert, on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries"
    )
    subscription = models.ForeignKey(
        AlertSubscription,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="deliveries",
    )
    alert_ids = models.JSONField(default=list, blank=True)
    dedupe_key = models.CharField(max_length=200, unique=True)
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    log = models.JSONField(default=list, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name_plural = "alert deliveries"
        indexes = [
            models.Index(
                fields=["id"], name="alertdelivery_pending_idx", condition=Q(state="pending")
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel} #{self.pk}"
