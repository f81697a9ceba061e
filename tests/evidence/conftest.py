"""Evidence fixtures: moto's standalone S3 server (a real HTTP server on loopback), storages
pointed at it, users with tenant roles, and runs collected from the simulator."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.services import simulator_fixture

S3_KEYS = {"access_key": "testing", "secret_key": "testing", "region_name": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):  # wait until it accepts connections (not a timing assertion)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None:
                    pytest.fail("moto server exited at start")
                time.sleep(0.05)
        else:
            pytest.fail("moto server did not start")
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def bucket(moto_endpoint: str) -> str:
    import boto3

    name = f"evidence-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=name, ACL="private")
    return name


def s3_options(endpoint: str, bucket: str) -> dict[str, Any]:
    return {
        "bucket_name": bucket,
        "endpoint_url": endpoint,
        "default_acl": "private",
        "querystring_auth": True,
        "querystring_expire": 300,
        "file_overwrite": False,
        "addressing_style": "path",
        **S3_KEYS,
    }


@pytest.fixture
def s3_default_storage(settings: Any, moto_endpoint: str, bucket: str) -> str:
    """Make storages["default"] the S3 backend on the moto server (as production would)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "evidence.storage.EvidenceS3Storage",
            "OPTIONS": s3_options(moto_endpoint, bucket),
        },
    }
    return bucket


@pytest.fixture
def local_storage(settings: Any, tmp_path: Any) -> Any:
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "media")},
        },
    }
    return tmp_path / "media"


simulator = simulator_fixture(seed=3)
