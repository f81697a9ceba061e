"""The S3 path of evidence storage, over real HTTP against moto's standalone server."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.core.files.base import ContentFile

from evidence.storage import (
    EvidenceS3Storage,
    ObjectIntegrityError,
    presigned_url,
    put_new,
    read_verified,
)
from tests.evidence.conftest import s3_options


@pytest.fixture
def storage(moto_endpoint: str, bucket: str) -> EvidenceS3Storage:
    return EvidenceS3Storage(**s3_options(moto_endpoint, bucket))


def test_put_then_get_with_digest(storage: EvidenceS3Storage) -> None:
    body = "原始回答 raw answer".encode()
    put = put_new(key="acme/run-1/7/1/raw", content=body, mime="text/plain", storage=storage)
    assert put.key == "acme/run-1/7/1/raw"
    assert put.sha256 == hashlib.sha256(body).hexdigest()
    assert put.size == len(body)
    assert read_verified(key=put.key, sha256=put.sha256, storage=storage) == body
    with pytest.raises(ObjectIntegrityError):
        read_verified(key=put.key, sha256="0" * 64, storage=storage)
    head = storage.connection.meta.client.head_object(Bucket=storage.bucket_name, Key=put.key)
    assert head["ContentType"] == "text/plain"


def test_the_same_key_is_never_overwritten(storage: EvidenceS3Storage) -> None:
    first = put_new(key="acme/r/1/1/text", content=b"first", mime="text/plain", storage=storage)
    second = put_new(key="acme/r/1/1/text", content=b"second", mime="text/plain", storage=storage)
    assert first.key == "acme/r/1/1/text"
    assert second.key != first.key and second.key.startswith("acme/r/1/1/text")
    assert read_verified(key=first.key, sha256=first.sha256, storage=storage) == b"first"
    assert read_verified(key=second.key, sha256=second.sha256, storage=storage) == b"second"


def test_a_writer_that_lost_the_race_gets_a_new_name(storage: EvidenceS3Storage) -> None:
    """The name check and the write are not atomic; the conditional PUT (If-None-Match: *)
    is. A writer that checked before another wrote still cannot replace the object."""
    put_new(key="acme/r/2/1/raw", content=b"winner", mime="text/plain", storage=storage)
    # Straight to _save with the taken name, as after a stale availability check.
    saved = storage._save("acme/r/2/1/raw", ContentFile(b"loser"))
    assert saved != "acme/r/2/1/raw"
    with storage.open("acme/r/2/1/raw", "rb") as handle:
        assert handle.read() == b"winner"


def test_objects_are_private(storage: EvidenceS3Storage, moto_endpoint: str, bucket: str) -> None:
    put_new(key="acme/r/3/1/text", content=b"secret", mime="text/plain", storage=storage)
    anonymous = requests.get(f"{moto_endpoint}/{bucket}/acme/r/3/1/text", timeout=10)
    assert anonymous.status_code == 403
    assert b"secret" not in anonymous.content
    acl = storage.connection.meta.client.get_object_acl(Bucket=bucket, Key="acme/r/3/1/text")
    assert all("AllUsers" not in str(grant.get("Grantee")) for grant in acl["Grants"])


def test_presigned_url_works_and_is_short_lived(storage: EvidenceS3Storage, settings: Any) -> None:
    settings.GEO_EVIDENCE_URL_SECONDS = 45
    put_new(key="acme/r/4/1/raw", content=b"<html>raw</html>", mime="text/html", storage=storage)
    url = presigned_url(
        key="acme/r/4/1/raw",
        mime="application/octet-stream",
        filename="raw.bin",
        inline=False,
        storage=storage,
    )
    assert url is not None
    query = parse_qs(urlsplit(url).query)
    # Expiry is part of the SigV4 signature: S3 refuses the URL after 45 s, and changing
    # the parameter breaks the signature. (moto does not enforce expiry; S3 does.)
    assert query["X-Amz-Expires"] == ["45"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    response = requests.get(url, timeout=10)
    assert response.status_code == 200
    assert response.content == b"<html>raw</html>"
    assert response.headers["Content-Disposition"].startswith("attachment")
    assert response.headers["Content-Type"] == "application/octet-stream"


def test_presigned_url_is_none_for_local_storage(local_storage: Any) -> None:
    assert presigned_url(key="x", mime="image/png", filename="x.png", inline=True) is None
