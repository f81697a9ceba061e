"""`OPTIONS` on any API view: its name, description, media types and, where the view has a
serializer, the fields its writes take. Views without one (preview, launch, cancel, resume,
statements) answer the same minus `actions`; DRF's default asked them for a serializer and
answered 500."""

from __future__ import annotations

from typing import Any

from rest_framework.metadata import SimpleMetadata
from rest_framework.request import Request


class ApiMetadata(SimpleMetadata):
    def determine_actions(self, request: Request, view: Any) -> dict[str, Any]:
        if getattr(view, "serializer_class", None) is None:
            return {}
        actions: dict[str, Any] = super().determine_actions(request, view)
        return actions
