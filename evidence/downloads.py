"""Authorised evidence download (the key is a name, not a permission).

`GET /evidence/objects/<id>/` and `GET /evidence/key/<key>` serve one stored object after
checking that the user may read evidence of the object's tenant:

    * anonymous -> 403;
    * a superuser -> allowed (platform staff);
    * otherwise the user needs a `TenantMembership` of the object's tenant with a role in
      `tenancy.roles.EVIDENCE_ROLES` (operator, analyst): a finance member -> 403, a user of another
      tenant -> 404, exactly like an unknown id or a guessed key (existence is not revealed).

Local storage: the bytes are read, checked against the recorded sha256 and returned. S3: a
redirect to a presigned URL valid for `GEO_EVIDENCE_URL_SECONDS` (default 60), issued only
after the check, with content type and disposition pinned in the signature. Only images
(screenshots, thumbnails) are served inline; everything else (raw upstream HTML included)
is an attachment with `nosniff` and a sandboxing CSP, so it never renders in our origin.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from evidence.models import EvidenceObject
from evidence.storage import ObjectIntegrityError, presigned_url, read_verified
from tenancy.roles import EVIDENCE_ROLES
from tenancy.scope import user_scope

INLINE_MIMES = frozenset({"image/png", "image/jpeg", "image/webp"})
_EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/webp": "webp",
    "application/json": "json",
    "text/plain; charset=utf-8": "txt",
}


def evidence_access(user: AbstractBaseUser | AnonymousUser, tenant_id: int) -> str:
    """ "allowed", "forbidden" (a member whose role may not read evidence) or "hidden".
    The role comes from the one tenant-and-role scope (tenancy/scope.py)."""
    if not user.is_authenticated:
        return "forbidden"
    scope = user_scope(user)
    if scope.is_superuser:
        return "allowed"
    role = scope.role(tenant_id)
    if role is None:
        return "hidden"
    return "allowed" if role in EVIDENCE_ROLES else "forbidden"


def _authorised_object(request: HttpRequest, **lookup: Any) -> EvidenceObject:
    if not request.user.is_authenticated:
        raise PermissionDenied("log in to download evidence")
    obj = (
        EvidenceObject.objects.select_related("capture__sample")
        .filter(**lookup)
        .only(
            "id",
            "key",
            "kind",
            "mime",
            "sha256",
            "revision",
            "capture__id",
            "capture__sample__id",
            "capture__sample__tenant_id",
        )
        .first()
    )
    if obj is None:
        raise Http404("no such evidence object")
    access = evidence_access(request.user, obj.capture.sample.tenant_id)
    if access == "hidden":
        raise Http404("no such evidence object")
    if access == "forbidden":
        raise PermissionDenied("your role may not read evidence")
    return obj


def _serve(request: HttpRequest, obj: EvidenceObject) -> HttpResponse:
    inline = obj.mime in INLINE_MIMES and request.GET.get("download") != "1"
    ext = _EXTENSIONS.get(obj.mime, "bin")
    filename = f"sample{obj.capture.sample.pk}-r{obj.revision}-{obj.kind}.{ext}"
    mime = obj.mime if inline else "application/octet-stream"
    url = presigned_url(key=obj.key, mime=mime, filename=filename, inline=inline)
    if url is not None:
        response: HttpResponse = HttpResponseRedirect(url)
    else:
        try:
            data = read_verified(key=obj.key, sha256=obj.sha256)
        except FileNotFoundError as error:
            raise Http404("the stored object is missing") from error
        except ObjectIntegrityError:
            return HttpResponse(
                "stored object does not match its recorded digest",
                status=500,
                content_type="text/plain",
            )
        response = HttpResponse(data, content_type=mime)
        disposition = "inline" if inline else "attachment"
        response["Content-Disposition"] = f'{disposition}; filename="{filename}"'
        response["X-Evidence-SHA256"] = obj.sha256
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Referrer-Policy"] = "no-referrer"
    response["Cache-Control"] = "private, no-store"
    return response


# Public names for other views (the API) that serve evidence after the same check.
authorised_object = _authorised_object
serve_object = _serve


@never_cache
@require_GET
def download_object(request: HttpRequest, object_id: int) -> HttpResponse:
    return _serve(request, _authorised_object(request, pk=object_id))


@never_cache
@require_GET
def download_by_key(request: HttpRequest, key: str) -> HttpResponse:
    return _serve(request, _authorised_object(request, key=key))
