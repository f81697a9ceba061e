import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from connectors.base import ErrorClass
from connectors.errors import (
    classify_error_code,
    classify_http_error,
    request_id_from,
    retry_after_seconds,
    should_retry_header,
)

NOW = datetime(2026, 11, 11, 2, 0, 0, tzinfo=UTC)


STATUSES_BY_CLASS = {
    ErrorClass.INVALID: (400, 404, 422),
    ErrorClass.AUTH: (401, 402, 403),
    ErrorClass.RATE_LIMITED: (429,),
    ErrorClass.TRANSIENT: (408, 409, 500, 502, 503, 529),
}


@pytest.mark.parametrize(
    ("status", "expected"),
    [(status, cls) for cls, statuses in STATUSES_BY_CLASS.items() for status in statuses],
)
def test_status_classification(status: int, expected: ErrorClass) -> None:
    error = classify_http_error(status, {}, b"")
    assert error.error_class is expected
    assert error.status_code == status


def test_openai_insufficient_quota_429_is_an_account_problem_not_a_wait() -> None:
    body = json.dumps({"error": {"code": "insufficient_quota", "message": "quota"}}).encode()
    assert classify_http_error(429, {}, body).error_class is ErrorClass.AUTH


def test_retry_after_ms_wins_over_retry_after() -> None:
    headers = {"retry-after-ms": "1500", "Retry-After": "2"}
    assert retry_after_seconds(headers) == 1.5


def test_retry_after_in_seconds() -> None:
    assert retry_after_seconds({"Retry-After": "7"}) == 7.0


def test_retry_after_as_http_date() -> None:
    later = format_datetime(NOW + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds({"Retry-After": later}, now=NOW) == 30.0


def test_retry_after_date_in_the_past_means_now() -> None:
    earlier = format_datetime(NOW - timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds({"retry-after": earlier}, now=NOW) == 0.0


def test_unparseable_retry_after_is_no_hint() -> None:
    assert retry_after_seconds({"Retry-After": "soon"}) is None


def test_gemini_retry_info_in_body() -> None:
    body = json.dumps(
        {
            "error": {
                "code": 429,
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"},
                ],
            }
        }
    ).encode()
    error = classify_http_error(429, {}, body)
    assert error.error_class is ErrorClass.RATE_LIMITED
    assert error.retry_after == 1.5


def test_x_should_retry_header() -> None:
    assert should_retry_header({"x-should-retry": "true"}) is True
    assert should_retry_header({"X-Should-Retry": "false"}) is False
    assert should_retry_header({}) is None
    assert classify_http_error(500, {"x-should-retry": "false"}, b"").should_retry is False


@pytest.mark.parametrize(
    "header", ["x-request-id", "request-id", "x-ds-trace-id", "Msh-Request-Id", "X-Request-Id"]
)
def test_request_id_from_each_header(header: str) -> None:
    assert request_id_from({header: "abc-123"}) == "abc-123"


def test_request_id_from_body() -> None:
    assert request_id_from({}, b'{"request_id": "rid-9", "error": {}}') == "rid-9"
    assert request_id_from({}, b'{"error": {"request_id": "rid-10"}}') == "rid-10"


def test_message_comes_from_the_error_body_or_a_snippet() -> None:
    body = b'{"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}'
    assert classify_http_error(429, {}, body).message == "Rate limit reached"
    html = classify_http_error(502, {}, b"<html>Bad gateway</html>")
    assert "Bad gateway" in html.message
    assert html.raw == b"<html>Bad gateway</html>"


def test_stream_error_codes() -> None:
    assert classify_error_code("server_error") is ErrorClass.TRANSIENT
    assert classify_error_code("rate_limit_exceeded") is ErrorClass.RATE_LIMITED
    assert classify_error_code("invalid_prompt") is ErrorClass.INVALID
    assert classify_error_code("something_new") is ErrorClass.UPSTREAM_FAILED
    assert classify_error_code(None) is ErrorClass.UPSTREAM_FAILED


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_configuration_error_not_retried(status: int) -> None:
    error = classify_http_error(status, {"Location": "https://login.example/"}, b"")

    assert error.error_class is ErrorClass.INVALID
    assert error.status_code == status
