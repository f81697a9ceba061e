"""A statement upload over the limit is refused with a 413 before its body is read.

Runs before CsrfViewMiddleware, whose check reads `request.POST` (the whole multipart body)
before the view: the view itself would be too late. The declared Content-Length is all it
looks at; Django reads no more than that of the body. The API checks the same limit in
api/base.py (its views are not under the CSRF middleware)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.html import escape

from billing.imports import oversized_body

# The console's upload views (admin URL names) whose bodies are statements.
STATEMENT_UPLOADS = {"admin:billing_statement_import"}


class UploadLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: Any
    ) -> HttpResponse | None:
        match = request.resolver_match
        if request.method != "POST" or match is None or match.view_name not in STATEMENT_UPLOADS:
            return None
        problem = oversized_body(request)
        if problem is None:
            return None
        body = f"<h1>Upload too large</h1><p>Nothing was imported: {escape(problem)}.</p>"
        return HttpResponse(body, status=413)
