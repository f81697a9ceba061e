"""/healthz, /readyz, /metrics and the operations page of the console."""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from . import charts
from .collectors import DatabaseCollector
from .health import readiness


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serving; nothing else is checked."""
    return JsonResponse({"status": "ok", "pid": os.getpid()})


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """Database, migrations, broker and storage reachable: 200, otherwise 503 naming which
    check failed. Why it failed (an error naming hosts, ports and buckets) only for the
    metrics token or a staff session: an anonymous prober learns nothing of the inside."""
    checks = readiness()
    ready = all(c.ok for c in checks)
    details = _bearer_ok(request) or _staff(request)
    body = {
        "status": "ready" if ready else "not ready",
        "checks": {
            c.name: {"ok": c.ok, **({"detail": c.detail} if details else {})} for c in checks
        },
    }
    return JsonResponse(body, status=200 if ready else 503)


def _staff(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


def _bearer_ok(request: HttpRequest) -> bool:
    token = settings.GEO_METRICS_TOKEN
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    """Every process's metrics added up, plus the database gauges. Only with the bearer
    token (GEO_METRICS_TOKEN); without one configured the endpoint does not exist."""
    if not settings.GEO_METRICS_TOKEN:
        raise Http404("metrics are off: set GEO_METRICS_TOKEN")
    if not _bearer_ok(request):
        response = HttpResponse("bearer token required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)


def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    recorded = MultiProcessCollector(CollectorRegistry())
    registry.register(recorded)
    registry.register(DatabaseCollector(recorded))
    return registry


@staff_member_required
def operations(request: HttpRequest) -> HttpResponse:
    """The console's operations page: the last hours, from the database, as inline SVG.
    Counts across every tenant, so only for superusers (the people who run the system)."""
    if not request.user.is_superuser:
        raise PermissionDenied
    given = request.GET.get("hours", "") or "6"
    if not (given.isascii() and given.isdecimal() and len(given) <= 6):
        return HttpResponseBadRequest(
            f"hours: {given[:20]!r} is not a whole number of hours (1 to 48)",
            content_type="text/plain; charset=utf-8",
        )
    hours = min(max(int(given), 1), 48)
    context = {
        **charts.operations_context(hours=hours),
        "hours": hours,
        "title": "Operations",
        "has_permission": True,
        "site_header": "GEO console",
    }
    return render(request, "admin/ops/operations.html", context)
