"""Provider statements belong to the platform operator, are filed under a configured provider,
can be voided and imported again; finance reads and types money in major units, exports
included (issue 28 point 2, issue 29 findings 4 and 5)."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import DatabaseError, connection, transaction
from django.http import FileResponse, StreamingHttpResponse
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing import exports, services
from billing.models import ImmutableError, StatementVoid, UpstreamStatement
from billing.reconciliation import (
    MATCHED,
    MISSING_UPSTREAM,
    StatementError,
    import_statement,
    reconcile,
    void_statement,
)
from tenancy.services import grant_platform_finance, grant_role
from tests.billing.conftest import (
    COLLECTOR,
    charge,
    complete,
    launch,
    run_queued_imports,
    samples,
    tenant,
)
from tests.factories import capture_row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]

NOW = "2026-11-11T02:00:00Z"
PASSWORD = "correct horse battery"


def _statement(*rows: str, amount: str = "amount") -> bytes:
    return (f"upstream_id,{amount},currency,occurred_at\n" + "\n".join(rows) + "\n").encode()


def _client(username: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def _tenant_finance(slug: str) -> Client:
    grant_role(username=f"{slug}-finance", tenant=tenant(slug), role="finance", password=PASSWORD)
    return _client(f"{slug}-finance")


def _platform_finance() -> Client:
    grant_platform_finance(username="platform-fin")
    return _client("platform-fin")


def _run_with_a_cost(cost: int = 40):  # type: ignore[no-untyped-def]
    services.top_up(tenant=tenant(), amount=100_000, currency="USD", idempotency_key="p")
    run = launch(questions=1, targets=[COLLECTOR])
    (sample,) = samples(run)
    complete(sample)
    charge(sample)
    capture = capture_row(
        sample=sample,
        revision=1,
        attempt_no=1,
        upstream_id=f"task-{sample.pk}",
        collection_state="completed",
        upstream_cost=cost,
        upstream_cost_currency="USD",
        captured_at=timezone.now(),
    )
    services.record_upstream_cost(capture_id=capture.pk)
    return run, f"task-{sample.pk}"


# --- who imports and sees statements ----------------------------------------------------------


def test_a_tenants_finance_can_neither_import_nor_list_statements() -> None:
    import_statement(provider="collector", filename="acme-secret-name.csv", content=_statement(
        f"t1,0.10,USD,{NOW}"
    ))  # fmt: skip
    bravo = _tenant_finance("bravo")
    upload = SimpleUploadedFile("x.csv", _statement(f"t2,0.10,USD,{NOW}"))
    page = bravo.post(
        reverse("admin:billing_statement_import"), {"provider": "collector", "file": upload}
    )
    assert page.status_code == 403
    assert UpstreamStatement.objects.count() == 1
    listing = bravo.get(reverse("admin:billing_upstreamstatement_changelist"))
    assert listing.status_code == 403
    assert b"acme-secret-name" not in listing.content
    home = bravo.get(reverse("admin:index"))
    assert b"acme-secret-name" not in home.content and b"upstreamstatement" not in home.content


def test_another_tenants_finance_cannot_spoil_a_reconciliation_by_filing_its_task() -> None:
    """Tenant B's finance filed a line carrying A's task id; A's reconciliation turned
    amount_mismatch and A's real line was refused showing B's amount (issue 28)."""
    run, task = _run_with_a_cost(40)
    bravo = _tenant_finance("bravo")
    upload = SimpleUploadedFile("b.csv", _statement(f"{task},7.77,USD,{NOW}"))
    bravo.post(reverse("admin:billing_statement_import"), {"provider": "collector", "file": upload})
    result = import_statement(
        provider="collector", filename="real.csv", content=_statement(f"{task},0.40,USD,{NOW}")
    )
    assert result.imported == 1
    assert {r.upstream_id: r.status for r in reconcile(run_id=run.pk).rows}[task] == MATCHED


def test_platform_finance_imports_and_sees_every_line_of_the_statement() -> None:
    """The statement page said "Rows: 4" over an empty lines table (issue 29)."""
    client = _platform_finance()
    rows = [f"t{n},0.{n}5,USD,{NOW}" for n in range(1, 5)]
    upload = SimpleUploadedFile("nov.csv", _statement(*rows))
    response = client.post(
        reverse("admin:billing_statement_import"), {"provider": "collector", "file": upload}
    )
    assert response.status_code == 302
    assert run_queued_imports() == ["done"]
    statement = UpstreamStatement.objects.get()
    assert statement.imported_by == "platform-fin"
    page = client.get(reverse("admin:billing_upstreamstatement_change", args=[statement.pk]))
    text = page.content.decode()
    assert page.status_code == 200
    for n in range(1, 5):
        assert f"t{n}" in text and f"0.{n}5 USD" in text
    assert 'id="void-form"' in text


def test_the_import_form_offers_only_configured_providers() -> None:
    page = _platform_finance().get(reverse("admin:billing_statement_import")).content.decode()
    assert '<select name="provider"' in page and '<option value="collector">' in page
    with pytest.raises(StatementError) as caught:
        import_statement(provider="colector", filename="s.csv", content=_statement())
    (problem,) = caught.value.problems
    assert problem.startswith("provider: 'colector' is not a configured provider")
    assert "collector" in problem.removeprefix("provider: 'colector'")


# --- dedup per provider, voids, re-imports --------------------------------------------------


def test_the_same_file_under_another_provider_is_another_statement() -> None:
    content = _statement(f"t1,0.10,USD,{NOW}")
    first = import_statement(provider="collector", filename="s.csv", content=content)
    other = import_statement(provider="openai", filename="s.csv", content=content)
    assert other.created and other.imported == 1 and other.statement.pk != first.statement.pk


def test_a_voided_statement_stops_counting_and_its_file_imports_again() -> None:
    """`colector`, then `collector`: "0 rows imported, 4 already known" (issue 29)."""
    run, task = _run_with_a_cost(40)
    content = _statement(f"{task},0.40,USD,{NOW}")
    wrong = import_statement(provider="openai", filename="nov.csv", content=content)
    assert {r.upstream_id: r.status for r in reconcile(platform="openai").rows}[task] == (
        "missing_ours"
    )
    void = void_statement(
        statement_id=wrong.statement.pk, reason="filed under openai", voided_by="x"
    )
    assert void.statement_id == wrong.statement.pk
    assert task not in {r.upstream_id for r in reconcile(platform="openai").rows}
    again = import_statement(provider="openai", filename="nov.csv", content=content)
    assert again.created and again.imported == 1  # voided: no longer "already imported"
    void_statement(
        statement_id=again.statement.pk, reason="still the wrong provider", voided_by="x"
    )
    right = import_statement(provider="collector", filename="nov.csv", content=content)
    assert (right.created, right.imported, right.already_known) == (True, 1, 0)
    assert {r.upstream_id: r.status for r in reconcile(run_id=run.pk).rows}[task] == MATCHED
    assert UpstreamStatement.objects.count() == 3  # nothing deleted


def test_a_task_listed_with_a_wrong_amount_can_be_corrected_by_a_void() -> None:
    run, task = _run_with_a_cost(40)
    bad = import_statement(
        provider="collector", filename="a.csv", content=_statement(f"{task},4.00,USD,{NOW}")
    )
    fixed = _statement(f"{task},0.40,USD,{NOW}")
    with pytest.raises(StatementError, match=r"imported before with 4\.00 USD .*Void that"):
        import_statement(provider="collector", filename="b.csv", content=fixed)
    void_statement(statement_id=bad.statement.pk, reason="wrong amount", voided_by="x")
    assert {r.upstream_id: r.status for r in reconcile(run_id=run.pk).rows}[task] == (
        MISSING_UPSTREAM
    )
    import_statement(provider="collector", filename="b.csv", content=fixed)
    assert {r.upstream_id: r.status for r in reconcile(run_id=run.pk).rows}[task] == MATCHED


def test_a_void_is_append_only_once_and_needs_a_reason() -> None:
    statement = import_statement(
        provider="collector", filename="a.csv", content=_statement(f"t1,0.10,USD,{NOW}")
    ).statement
    with pytest.raises(StatementError, match="say why"):
        void_statement(statement_id=statement.pk, reason="  ", voided_by="x")
    void = void_statement(statement_id=statement.pk, reason="duplicate", voided_by="x")
    with pytest.raises(StatementError, match="already voided"):
        void_statement(statement_id=statement.pk, reason="again", voided_by="x")
    with pytest.raises(ImmutableError):
        void.delete()
    if connection.vendor == "postgresql":
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            StatementVoid.objects.filter(pk=void.pk).delete()
    assert UpstreamStatement.objects.filter(pk=statement.pk).exists()


def test_platform_finance_voids_from_the_statement_page_and_a_tenant_finance_cannot() -> None:
    statement = import_statement(
        provider="collector", filename="a.csv", content=_statement(f"t1,0.10,USD,{NOW}")
    ).statement
    url = reverse("admin:billing_upstreamstatement_void", args=[statement.pk])
    assert _tenant_finance("acme").post(url, {"reason": "mine"}).status_code in (403, 404)
    assert not StatementVoid.objects.exists()
    client = _platform_finance()
    response = client.post(url, {"reason": "filed twice"}, follow=True)
    void = StatementVoid.objects.get()
    assert (void.reason, void.voided_by) == ("filed twice", "platform-fin")
    text = response.content.decode()
    assert 'id="statement-voided"' in text and "filed twice" in text
    assert 'id="void-form"' not in text


# --- one unit: major units where people read and type money ---------------------------------


def test_statement_amounts_are_major_units_or_an_explicit_minor_column() -> None:
    major = import_statement(
        provider="collector", filename="a.csv", content=_statement(f"t1,0.90,USD,{NOW}")
    )
    minor = import_statement(
        provider="collector",
        filename="b.csv",
        content=_statement(f"t2,90,USD,{NOW}", amount="amount_minor"),
    )
    assert [line.amount for line in major.statement.lines.all()] == [90]
    assert [line.amount for line in minor.statement.lines.all()] == [90]
    both = b"upstream_id,amount,amount_minor,currency,occurred_at\nt3,0.90,90,USD," + NOW.encode()
    with pytest.raises(StatementError, match="keep one of them"):
        import_statement(provider="collector", filename="c.csv", content=both)


def test_ledger_exports_are_major_units_with_the_currency() -> None:
    services.top_up(tenant=tenant(), amount=25_090, currency="USD", idempotency_key="pay")
    rows = list(csv.DictReader(io.StringIO(exports.ledger_csv())))
    credit = next(r for r in rows if r["account_kind"] == "available")
    assert (credit["amount"], credit["currency"]) == ("250.90", "USD")
    from openpyxl import load_workbook

    sheet = load_workbook(io.BytesIO(exports.ledger_xlsx()))["ledger"]
    header = [c.value for c in sheet[1]]
    amount = header.index("amount")
    assert header[amount + 1] == "currency"
    cells = [row[amount] for row in sheet.iter_rows(min_row=2)]
    assert {c.value for c in cells} == {250.9, -250.9} and cells[0].number_format == "0.00"


def test_console_exports_stream() -> None:
    run, _ = _run_with_a_cost(40)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "r@example.com", "pw"))
    base = reverse("admin:billing_reconciliation") + f"?run={run.pk}"
    as_csv = client.get(base + "&format=csv")
    assert isinstance(as_csv, StreamingHttpResponse) and as_csv["Content-Type"].startswith(
        "text/csv"
    )
    assert b"0.90,USD" in as_csv.getvalue()
    as_xlsx = client.get(base + "&format=xlsx")
    assert isinstance(as_xlsx, FileResponse) and as_xlsx.getvalue()[:2] == b"PK"


def test_top_up_refuses_a_currency_the_price_list_does_not_use() -> None:
    with pytest.raises(services.BillingError, match="billed in USD; a top-up in EUR"):
        services.top_up(tenant=tenant(), amount=500, currency="EUR", idempotency_key="eur")


def _top_up_page(**data: str) -> str:
    """What acme's finance is told (a fresh session each time: no earlier message left over)."""
    client = _client("acme-finance")
    acme = tenant()
    form = {"tenant": str(acme.pk), "currency": "USD", "key": "pay-1", "memo": "", **data}
    response = client.post(reverse("admin:billing_top_up"), form)
    said = [str(m) for m in get_messages(response.wsgi_request)]
    return "\n".join([*said, response.content.decode()])


def test_top_up_answers_already_credited_zero_and_a_foreign_currency_plainly() -> None:
    _tenant_finance("acme")
    assert "acme: 250.00 USD credited" in _top_up_page(amount="250.00")
    again = _top_up_page(amount="250.00")
    assert "already credited" in again and "nothing was booked again" in again
    assert "250.00 USD credited" not in again
    zero = _top_up_page(amount="0", key="pay-2")
    assert "0 USD books nothing: enter an amount above zero" in zero
    assert "9223372036854775807" not in zero
    euros = _top_up_page(amount="10.00", currency="EUR", key="pay-3")
    assert "Not topped up: tenant 'acme' is billed in USD" in euros
    assert services.billed_currencies(tenant()) == {"USD"}
