"""The API's own writes: campaign create/update from the launch file's shape, and launches
under an `Idempotency-Key`. Everything else is a call into the apps' services."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.contrib.sessions.backends.base import SessionBase
from django.contrib.sessions.backends.db import SessionStore as DbSessionStore
from django.db import IntegrityError, transaction

from pipeline.preview import fingerprint, launch_once
from sampling.models import Campaign, Run
from sampling.planning import CampaignSpec, PlanError, parse_campaign_spec
from sampling.services import campaign_spec_data, save_campaign

from .models import ApiToken, LaunchRequest


class KeyConflict(Exception):
    """The Idempotency-Key was used before with another request body."""


class TokenUsed(Exception):
    """The preview token launched a run under another Idempotency-Key."""

    def __init__(self, run: Run) -> None:
        super().__init__(
            f"this preview already launched run {run.pk} under another Idempotency-Key; "
            "open a new preview to launch again"
        )
        self.run = run


# --- campaigns ------------------------------------------------------------------------------


def create_campaign(*, data: Any, tenant_slugs: set[str] | None) -> Campaign:
    """A new campaign from the launch file's shape. `tenant_slugs`: where the caller may
    create campaigns (None: anywhere). Raises PlanError naming every problem."""
    spec = _spec_for(data, tenant_slugs)
    if Campaign.objects.filter(tenant__slug=spec.tenant, name=spec.name).exists():
        raise PlanError([f"name: a campaign named {spec.name!r} already exists"])
    return save_campaign(spec=spec)


def update_campaign(*, campaign: Campaign, changes: Any) -> Campaign:
    """Apply the given top-level fields over the campaign's current shape. The tenant does not
    change; a new name renames the campaign. Raises PlanError naming every problem."""
    if not isinstance(changes, dict):
        raise PlanError(["campaign: expected a JSON object"])
    data = {**campaign_spec_data(campaign=campaign), **changes}
    if "questions" in changes and "topics" not in changes and isinstance(data["questions"], list):
        # the topics of the questions kept stay theirs; a question gone takes its own away
        kept = set(str(q) for q in data["questions"])
        data["topics"] = {q: t for q, t in data.get("topics", {}).items() if q in kept}
    if data["tenant"] != campaign.tenant.slug:
        raise PlanError(["tenant: a campaign cannot move to another tenant"])
    spec = parse_campaign_spec(data, refuse_duplicates=True)
    with transaction.atomic():
        if spec.name != campaign.name:
            taken = Campaign.objects.filter(tenant=campaign.tenant, name=spec.name)
            if taken.exclude(pk=campaign.pk).exists():
                raise PlanError([f"name: a campaign named {spec.name!r} already exists"])
            Campaign.objects.filter(pk=campaign.pk).update(name=spec.name)
        return save_campaign(spec=spec)


def _spec_for(data: Any, tenant_slugs: set[str] | None) -> CampaignSpec:
    problems: list[str] = []
    try:
        spec = parse_campaign_spec(data, refuse_duplicates=True)
    except PlanError as error:
        problems = list(error.problems)
        spec = None
    tenant = data.get("tenant") if isinstance(data, dict) else None
    if tenant_slugs is not None and isinstance(tenant, str) and tenant not in tenant_slugs:
        problems.insert(0, f"tenant: {tenant!r} is not one of your tenants")
    if problems or spec is None:
        raise PlanError(problems)
    return spec


# --- launch ---------------------------------------------------------------------------------


def token_session(token: ApiToken) -> SessionBase:
    """The session that holds an API token's launch tokens (database-backed, so concurrent
    launches of one preview serialize on its row; pipeline/preview.py)."""
    session = DbSessionStore(session_key=token.session_key or None)
    if not token.session_key or not session.exists(token.session_key):
        session.create()
        ApiToken.objects.filter(pk=token.pk).update(session_key=session.session_key)
        token.session_key = session.session_key or ""
    return session


@dataclass(frozen=True)
class LaunchOutcome:
    run: Run
    created: bool  # False: the same key and body again, the same run


def request_fingerprint(campaign: Campaign, body: Any) -> str:
    return fingerprint({"campaign": campaign.pk, "body": json.loads(json.dumps(body))})


def launch_with_key(
    *, session: SessionBase, user: Any, campaign: Campaign, key: str, body: dict[str, Any]
) -> LaunchOutcome:
    """Launch at most once per Idempotency-Key and per preview token. Raises KeyConflict,
    TokenUsed, and whatever `launch_once` raises (StalePreview, PlanError, BillingError);
    nothing is launched then."""
    digest = request_fingerprint(campaign, body)
    record = _reserve(user=user, campaign=campaign, key=key, digest=digest)
    if record.run is not None:
        return LaunchOutcome(run=record.run, created=False)
    run, already = launch_once(session, campaign=campaign, token=str(body["preview_token"]))
    if already:
        other = LaunchRequest.objects.filter(run=run).exclude(pk=record.pk).first()
        if other is not None:
            raise TokenUsed(run)
    LaunchRequest.objects.filter(pk=record.pk).update(run=run)
    return LaunchOutcome(run=run, created=not already)


def _reserve(*, user: Any, campaign: Campaign, key: str, digest: str) -> LaunchRequest:
    try:
        with transaction.atomic():
            record, _ = LaunchRequest.objects.get_or_create(
                user=user,
                key=key,
                defaults={"campaign": campaign, "fingerprint": digest},
            )
    except IntegrityError:  # the same key made concurrently
        record = LaunchRequest.objects.get(user=user, key=key)
    if record.fingerprint != digest:
        raise KeyConflict("this Idempotency-Key was used with a different request; use a new key")
    return LaunchRequest.objects.select_related("run").get(pk=record.pk)
