"""Launching a run: the plan and its money hold commit together or not at all."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.db import transaction

from billing import services as billing
from connectors.base import SampleRequest, UpstreamError
from connectors.registry import connector_config, get_connector
from sampling.models import Campaign, Run
from sampling.planning import CampaignSpec
from sampling.services import campaign_as_spec, plan_run
from sampling.snapshots import ProviderQuote

log = logging.getLogger(__name__)

UNCONFIGURED = ".invalid"  # an adapter's placeholder base URL: no provider to ask


def launch_run(
    *,
    campaign: Campaign,
    submission_limit: int | None = None,
    provider_quotes: Mapping[str, ProviderQuote] | None = None,
) -> Run:
    """Freeze the campaign into a run, expand its samples and hold its quote.

    The quote is snapshotted and its maximum held in the same transaction as the plan: a
    launch the tenant cannot pay for raises (billing InsufficientFunds / NoActivePrice) and
    writes nothing. Providers that price tasks themselves (the collection provider) are asked
    first, outside the transaction; their quote is recorded in the quote snapshot. A caller
    that holds a transaction of its own asks them before it (`provider_quotes`) and passes
    the answer in, so no network call happens inside a transaction.
    """
    if provider_quotes is None:
        provider_quotes = fetch_provider_quotes(campaign_as_spec(campaign=campaign))
    with transaction.atomic():
        run = plan_run(campaign=campaign, submission_limit=submission_limit)
        quote = billing.quote_and_reserve(run=run)
        if provider_quotes:
            run.quote_snapshot = quote.with_provider_quotes(provider_quotes).to_json()
            Run.objects.filter(pk=run.pk).update(quote_snapshot=run.quote_snapshot)
    return run


def fetch_provider_quotes(spec: CampaignSpec) -> dict[str, ProviderQuote]:
    """platform -> the provider's quote for the run's tasks on it (or why there is none)."""
    quotes: dict[str, ProviderQuote] = {}
    per_target = len(spec.questions) * spec.repeats
    for platform in dict.fromkeys(t.platform for t in spec.targets):
        if connector_config(platform).base_url.endswith(UNCONFIGURED):
            continue
        connector = get_connector(platform)
        if not connector.capabilities().asynchronous:  # direct APIs price by tokens, later
            continue
        requests = [
            SampleRequest(
                sample_id=0,
                idempotency_key="quote",
                question="",
                device=t.device,
                region=t.region,
                mode=t.mode,
                language=t.language,
                screenshot=spec.screenshot_policy != "none",
            )
            for t in spec.targets
            if t.platform == platform
            for _ in range(per_target)
        ]
        try:
            quote = connector.quote(requests)
        except UpstreamError as error:
            log.warning("provider quote for %s failed: %s", platform, error)
            quotes[platform] = ProviderQuote(
                unavailable=f"{error.error_class.value}: {error.message}"
            )
            continue
        if quote is not None:
            quotes[platform] = ProviderQuote(
                quote_id=quote.quote_id,
                currency=quote.currency,
                total=quote.total,
                tasks=len(quote.unit_costs),
            )
    return quotes
