"""The pipeline's own coordination table: the leader lease of the dispatcher
(pipeline/leadership.py). Everything else the pipeline writes lives in the domain apps."""

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
