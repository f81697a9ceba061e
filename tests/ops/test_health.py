"""/healthz, /readyz and /metrics access; the worker health check command."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command

from geo_collect.celery import app

pytestmark = pytest.mark.django_db


def test_healthz_answers_while_the_process_is_up(client: Any) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_readyz_checks_database_migrations_broker_and_storage(client: Any) -> None:
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert set(body["checks"]) == {"database", "migrations", "broker", "storage"}
    assert all(check["ok"] for check in body["checks"].values())


def test_readyz_is_503_and_names_the_broker_when_it_is_unreachable(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert not body["checks"]["broker"]["ok"] and body["checks"]["database"]["ok"]


def test_anonymous_readyz_never_says_why_a_check_failed(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert all(set(check) == {"ok"} for check in response.json()["checks"].values())
    assert "127.0.0.1" not in response.content.decode()


def test_readyz_details_go_to_the_metrics_token_and_staff_only(
    client: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from django.contrib.auth import get_user_model

    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    settings.GEO_METRICS_TOKEN = "right-token"
    wrong = client.get("/readyz", HTTP_AUTHORIZATION="Bearer wrong-token").json()
    assert "detail" not in wrong["checks"]["broker"]
    right = client.get("/readyz", HTTP_AUTHORIZATION="Bearer right-token").json()
    assert right["checks"]["broker"]["detail"]
    user_model = get_user_model()
    client.force_login(user_model.objects.create_user("someone", password="x" * 12))
    assert "detail" not in client.get("/readyz").json()["checks"]["broker"]
    client.force_login(user_model.objects.create_user("staff", password="x" * 12, is_staff=True))
    assert client.get("/readyz").json()["checks"]["broker"]["detail"]


def test_metrics_needs_the_bearer_token(client: Any, settings: Any) -> None:
    settings.GEO_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404  # off unless a token is configured
    settings.GEO_METRICS_TOKEN = "right-token"
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong-token")
    assert wrong.status_code == 401
    right = client.get("/metrics", HTTP_AUTHORIZATION="Bearer right-token")
    assert right.status_code == 200 and b"geo_messages_unacked" in right.content


def test_worker_health_fails_with_the_reason_when_no_worker_answers() -> None:
    with pytest.raises(CommandError, match="no answer from nobody@nowhere"):
        call_command("worker_health", "--name", "nobody@nowhere", "--timeout", "0.5")


READINESS_ON_EACH_LINE = """
import sys, django
django.setup()
from ops.health import readiness
for _ in sys.stdin:
    checks = {c.name: c for c in readiness()}
    print(checks["database"].ok, flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_readiness_is_false_while_the_database_is_unreachable_and_true_once_it_is_back(
    tmp_path: Any,
) -> None:
    import os
    import subprocess
    import sys
    from urllib.parse import urlsplit

    from geo_collect.processes import ROOT
    from tests.services import database_url
    from tests.tcp_proxy import proxy_to

    url = urlsplit(database_url())
    with proxy_to(url.hostname or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url._replace(
            netloc=url.netloc.replace(f"{url.hostname}:{url.port}", f"127.0.0.1:{proxy.port}")
        )
        env = {
            **os.environ,
            "DATABASE_URL": proxied.geturl(),
            "DJANGO_SETTINGS_MODULE": "geo_collect.settings",
        }
        child = subprocess.Popen(
            [sys.executable, "-c", READINESS_ON_EACH_LINE],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None

        def ready() -> bool:
            child.stdin.write("\n")
            child.stdin.flush()
            return child.stdout.readline().strip() == "True"

        try:
            assert ready()
            proxy.cut()  # the database restarts: its connection is dropped, new ones refused
            assert not ready()
            proxy.restore()
            assert ready()  # at once, on a fresh connection
        finally:
            child.kill()
            child.wait(timeout=10)
