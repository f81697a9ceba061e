"""Big statements import in the background: the upload's size is checked before its body is
read, the web answers at once, a worker checks and writes the file and the console and the
API show the progress (issue 28 point 8: a 400,000-row statement ran 300 s in a gunicorn
worker, which was killed; the console read a 300 MB upload before checking its size)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, connections, transaction
from django.test import Client, override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from billing import imports
from billing.models import StatementImport, UpstreamStatement, UpstreamStatementLine
from sampling.models import OutboxMessage
from tenancy.services import grant_platform_finance, grant_role
from tests.api.conftest import token_client
from tests.billing.conftest import run_queued_imports, tenant
from tests.chromium import needs_browser

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]

NOW = "2026-11-11T02:00:00Z"
PASSWORD = "correct horse battery"


def _statement(*rows: str) -> bytes:
    return ("upstream_id,amount,currency,occurred_at\n" + "\n".join(rows) + "\n").encode()


def _rows(count: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{n},0.{n % 100:02d},USD,{NOW}" for n in range(1, count + 1)]


def _upload(content: bytes, name: str = "nov.csv") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="text/csv")


def _platform_user() -> Any:
    grant_platform_finance(username="platform-fin")
    return get_user_model().objects.get(username="platform-fin")


def _console(user: Any, **options: Any) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def _tenant_finance() -> Any:
    grant_role(username="acme-finance", tenant=tenant(), role="finance", password=PASSWORD)
    return get_user_model().objects.get(username="acme-finance")


class _UnreadableBody:
    """A request body that fails the test if anything reads it."""

    def read(self, *args: Any) -> bytes:
        raise AssertionError("the body was read")

    readline = read


def _oversized(client: Client, url: str) -> Any:
    """A POST declaring a body one byte over the limit, whose body cannot be read."""
    declared = imports.body_limit() + 1
    return client.post(
        url,
        data=b"",
        content_type="multipart/form-data; boundary=xyz",
        CONTENT_LENGTH=str(declared),
        **{"wsgi.input": _UnreadableBody()},
    )


# --- size before reading ---------------------------------------------------------------------


@override_settings(GEO_STATEMENT_MAX_BYTES=1000)
def test_a_too_large_console_upload_is_refused_before_its_body_is_read() -> None:
    """The CSRF check reads the whole body before the view: the limit is checked before it
    (found: a 300 MB upload grew a worker by 240 MB before the size was looked at)."""
    client = _console(_platform_user(), enforce_csrf_checks=True)
    response = _oversized(client, reverse("admin:billing_statement_import"))
    assert response.status_code == 413
    text = response.content.decode()
    assert "over the 1000-byte limit" in text and "Nothing was imported" in text
    assert not StatementImport.objects.exists()


@override_settings(GEO_STATEMENT_MAX_BYTES=1000)
def test_a_too_large_api_upload_is_a_413_naming_the_limit_before_its_body_is_read() -> None:
    client = token_client(_platform_user())
    response = _oversized(client, "/api/v1/statements/")  # type: ignore[arg-type]
    assert response.status_code == 413
    assert "over the 1000-byte limit" in response.json()["detail"]
    assert not StatementImport.objects.exists()


@override_settings(GEO_STATEMENT_MAX_BYTES=1000)
def test_a_file_over_the_limit_inside_a_short_enough_body_is_refused_too() -> None:
    """The body may carry up to 64 KiB of form framing: the file's own size is checked as well
    (on the spooled upload, without reading it)."""
    content = _statement(*_rows(40))
    assert 1000 < len(content) < imports.body_limit()
    response = token_client(_platform_user()).post(
        "/api/v1/statements/", {"provider": "collector", "file": _upload(content)}
    )
    assert response.status_code == 400
    assert "over the 1000-byte limit" in response.json()["errors"][0]["message"]
    assert not StatementImport.objects.exists()


# --- queued, running, done or failed ---------------------------------------------------------


def test_a_console_upload_answers_at_once_and_its_page_follows_the_import_to_done() -> None:
    client = _console(_platform_user())
    content = _statement(*_rows(4500))  # more than two batches
    response = client.post(
        reverse("admin:billing_statement_import"),
        {"provider": "collector", "file": _upload(content)},
    )
    job = StatementImport.objects.get()
    page_url = reverse("admin:billing_statement_import_status", args=[job.pk])
    assert response.status_code == 302 and response["Location"] == page_url
    assert not UpstreamStatement.objects.exists()  # nothing imported in the request
    page = client.get(page_url).content.decode()
    assert "Queued" in page and 'data-finished="0"' in page and "statement_import.js" in page
    progress_url = reverse("admin:billing_statement_import_progress", args=[job.pk])
    assert client.get(progress_url).json()["status"] == "queued"

    assert run_queued_imports() == ["done"]
    statement = UpstreamStatement.objects.get()
    assert UpstreamStatementLine.objects.filter(statement=statement).count() == 4500
    line = UpstreamStatementLine.objects.get(statement=statement, upstream_id="t7")
    assert (line.row_no, line.amount, line.currency) == (8, 7, "USD")
    body = client.get(progress_url).json()
    assert (body["status"], body["finished"], body["statement_id"]) == ("done", True, statement.pk)
    assert body["rows_total"] == body["rows_done"] == 4500
    page = client.get(page_url).content.decode()
    assert f"Statement {statement.pk}: 4500 rows imported" in page
    assert 'data-finished="1"' in page
    assert reverse("admin:billing_upstreamstatement_change", args=[statement.pk]) in page
    assert not OutboxMessage.objects.filter(task=imports.TASK, completed_at=None).exists()


def test_a_bad_file_ends_failed_with_its_row_errors_and_imports_nothing() -> None:
    client = token_client(_platform_user())
    rows = _rows(3000)
    rows[2500] = f"t2501,1.555,USD,{NOW}"  # in the second batch
    rows.append(f"t3,0.03,USD,{NOW}")  # repeats row 4
    response = client.post(
        "/api/v1/statements/", {"provider": "collector", "file": _upload(_statement(*rows))}
    )
    assert response.status_code == 202
    assert run_queued_imports() == ["failed"]
    body = client.get(response.json()["url"]).json()
    assert (body["status"], body["statement_id"]) == ("failed", None)
    assert {(e["row"], e["field"]) for e in body["errors"]} == {
        (2502, "amount"),
        (3002, "upstream_id"),
    }
    assert not UpstreamStatement.objects.exists()
    assert not OutboxMessage.objects.filter(task=imports.TASK, completed_at=None).exists()
    console = _console(_platform_user())
    job = StatementImport.objects.get()
    page = console.get(reverse("admin:billing_statement_import_status", args=[job.pk]))
    assert "Nothing was imported: 2 problems" in page.content.decode()
    assert "repeats row 4" in page.content.decode()


def test_a_task_listed_with_another_amount_in_a_later_batch_refuses_the_whole_file() -> None:
    """The check against earlier statements happens batch by batch while writing: a conflict
    after the first batches were written rolls all of them back."""
    client = token_client(_platform_user())
    client.post(
        "/api/v1/statements/",
        {"provider": "collector", "file": _upload(_statement(f"t2800,0.50,USD,{NOW}"), "a.csv")},
    )
    assert run_queued_imports() == ["done"]
    response = client.post(
        "/api/v1/statements/", {"provider": "collector", "file": _upload(_statement(*_rows(3000)))}
    )
    assert run_queued_imports() == ["failed"]
    (error,) = client.get(response.json()["url"]).json()["errors"]
    assert error["row"] == 2801 and "was imported before with 0.50 USD" in error["message"]
    assert UpstreamStatement.objects.count() == 1


def test_a_repeated_message_of_a_finished_import_changes_nothing() -> None:
    """The outbox delivers at least once: a second delivery only completes its message."""
    client = token_client(_platform_user())
    client.post(
        "/api/v1/statements/", {"provider": "collector", "file": _upload(_statement(*_rows(3)))}
    )
    job = StatementImport.objects.get()
    assert run_queued_imports() == ["done"]
    assert imports.run_import(import_id=job.pk, outbox_id=None) == "done"
    assert UpstreamStatement.objects.count() == 1
    assert UpstreamStatementLine.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_progress_written_inside_the_import_transaction_is_seen_by_other_connections() -> None:
    """The lines are written in one transaction (all or nothing), yet a reader sees the
    batches as they go: the reporter writes through a connection of its own."""
    job = StatementImport.objects.create(
        provider="collector", filename="x.csv", stored_name="x", size=1
    )
    reporter = imports._Reporter(job.pk)
    with transaction.atomic():
        reporter(checked=5000, total=5000)
        reporter(done=2000)
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute(
                    "SELECT rows_total, rows_done FROM billing_statementimport WHERE id = %s",
                    [job.pk],
                )
                seen = cursor.fetchone()
        finally:
            other.close()
        reporter.close()
    assert seen == (5000, 2000)


# --- whose imports ---------------------------------------------------------------------------


def test_only_platform_finance_queues_or_follows_a_statement_import() -> None:
    client = token_client(_platform_user())
    queued = client.post(
        "/api/v1/statements/", {"provider": "collector", "file": _upload(_statement(*_rows(2)))}
    )
    job = StatementImport.objects.get()
    finance = _tenant_finance()
    tenant_api = token_client(finance)
    assert tenant_api.get(queued.json()["url"]).status_code == 403
    refused = tenant_api.post(
        "/api/v1/statements/", {"provider": "collector", "file": _upload(_statement(*_rows(2)))}
    )
    assert refused.status_code == 403 and StatementImport.objects.count() == 1
    assert APIClient().get(queued.json()["url"]).status_code == 401
    console = _console(finance)
    for name in (
        "admin:billing_statement_import_status",
        "admin:billing_statement_import_progress",
    ):
        assert console.get(reverse(name, args=[job.pk])).status_code == 403
    assert client.get("/api/v1/statement-imports/999999").status_code == 404


# --- the console's page in a browser ---------------------------------------------------------


def _report(import_id: int, **fields: Any) -> None:
    """What the worker writes, from inside Playwright's loop: Django gives that context a
    connection of its own, closed here so none is left open at the end of the session."""
    StatementImport.objects.filter(pk=import_id).update(**fields)
    connection.close()


@needs_browser[0]
@needs_browser[1]
def test_the_import_page_follows_the_progress_and_shows_the_outcome_in_chromium(
    live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's script (no inline script: the console's CSP) fills in the counts as the
    worker reports them and reloads once the import is finished."""
    from tests.admin.test_csp import RECORD_VIOLATIONS, _violations
    from tests.chromium import chromium, log_in

    grant_platform_finance(username="platform-fin", password=PASSWORD)
    job = StatementImport.objects.create(
        provider="collector", filename="nov.csv", stored_name="x", size=10
    )
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    url = reverse("admin:billing_statement_import_status", args=[job.pk])
    with chromium() as browser:
        page = browser.new_page()
        page.add_init_script(RECORD_VIOLATIONS)
        log_in(page, f"{live_server.url}{url}", "platform-fin", PASSWORD)
        page.wait_for_selector("#import-status")
        assert page.text_content("#import-state") == "queued"
        _report(job.pk, status="running", rows_checked=4000, rows_total=4000, rows_done=2000)
        page.wait_for_function(
            "() => document.getElementById('import-rows-done').textContent === '2000'"
        )
        assert "Writing the rows: 2000 of 4000" in (page.text_content("#import-outcome") or "")
        _report(job.pk, status="failed", errors=["row 3: amount: '1.555': too many decimals"])
        page.wait_for_selector("#import-problems")
        page.wait_for_load_state("networkidle")
        assert "too many decimals" in (page.text_content("#import-problems") or "")
        assert not _violations(page)
