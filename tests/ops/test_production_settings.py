"""Production settings refuse to be unsafe: a DATABASE_URL without a secret key does not
start, and with the three production variables `check --deploy` is clean at WARNING."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings

PRODUCTION_ENV = {
    "DATABASE_URL": "postgres://geo_app:pw@db.internal:5432/geo",
    "DJANGO_SECRET_KEY": "k" * 20 + "-7Hq2ZpX9vR4mN8sT1wY6bC3dF5gJ0lK",
    "DJANGO_ALLOWED_HOSTS": "geo.example.com",
}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "GEO_", "DATABASE_URL", "REDIS_URL", "S3_"))
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_production_process_without_a_secret_key_refuses_to_start() -> None:
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr
    assert "DATABASE_URL is set, so this is a production deployment" in result.stderr


def test_check_deploy_is_clean_with_only_the_production_variables() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_local_http_relaxes_only_the_https_settings() -> None:
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env={**PRODUCTION_ENV, "GEO_ALLOW_HTTP": "1"},
    )
    assert result.returncode != 0
    assert "security.W008" in result.stderr + result.stdout  # SSL redirect off, and said so
    assert "security.W009" not in result.stderr + result.stdout  # the key is still strong
