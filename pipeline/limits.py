"""Upstream call budgets alongside the per-platform rate limits:
one for the whole deployment (settings.GEO_GLOBAL_RATE_LIMIT) and one per tenant
(Tenant.max_calls_per_second, default settings.GEO_TENANT_RATE_LIMIT), so one tenant's big
run cannot use every call the deployment may make, and together they stay under the total.

Token buckets held by the active dispatcher (there is one: pipeline.dispatch elects it).
Tokens granted but not used by a claim are given back.
"""

from __future__ import annotations

from django.conf import settings

from connectors.retry import TokenBucket


def _bucket(rate: float | None) -> TokenBucket | None:
    return TokenBucket(rate, max(1.0, rate)) if rate else None


class CallBudget:
    def __init__(self) -> None:
        self.global_bucket = _bucket(settings.GEO_GLOBAL_RATE_LIMIT)
        self._tenants: dict[int, tuple[float, TokenBucket]] = {}

    def take_global(self, wanted: int) -> int:
        return wanted if self.global_bucket is None else self.global_bucket.take(wanted)

    def give_back_global(self, unused: int) -> None:
        if self.global_bucket is not None and unused > 0:
            self.global_bucket.give_back(unused)

    def take_tenant(self, tenant_id: int, wanted: int, rate: float | None) -> int:
        bucket = self._tenant_bucket(tenant_id, rate)
        return wanted if bucket is None else bucket.take(wanted)

    def give_back_tenant(self, tenant_id: int, unused: int) -> None:
        held = self._tenants.get(tenant_id)
        if held is not None and unused > 0:
            held[1].give_back(unused)

    def _tenant_bucket(self, tenant_id: int, rate: float | None) -> TokenBucket | None:
        rate = rate or settings.GEO_TENANT_RATE_LIMIT
        if not rate:
            self._tenants.pop(tenant_id, None)
            return None
        held = self._tenants.get(tenant_id)
        if held is None or held[0] != rate:  # new, or its configuration changed
            held = (rate, TokenBucket(rate, max(1.0, rate)))
            self._tenants[tenant_id] = held
        return held[1]
