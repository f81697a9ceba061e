"""Launching a run: the plan and its money hold commit together or not at all."""

from __future__ import annotations

from django.db import transaction

from billing import services as billing
from sampling.models import Campaign, Run
from sampling.services import plan_run


def launch_run(*, campaign: Campaign, submission_limit: int | None = None) -> Run:
    """Freeze the campaign into a run, expand its samples and hold its quote.

    The quote is snapshotted and its maximum held in the same transaction as the plan: a
    launch the tenant cannot pay for raises (billing InsufficientFunds / NoActivePrice) and
    writes nothing.
    """
    with transaction.atomic():
        run = plan_run(campaign=campaign, submission_limit=submission_limit)
        billing.quote_and_reserve(run=run)
    return run
