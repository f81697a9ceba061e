"""HTTP entry points of the sampling app: provider callbacks."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from connectors.adapters.collector import parse_callback, verify_callback_signature
from connectors.base import UpstreamError

from .callbacks import accept_callback
from .inputs import InputError


@csrf_exempt  # authenticated by the provider's HMAC signature instead of a session
@require_POST
def collector_callback(request: HttpRequest) -> JsonResponse:
    secret = settings.GEO_COLLECTOR_CALLBACK_SECRET
    header = request.headers.get("X-Collector-Signature", "")
    if not secret or not verify_callback_signature(request.body, header, secret):
        return JsonResponse({"error": "invalid signature"}, status=401)
    try:
        event = parse_callback(request.body)
    except UpstreamError as error:
        return JsonResponse({"error": error.message}, status=400)
    # Without a delivery id, the body itself identifies a repeat of the same delivery.
    delivery_id = event.delivery_id or hashlib.sha256(request.body).hexdigest()
    try:
        outcome = accept_callback(
            provider="collector", delivery_id=delivery_id, task_id=event.task_id
        )
    except InputError as error:
        return JsonResponse({"error": str(error)}, status=400)
    return JsonResponse({"duplicate": outcome.duplicate, "woken": outcome.samples_woken})
