"""Console login throttling (django-axes, settings "Authentication"): the backend that refuses
locked-out logins, and the client address failures are counted by."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest


class LoginThrottleBackend(AxesStandaloneBackend):
    """django-axes' check, for logins that come with a request: every login over HTTP does (the
    console's form, the browsable API's). `authenticate()` without one is not a remote guess
    (the test client's `login`, a management command): there is no client to count it by, and
    axes' own backend would refuse it with an error instead of checking the password."""

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> None:
        if request is None:
            return None
        return super().authenticate(request, *args, **kwargs)


def client_address(request: HttpRequest) -> str | None:
    """REMOTE_ADDR; behind GEO_TRUSTED_PROXIES proxies, the address the outermost of them saw:
    each proxy appends the address it was reached from to X-Forwarded-For, so that one is the
    Nth from the right. Whatever a client wrote into the header itself stands further left."""
    proxies = int(settings.GEO_TRUSTED_PROXIES)
    remote: str | None = request.META.get("REMOTE_ADDR")
    if not proxies:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    hops = [h for h in hops if h]
    return hops[-proxies] if len(hops) >= proxies else remote
