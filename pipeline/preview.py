"""What an operator confirms before a launch, and the one-time token that launches it once.

`preview_campaign` computes the plan and the quote the launch will freeze (price version,
unit prices, estimated maximum, currency) next to the tenant's available balance. When the
person may launch, `issue_launch_token` binds a token in their session to the campaign as
previewed and to that exact quote. `launch_once` consumes it: a second POST of the same form
lands on the run the first one made; a changed campaign or price list means a new preview.

Nothing here knows about the admin: the session is any Django session store, so commands,
an API and tests use the same protocol.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.contrib.sessions.backends.base import SessionBase
from django.contrib.sessions.backends.db import SessionStore as DbSessionStore
from django.db import transaction

from billing.selectors import available_balance
from billing.services import BillingError, format_amount, quote_groups
from sampling.locking import Level, lock_campaign, locked
from sampling.models import Campaign, Run
from sampling.planning import CampaignSpec, PlanError
from sampling.services import PlanPreview, campaign_as_spec, campaign_spec_data, preview_plan
from sampling.snapshots import Quote

from .launch import fetch_provider_quotes, launch_run

TOKENS_KEY = "geo_launch_tokens"
TOKENS_KEPT = 20


class StalePreview(Exception):
    """The confirmed preview no longer describes what would be launched; nothing was written."""


@dataclass(frozen=True)
class Money:
    """An amount in minor units with its currency; shown in major units with the code."""

    amount: int
    currency: str

    def __str__(self) -> str:
        return format_amount(self.amount, self.currency)


@dataclass(frozen=True)
class LaunchPreview:
    spec: CampaignSpec
    plan: PlanPreview
    quote: Quote | None  # None when no price applies (quote_problem says why)
    quote_problem: str
    available: Money | None

    @property
    def estimated_max(self) -> Money | None:
        if self.quote is None:
            return None
        return Money(self.quote.estimated_max, self.quote.currency)

    @property
    def short_by(self) -> Money | None:
        """How much is missing to hold the estimated maximum; None when funds suffice."""
        need, have = self.estimated_max, self.available
        if need is None or have is None or have.amount >= need.amount:
            return None
        return Money(need.amount - have.amount, need.currency)

    @property
    def can_launch(self) -> bool:
        return self.quote is not None and self.short_by is None


def quote_for_spec(spec: CampaignSpec) -> Quote:
    """The quote launch_run would freeze for this plan (same groups as its samples)."""
    per_target = len(spec.questions) * spec.repeats
    groups = sorted(
        (
            {"platform": t.platform, "device": t.device, "region": t.region, "mode": t.mode}
            for t in spec.targets
        ),
        key=lambda g: (g["platform"], g["device"], g["region"], g["mode"]),
    )
    return quote_groups(
        groups=[{**g, "n": per_target} for g in groups], screenshot_policy=spec.screenshot_policy
    )


def preview_campaign(*, campaign: Campaign) -> LaunchPreview:
    """Raises PlanError when the campaign cannot be planned."""
    spec = campaign_as_spec(campaign=campaign)
    try:
        quote: Quote | None = quote_for_spec(spec)
        problem = ""
    except BillingError as error:
        quote, problem = None, str(error)
    available = None
    if quote is not None:
        currency = quote.currency
        available = Money(available_balance(campaign.tenant, currency), currency)
    return LaunchPreview(
        spec=spec,
        plan=preview_plan(spec=spec),
        quote=quote,
        quote_problem=problem,
        available=available,
    )


def fingerprint(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def quote_fingerprint(quote: Quote | None) -> str:
    """The quote as previewed: a launch adds the providers' own quotes to its snapshot
    (pipeline/launch.py), which are not part of what the operator agreed to pay. The
    fingerprint of its JSON, so tokens issued before these types existed still match."""
    return fingerprint(quote.as_confirmed().to_json() if quote is not None else {})


def plan_fingerprint(campaign: Campaign) -> str:
    return fingerprint(campaign_spec_data(campaign=campaign))


def issue_launch_token(session: SessionBase, *, campaign: Campaign, quote: Quote) -> str:
    token = secrets.token_urlsafe(24)
    tokens = dict(session.get(TOKENS_KEY, {}))
    tokens[token] = {
        "campaign": campaign.pk,
        "plan": plan_fingerprint(campaign),
        "quote": quote_fingerprint(quote),
        "run": None,
    }
    session[TOKENS_KEY] = dict(list(tokens.items())[-TOKENS_KEPT:])
    session.save()  # launch_once reads the committed copy
    return token


def _locked_tokens(session: SessionBase) -> dict[str, dict[str, Any]]:
    """The session's tokens as committed, with the session row locked until the transaction
    ends (level SESSION, after the campaign). Two POSTs of one token already wait on their
    campaign's lock; this one keeps launches of two campaigns from one session from both
    rewriting the token map, where one would drop the other's run and its token could launch
    again. Other session backends fall back to the copy loaded with the request."""
    if isinstance(session, DbSessionStore) and session.session_key:
        row = locked(
            session.model.objects.filter(session_key=session.session_key), level=Level.SESSION
        ).first()
        data = session.decode(row.session_data) if row is not None else {}
        return dict(data.get(TOKENS_KEY, {}))
    return dict(session.get(TOKENS_KEY, {}))


def launch_once(session: SessionBase, *, campaign: Campaign, token: str) -> tuple[Run, bool]:
    """Launch the previewed plan at its previewed quote, at most once per token.

    Returns (run, already_launched). Raises StalePreview (campaign or price list changed, token
    unknown), PlanError, or a BillingError (e.g. InsufficientFunds); nothing is written then.
    """
    # Asked before the transaction: no network call while the campaign row is locked.
    quotes = fetch_provider_quotes(campaign_as_spec(campaign=campaign))
    with transaction.atomic():
        # Lock order: campaign, then session. The campaign lock keeps an admin save from
        # slipping in between the fingerprint check and the snapshot launch_run takes.
        campaign = lock_campaign(campaign.pk)
        tokens = _locked_tokens(session)
        entry = tokens.get(token)
        if entry is None or entry.get("campaign") != campaign.pk:
            raise StalePreview(
                "This preview has expired or was already replaced; nothing was launched. "
                "Review the plan below and confirm again."
            )
        if entry.get("run"):
            return Run.objects.get(pk=UUID(entry["run"])), True
        if entry.get("plan") != plan_fingerprint(campaign):
            raise StalePreview(
                "The campaign changed after this preview; nothing was launched. "
                "Review the new plan below and confirm again."
            )
        run = launch_run(campaign=campaign, provider_quotes=quotes)
        if quote_fingerprint(Quote.of(run)) != entry.get("quote"):
            # Rolls the run and its hold back: the operator agreed to another price.
            raise StalePreview(
                "The price list changed after this preview; nothing was launched. "
                "Review the new quote below and confirm again."
            )
        tokens[token] = {**entry, "run": str(run.pk)}
        session[TOKENS_KEY] = tokens
        session.save()  # commits with the run, inside this transaction
    return run, False


__all__ = [
    "LaunchPreview",
    "Money",
    "PlanError",
    "StalePreview",
    "issue_launch_token",
    "launch_once",
    "preview_campaign",
    "quote_for_spec",
]
