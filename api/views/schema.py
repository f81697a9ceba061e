"""The schema: `?format=json` or `Accept: application/vnd.oai.openapi+json` for JSON, YAML
otherwise. Its own module: drf-spectacular's view reads the schema class (api/schema.py) when
it is imported."""

from __future__ import annotations

from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiYamlRenderer
from drf_spectacular.views import SpectacularAPIView
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class SchemaView(SpectacularAPIView):
    """`?format=json` (or `yaml`) chooses the schema's form; DRF's format override is off in
    this API (the report's `format` is its own parameter)."""

    renderer_classes = [OpenApiYamlRenderer, OpenApiJsonRenderer]

    def perform_content_negotiation(
        self, request: Request, force: bool = False
    ) -> tuple[BaseRenderer, str]:
        wanted = request.query_params.get("format")
        for renderer in self.get_renderers():
            if wanted and renderer.format == wanted:
                return renderer, renderer.media_type
        chosen: tuple[BaseRenderer, str] = super().perform_content_negotiation(request, force)
        return chosen
