"""Every CSV and XLSX the product writes holds strings as inert text.

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is a formula to a
spreadsheet (CSV) or to openpyxl itself, which turns any string starting with `=` into a live
formula cell: a brand named `=1+1 Beta` or an upstream id `=HYPERLINK(...)` would run on the
finance team's machine. CSV cells get a leading `'` (the convention spreadsheets read as
"text"); XLSX cells are written as string cells, keeping the text exactly.

Used by billing/exports.py and analysis/report_exports.py; it sits here, under both, because
those domains may only import downwards.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from openpyxl.cell import WriteOnlyCell


def _decimal_format(value: Decimal) -> str:
    exponent = value.as_tuple().exponent
    places = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    return "0." + "0" * places if places else "0"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert(value: Any) -> Any:
    """A CSV cell value: None as empty, formula-looking strings prefixed with `'`."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


class InertCsvWriter:
    """`csv.writer` whose rows pass through `inert`."""

    def __init__(self, out: io.StringIO, **options: Any) -> None:
        self._writer = csv.writer(out, **options)

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow([inert(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def csv_text(header: Sequence[str], rows: Iterable[Iterable[Any]], **options: Any) -> str:
    out = io.StringIO()
    writer = InertCsvWriter(out, **options)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def append_row(sheet: Any, row: Iterable[Any]) -> None:
    """`sheet.append(row)` with every string cell kept a string (openpyxl would make a string
    starting with `=` a formula)."""
    sheet.append(["" if value is None else value for value in row])
    for cell in sheet[sheet.max_row]:
        if cell.data_type == "f":
            cell.data_type = "s"


def write_only_row(sheet: Any, row: Iterable[Any], *, font: Any = None) -> None:
    """`append_row` for a write-only worksheet (rows stream to disk and cannot be read back):
    each string is a cell typed as a string up front, never a formula; a Decimal is a number
    shown with its own decimals (money in major units: 0.90 stays 0.90)."""
    cells = []
    for value in row:
        cell = WriteOnlyCell(sheet, value="" if value is None else value)
        if isinstance(value, str):
            cell.data_type = "s"
        elif isinstance(value, Decimal):
            cell.number_format = _decimal_format(value)
        if font is not None:
            cell.font = font
        cells.append(cell)
    sheet.append(cells)
