"""Object storage for evidence (docs/architecture.md).

Production: S3 through django-storages (`EvidenceS3Storage`, a private bucket). Embedded
default: Django's `FileSystemStorage`. Both are reached through `storages["default"]`.

Rules that hold on both backends:
    * A stored object is never replaced. `FileSystemStorage` creates files with O_EXCL; on S3
      `EvidenceS3Storage` writes with a conditional PUT (`If-None-Match: *`), so even two
      writers racing for one key cannot overwrite each other: the loser gets another name,
      and the caller records the name actually used.
    * Objects are private (ACL `private`); the key is a name, not a permission. Downloads go
      through `evidence.downloads`, which checks tenant and role first and then either streams
      the object or redirects to a short-lived presigned URL (`presigned_url`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError
from django.conf import settings
from django.core.files.base import ContentFile, File
from django.core.files.storage import Storage, storages
from storages.backends.s3 import S3Storage
from storages.utils import clean_name

__all__ = [
    "EvidenceS3Storage",
    "ObjectIntegrityError",
    "PutResult",
    "evidence_storage",
    "presigned_url",
    "put_new",
    "read_verified",
]

# Attempts at a fresh name after a conditional PUT lost a race for the key.
_MAX_NAME_RACES = 5


class EvidenceS3Storage(S3Storage):
    """S3Storage that never overwrites: private ACL, conditional PUT, no overwrite option."""

    def __init__(self, **settings_: Any) -> None:
        settings_["file_overwrite"] = False
        settings_.setdefault("default_acl", "private")
        settings_.setdefault("querystring_auth", True)
        settings_.setdefault("signature_version", "s3v4")  # expiry inside the signature
        super().__init__(**settings_)

    def _save(self, name: str, content: File) -> str:
        body = content.read()
        if isinstance(body, str):
            body = body.encode()
        for _ in range(_MAX_NAME_RACES):
            cleaned = clean_name(name)
            params = self._get_write_parameters(self._normalize_name(cleaned), content)
            try:
                self.connection.meta.client.put_object(
                    Bucket=self.bucket_name,
                    Key=self._normalize_name(cleaned),
                    Body=body,
                    IfNoneMatch="*",
                    **params,
                )
            except ClientError as error:
                status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                code = error.response.get("Error", {}).get("Code")
                if status in (409, 412) or code in (
                    "PreconditionFailed",
                    "ConditionalRequestConflict",
                ):
                    name = self.get_available_name(name)
                    continue
                raise
            return cleaned
        raise FileExistsError(f"no free name for {name!r} after {_MAX_NAME_RACES} races")


def evidence_storage() -> Storage:
    return storages["default"]


@dataclass(frozen=True)
class PutResult:
    key: str  # the name the storage actually used
    sha256: str
    size: int


def put_new(*, key: str, content: bytes, mime: str, storage: Storage | None = None) -> PutResult:
    """Store `content` under `key`, or under a fresh name if `key` is taken. Never replaces."""
    target = storage or evidence_storage()
    file = ContentFile(content)
    file.content_type = mime  # type: ignore[attr-defined]  # read by S3Storage
    saved_as = target.save(key, file)
    return PutResult(key=saved_as, sha256=hashlib.sha256(content).hexdigest(), size=len(content))


class ObjectIntegrityError(Exception):
    """The stored bytes no longer match the digest recorded when they were archived."""


def read_verified(*, key: str, sha256: str, storage: Storage | None = None) -> bytes:
    target = storage or evidence_storage()
    with target.open(key, "rb") as handle:
        data: bytes = handle.read()
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ObjectIntegrityError(f"{key}: sha256 {actual} != recorded {sha256}")
    return data


def presigned_url(
    *,
    key: str,
    mime: str,
    filename: str,
    inline: bool,
    expire_seconds: int | None = None,
    storage: Storage | None = None,
) -> str | None:
    """A short-lived GET URL for `key`, or None when the storage cannot presign (local files).

    Call only after the caller has been authorised. The response headers are pinned in the
    signature (type, disposition), so an HTML raw response downloads instead of rendering.
    """
    target = storage or evidence_storage()
    if not isinstance(target, S3Storage):
        return None
    expire = expire_seconds or int(getattr(settings, "GEO_EVIDENCE_URL_SECONDS", 60))
    disposition = "inline" if inline else "attachment"
    url: str = target.url(
        key,
        parameters={
            "ResponseContentType": mime,
            "ResponseContentDisposition": f'{disposition}; filename="{filename}"',
        },
        expire=expire,
    )
    return url
