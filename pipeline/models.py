"""The pipeline's own coordination tables: the leader lease of the dispatcher
(pipeline/leadership.py) and the circuits of the platforms (pipeline/circuits.py). Everything
else the pipeline writes lives in the domain apps."""

from __future__ import annotations

from django.db import models


class LeaderLease(models.Model):
    """One row per role (the dispatcher): who leads, under which epoch, until when.

    `epoch` increases on every takeover and never otherwise; every write a leader makes is
    conditional on its epoch still being the row's (a fence), so a stopped leader that wakes up
    after a takeover writes nothing. `lease_until` is database time; the leader moves it on
    every tick, a standby takes over once it has passed (or once the holder's PostgreSQL
    session, `backend_pid`, is gone)."""

    name = models.CharField(max_length=40, primary_key=True)
    holder = models.CharField(max_length=200, default="")
    epoch = models.BigIntegerField(default=0)
    lease_until = models.DateTimeField()
    acquired_at = models.DateTimeField(null=True, blank=True)
    backend_pid = models.IntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} led by {self.holder or 'nobody'} (epoch {self.epoch})"


class CircuitState(models.TextChoices):
    CLOSED = "closed"  # steps go to the platform
    OPEN = "open"  # the platform is unreachable: its submits and polls are held
    HALF_OPEN = "half_open"  # the cooldown passed: probe steps are out


class Circuit(models.Model):
    """One platform reached through one egress (direct, or a proxy): whether its steps are
    sent, or held because the platform cannot be reached. Written by workers (a connection
    failure counts, `failures` within the window started at `window_started_at`; the one that
    reaches the threshold opens it) and by the dispatcher (half-open after `retry_at`, closed
    once its probes reached the platform), always by conditional updates (pipeline/circuits.py).
    Times are database time."""

    platform = models.CharField(max_length=64)
    egress = models.CharField(max_length=255)
    state = models.CharField(
        max_length=16, choices=CircuitState.choices, default=CircuitState.CLOSED
    )
    failures = models.IntegerField(default=0)
    window_started_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    opens = models.IntegerField(default=0)  # opened since it was last closed: the cooldown grows
    opened_at = models.DateTimeField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    probed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["platform", "egress"], name="circuit_platform_egress")
        ]

    def __str__(self) -> str:
        return f"{self.platform} via {self.egress}: {self.state}"
