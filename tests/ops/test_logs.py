"""The JSON log formatter: context fields on the line, configured secrets never."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from geo_collect import logs
from geo_collect.celery import app


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    secret = "sk-live-abcdef0123456789"
    monkeypatch.setenv("GEO_OPENAI_API_KEY", secret)
    monkeypatch.setenv("DATABASE_URL", "postgres://app:db-password-xyz@db.internal/geo")
    logs.configured_secrets.cache_clear()
    yield secret
    logs.configured_secrets.cache_clear()


def _line(message: str, *args: object) -> dict[str, object]:
    record = logging.LogRecord(
        "sampling.execution", logging.WARNING, __file__, 1, message, args, None
    )
    return dict(json.loads(logs.JsonFormatter().format(record)))


def test_a_line_carries_the_bound_sample_context_until_cleared() -> None:
    logs.bind(run_id="r1", sample_id=7, token=3, platform="openai", step="submit", attempt_no=2)
    logs.bind(request_id="req-9", ignored="")
    line = _line("stale write refused sample=%s", 7)
    assert line["message"] == "stale write refused sample=7"
    assert {k: line[k] for k in ("run_id", "sample_id", "token", "attempt_no", "request_id")} == {
        "run_id": "r1",
        "sample_id": 7,
        "token": 3,
        "attempt_no": 2,
        "request_id": "req-9",
    }
    assert "ignored" not in line
    logs.clear()
    assert "sample_id" not in _line("next task")


def test_configured_secrets_never_reach_a_line(secret_env: str) -> None:
    text = logs.JsonFormatter().format(
        logging.LogRecord(
            "connectors",
            logging.ERROR,
            __file__,
            1,
            "auth header Bearer %s to %s",
            (secret_env, "postgres://app:db-password-xyz@db.internal/geo"),
            None,
        )
    )
    assert secret_env not in text and "db-password-xyz" not in text
    assert text.count(logs.REDACTED) == 2


@app.task(name="tests.ops.log_context_probe")
def _log_context_probe(run_id: str) -> dict[str, object]:
    logs.bind(run_id=run_id)
    return logs.context()


def test_each_celery_task_starts_and_ends_without_another_tasks_log_context() -> None:
    logs.bind(run_id="previous-run", sample_id=41, token=9)  # what a step left on the thread
    seen = _log_context_probe.apply(kwargs={"run_id": "this-run"}).get()
    assert seen == {"run_id": "this-run"}
    assert logs.context() == {}
