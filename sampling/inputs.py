"""One set of rules for values that come from outside: campaign files, statements, callbacks,
upstream responses.

Pure functions, no table touched: each returns the clean value or raises InputError naming
the field, so a boundary can refuse the whole input before anything is written (a 400, or one
line and exit 1 for a command), and so the database never sees a value it would refuse with a
DataError (over-long, NUL, out of range).

What is refused, and why:
* control characters and NUL anywhere (PostgreSQL refuses NUL in text; the others are
  invisible in the console and in exports);
* bidi overrides and isolates (U+202A-U+202E, U+2066-U+2069), which make a name or an id read
  differently from what it is;
* in ids, every invisible format character (zero-width space, joiners, BOM): an id must mean
  exactly what it shows;
* in names and questions, a text of nothing but invisible characters. Joiners inside text stay
  allowed, since emoji sequences and some scripts need them;
* amounts that are not ASCII digits (`int()` would also take `1_000`, Arabic-Indic and
  full-width digits) or do not fit a signed 64-bit column;
* currencies other than three ASCII capitals, domains that are not hostnames.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import unicodedata
from typing import Any

from connectors.base import ErrorClass, NormalizedResult, SubmitOutcome, UpstreamError

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
SLUG_MAX = 64
ID_MAX = 200
NAME_MAX = 200

_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9_-]*[a-z0-9])?", re.ASCII)
_AMOUNT = re.compile(r"-?[0-9]+", re.ASCII)
_CURRENCY = re.compile(r"[A-Z]{3}", re.ASCII)
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_LINE_BREAKS = frozenset("\t\n\r")


class InputError(ValueError):
    """A value from outside was refused; `field` names where it was."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InputError(field, f"expected a string, got {type(value).__name__}")
    return value


def _check_length(text: str, field: str, max_length: int) -> str:
    if len(text) > max_length:
        raise InputError(field, f"{len(text)} characters, over the {max_length} limit")
    return text


def _refuse_hidden(text: str, field: str, *, allow_line_breaks: bool) -> None:
    for index, char in enumerate(text):
        if char in _BIDI_CONTROLS:
            raise InputError(field, f"bidirectional control U+{ord(char):04X} at {index}")
        if unicodedata.category(char) in ("Cc", "Cs") and not (
            allow_line_breaks and char in _LINE_BREAKS
        ):
            raise InputError(field, f"control character U+{ord(char):04X} at {index}")


def _visible(text: str) -> bool:
    """Some letter, mark, number, punctuation or symbol: not only spaces, format, private-use
    or unassigned code points."""
    return any(unicodedata.category(c)[0] not in "CZ" for c in text)


def text(value: Any, field: str, *, max_length: int = NAME_MAX, required: bool = True) -> str:
    """A name, alias or question, as given (normalising is the caller's business): no
    control, NUL or bidi-override characters, something visible when required, at most
    `max_length` characters. Tabs and line breaks are allowed (questions may wrap)."""
    text_value = _string(value, field)
    _refuse_hidden(text_value, field, allow_line_breaks=True)
    if required and not text_value.strip():
        raise InputError(field, "must not be empty")
    if required and not _visible(text_value):
        raise InputError(field, "has only invisible characters")
    return _check_length(text_value, field, max_length)


def identifier(value: Any, field: str, *, max_length: int = ID_MAX) -> str:
    """An id made elsewhere (upstream task id, delivery id, statement id): non-empty, no
    whitespace, no control or invisible format characters, at most `max_length`."""
    ident = _string(value, field)
    if not ident:
        raise InputError(field, "must not be empty")
    _check_length(ident, field, max_length)
    _refuse_hidden(ident, field, allow_line_breaks=False)
    for index, char in enumerate(ident):
        if unicodedata.category(char) in ("Cf", "Zs", "Zl", "Zp") or char.isspace():
            raise InputError(field, f"invisible or space character U+{ord(char):04X} at {index}")
    return ident


def slug(value: Any, field: str, *, max_length: int = SLUG_MAX) -> str:
    """A tenant slug: lowercase ASCII letters, digits, '-' and '_', starting and ending with a
    letter or digit (so never a path like `../x` or `a/b`)."""
    slug_value = _string(value, field)
    _check_length(slug_value, field, max_length)
    if not _SLUG.fullmatch(slug_value):
        raise InputError(field, f"{slug_value[:80]!r} is not a slug (lowercase a-z, 0-9, '-', '_')")
    return slug_value


def amount(value: Any, field: str, *, minimum: int = INT64_MIN, maximum: int = INT64_MAX) -> int:
    """A whole number of minor units written in ASCII digits (an int passes as is), within
    [minimum, maximum] and never outside a signed 64-bit column."""
    if isinstance(value, bool):
        raise InputError(field, "expected a whole number, got a boolean")
    if isinstance(value, int):
        number = value
    else:
        digits = _string(value, field).strip(" ")
        if not _AMOUNT.fullmatch(digits) or len(digits) > 20:
            raise InputError(field, f"{digits[:40]!r} is not a whole number in ASCII digits")
        number = int(digits)
    low, high = max(minimum, INT64_MIN), min(maximum, INT64_MAX)
    if not low <= number <= high:
        raise InputError(field, f"{number} is outside {low}..{high}")
    return number


def currency(value: Any, field: str) -> str:
    """An ISO 4217 code: exactly three ASCII capitals (`ＵＳＤ` and `usd` are refused)."""
    code = _string(value, field)
    if not _CURRENCY.fullmatch(code):
        raise InputError(field, f"{code[:20]!r} is not a three-letter currency code like USD")
    return code


def domain(value: Any, field: str) -> str:
    """A hostname, lowercased: labels of letters, digits and hyphens once in their IDNA (ASCII)
    form, at least two of them, no scheme, path, port or user. `javascript:alert(1)` and
    `acme.com/x` are refused."""
    raw = _string(value, field).strip().lower().rstrip(".")
    try:
        ascii_name = raw.encode("idna").decode("ascii")
    except UnicodeError:
        raise InputError(field, f"{raw[:80]!r} is not a hostname") from None
    labels = ascii_name.split(".")
    if len(ascii_name) > 253 or len(labels) < 2 or not all(_LABEL.fullmatch(x) for x in labels):
        raise InputError(field, f"{raw[:80]!r} is not a hostname like example.com")
    return raw


# --- upstream values --------------------------------------------------------------------------
# What an upstream sends is input too. These fit a connector's result to the columns that
# store it, so a long id or a garbage MIME type is a clear outcome, never a DataError at
# INSERT (which would retry the step and park the sample).

MIME_MAX = 100
_MIME = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+", re.ASCII)
FALLBACK_MIME = "application/octet-stream"


def _upstream_id_or_digest(value: str) -> str:
    """An answer already in hand keeps its id when the id is storable, else a digest of it
    (the id is only a reference then; the answer is what matters)."""
    try:
        return identifier(value, "upstream_id")
    except InputError:
        return "sha256:" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()


def _mime(value: str | None) -> str:
    """The media type's `type/subtype`, or octet-stream when that is not one."""
    essence = (value or "").split(";", 1)[0].strip()
    if len(value or "") <= MIME_MAX and _MIME.fullmatch(essence):
        return str(value)
    return essence if len(essence) <= MIME_MAX and _MIME.fullmatch(essence) else FALLBACK_MIME


def upstream_result(result: NormalizedResult) -> NormalizedResult:
    """The result with every value fit for storage: ids, MIME types, the reported cost."""
    if result.upstream_id:
        result.upstream_id = _upstream_id_or_digest(result.upstream_id)
    if result.request_id and not _storable_id(result.request_id):
        result.request_id = None
    result.raw_mime = _mime(result.raw_mime) if result.raw_mime else result.raw_mime
    for attachment in result.attachments:
        attachment.mime = _mime(attachment.mime)
    if result.cost is not None and not _valid_cost(result.cost, result.cost_currency):
        result.warnings.append(f"UPSTREAM_COST_INVALID: {str(result.cost)[:40]}")
        result.cost, result.cost_currency = None, None
    return result


def upstream_outcome(outcome: SubmitOutcome) -> SubmitOutcome:
    """A submit outcome fit for storage. A task id we would have to poll by but cannot store
    is refused (UpstreamError PARSE_FAILED, with the reason); an answered request keeps its
    answer."""
    if outcome.result is None:
        try:
            identifier(outcome.upstream_id, "upstream_id")
        except InputError as error:
            raise UpstreamError(
                ErrorClass.PARSE_FAILED, f"upstream task id refused: {error}"
            ) from None
    else:
        upstream_result(outcome.result)
    request_id = outcome.request_id
    priced = outcome.cost is not None and _valid_cost(outcome.cost, outcome.cost_currency)
    return dataclasses.replace(
        outcome,
        upstream_id=_upstream_id_or_digest(outcome.upstream_id),
        request_id=request_id if request_id and _storable_id(request_id) else None,
        cost=outcome.cost if priced else None,
        cost_currency=outcome.cost_currency if priced else None,
    )


def _storable_id(value: str) -> bool:
    try:
        identifier(value, "request_id")
    except InputError:
        return False
    return True


def _valid_cost(cost: Any, cost_currency: str | None) -> bool:
    try:
        amount(cost, "cost", minimum=0)
        currency(cost_currency, "cost_currency")
    except InputError:
        return False
    return True
