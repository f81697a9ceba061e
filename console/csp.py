"""A Content-Security-Policy on the console's pages (settings.GEO_CONSOLE_CSP).

Scripts only from this origin's static files: the console and Django's admin run no inline
script (the admin passes its data in data-* attributes), so a stored string that escaped
escaping still cannot run. Styles may be inline: the console's templates carry small <style>
blocks and computed widths as style attributes, and injected CSS cannot run code. Only the
console (/admin/) gets it: the API answers JSON, and its Swagger and ReDoc pages start their
bundles with inline scripts of drf-spectacular's own."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

HEADER = "Content-Security-Policy"


class ConsoleCspMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        policy = str(getattr(settings, "GEO_CONSOLE_CSP", ""))
        if (
            policy
            and request.path.startswith(settings.GEO_CONSOLE_PREFIX)
            and HEADER not in response
        ):
            response[HEADER] = policy
        return response
