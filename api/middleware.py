"""The edge of every HTTP request (first in settings.MIDDLEWARE):

- a request id, the caller's `X-Request-ID` when it is a plain token or a new one, on every
  response's `X-Request-ID`, on every log line written while answering (`http_request_id`)
  and in every API error body;
- the log context cleared when a request starts (a web thread answers many), and left in
  place when it ends: Django logs a 4xx or 5xx answer after the middleware returned, and
  that line carries the id too;
- a NUL byte in the path or a query value refused with a 400 before any view runs (PostgreSQL
  refuses NUL in text, which was a 500 on every filter that reaches the database);
- under /api/, an error Django answers itself (an unknown route, an unhandled exception) in
  the API's JSON error shape (api/errors.py) instead of an HTML page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from geo_collect import logs

from .errors import error_body
from .requests import end_request, start_request

log = logging.getLogger(__name__)

API_PREFIX = "/api/"
HEADER = "X-Request-ID"


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def _nul_in(request: HttpRequest) -> str | None:
    if "\x00" in request.path:
        return "the path"
    for key, values in request.GET.lists():
        if "\x00" in key or any("\x00" in value for value in values):
            return f"the query parameter {key.replace(chr(0), '')[:40]!r}"
    return None


class RequestEdgeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        logs.clear()
        request_id = start_request(request.headers.get(HEADER))
        logs.bind(http_request_id=request_id)
        try:
            response = self._answer(request)
            response[HEADER] = request_id
            return response
        finally:
            end_request()

    def _answer(self, request: HttpRequest) -> HttpResponse:
        where = _nul_in(request)
        if where is not None:
            message = f"{where} contains a NUL byte"
            if _is_api(request):
                return JsonResponse(error_body(message, "nul_byte"), status=400)
            return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        response = self.get_response(request)
        if _is_api(request) and response.status_code == 404 and not _is_json(response):
            # The URL resolver's 404 (no route), not a view's.
            return JsonResponse(error_body(f"no API route {request.path}", "no_route"), status=404)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not _is_api(request):
            return None  # the console's 500 page, logged by Django
        log.exception("unhandled error answering %s %s", request.method, request.path)
        body = error_body("internal error; quote the request_id when reporting it", "internal")
        return JsonResponse(body, status=500)


def _is_json(response: HttpResponse) -> bool:
    return "json" in response.get("Content-Type", "")
