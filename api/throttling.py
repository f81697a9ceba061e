"""Per-token throttling: each API token (or session user) has its own budget,
`GEO_API_THROTTLE_RATE` (settings.REST_FRAMEWORK DEFAULT_THROTTLE_RATES["api"]).

Counted in the shared cache (settings.CACHES: Redis when configured), so the budget holds
across gunicorn workers and hosts: a fixed window per token, one atomic INCR per request
(DRF's own throttle keeps a list per process-visible key, read and written back, which two
workers overwrite). Every answer says where the caller stands: `X-RateLimit-Limit`,
`X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds until the window ends), and a 429 adds
`Retry-After`. When the cache does not answer, requests are let through (logged): the API
stays up without its throttle rather than going down with it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from .models import ApiToken

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    limit: int
    remaining: int
    reset: int  # seconds until the window ends

    def headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset),
        }


class TokenRateThrottle(SimpleRateThrottle):
    scope = "api"
    cache = cache

    def get_cache_key(self, request: Request, view: Any) -> str:
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"addr-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request: Request, view: Any) -> bool:
        limit, duration = self.parse_rate(self.rate)
        if limit is None or duration is None:
            return True
        now = time.time()
        window = int(now // duration)
        self.reset = int((window + 1) * duration - now) or 1
        key = f"{self.get_cache_key(request, view)}:{window}"
        try:
            self.cache.add(key, 0, timeout=duration + 1)
            count = self.cache.incr(key)
        except (RedisError, ValueError):
            # ValueError: the key expired between add and incr; RedisError: no cache.
            log.warning("API throttle not counted (cache unavailable)", exc_info=True)
            return True
        request.rate_budget = Budget(  # type: ignore[attr-defined]
            limit=limit, remaining=max(limit - count, 0), reset=self.reset
        )
        return bool(count <= limit)

    def wait(self) -> float:
        return float(getattr(self, "reset", 1))
