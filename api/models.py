"""API tokens, launch idempotency records and outgoing webhooks (docs/architecture.md "API")."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from sampling.deliveries import DeliveryState


class ApiToken(models.Model):
    """A person's API token. Only its sha256 is stored: the token is shown once, when made
    (`manage.py api_token USERNAME`, or the console's Add page). It lives until `expires_at`
    or until revoked (API `POST /api/v1/tokens/<id>/revoke`, the console's action); either
    answers 401 saying which. `last_used_at` is written at most once a minute (api/auth.py).
    `session_key` is the session that holds the launch tokens its previews issue
    (pipeline/preview.py works on any session store)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, default="", help_text="what it is for")
    prefix = models.CharField(max_length=12)  # the first characters, to tell tokens apart
    digest = models.CharField(max_length=64, unique=True)
    session_key = models.CharField(max_length=40, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id})"


class LaunchRequest(models.Model):
    """One `Idempotency-Key` of a launch: the same key and body give the same run."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    campaign = models.ForeignKey("sampling.Campaign", on_delete=models.CASCADE, related_name="+")
    fingerprint = models.CharField(max_length=64)
    run = models.ForeignKey(
        "sampling.Run", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="api_launch_key_once"),
        ]

    def __str__(self) -> str:
        return f"launch {self.key}"


class WebhookEvent(models.TextChoices):
    RUN_FINISHED = "run.finished"
    RUN_NEEDS_REVIEW = "run.needs_review"
    ALERT_FIRED = "alert.fired"  # alerts/services.py `fire`, followed by api/webhooks.py


class WebhookEndpoint(models.Model):
    """A tenant's HTTPS endpoint for run events, signed with its secret (HMAC-SHA256)."""

    tenant = models.ForeignKey(
        "tenancy.Tenant", on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=64, editable=False)
    events = models.JSONField(default=list, blank=True, help_text="empty: every event")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.url

    def wants(self, event: str) -> bool:
        return self.active and (not self.events or event in self.events)


class WebhookDelivery(models.Model):
    """One event for one endpoint, and the log of its attempts."""

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    run = models.ForeignKey("sampling.Run", on_delete=models.CASCADE, related_name="+")
    dedupe_key = models.CharField(max_length=200, unique=True)
    payload = models.JSONField()
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    redeliveries = models.PositiveIntegerField(default=0)  # sent again on request
    log = models.JSONField(default=list, blank=True)  # [{at, status, error}]
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event} #{self.pk}"
