"""Evidence download: the role check of evidence/downloads.py, then a redirect to a
short-lived presigned URL (S3) or the verified bytes (local storage)."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request

from evidence.downloads import authorised_object, serve_object
from evidence.models import EvidenceObject

from .. import schema_docs as docs
from ..base import ApiView


class EvidenceDownload(ApiView):
    queryset = EvidenceObject.objects.all()

    @extend_schema(
        summary="Download an evidence object",
        description=(
            "After the tenant and role check (operators and analysts), a 302 to a presigned "
            "URL valid for GEO_EVIDENCE_URL_SECONDS; with local storage, the bytes after "
            "their sha256 is verified: screenshots inline as their image type, everything "
            "else (and `?download=1`) as application/octet-stream."
        ),
        responses={
            302: None,
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            (200, "image/png"): OpenApiTypes.BINARY,
            (200, "image/jpeg"): OpenApiTypes.BINARY,
            (200, "image/webp"): OpenApiTypes.BINARY,
            403: docs.ERROR,
            404: docs.ERROR,
        },
        examples=[docs.EVIDENCE_FORBIDDEN],
    )
    def get(self, request: Request, pk: int) -> HttpResponse:
        return serve_object(request._request, authorised_object(request._request, pk=pk))
