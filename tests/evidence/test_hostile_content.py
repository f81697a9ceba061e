"""Hostile upstream content, through collection, into the console and the report: nothing
executable comes out anywhere."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from analysis.report_exports import report_html
from analysis.reports import build_run_report
from connectors.base import Attachment
from evidence.models import Capture
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.evidence.helpers import OPENAI, analyse, record_result, result

pytestmark = pytest.mark.django_db

HOSTILE_QUESTION = "<script>alert('q')</script> Which CRM? <img src=x onerror=alert('q2')>"
HOSTILE_ANSWER = (
    "**Acme** <script>alert(1)</script> is best.\n\n"
    "[click](javascript:alert(2)) [data](data:text/html,<script>alert(3)</script>) "
    "[vb](vbscript:msgbox(4)) [tab](java\tscript:alert(5))\n\n"
    '<a href="javascript:alert(6)" onclick="alert(7)">x</a> <img src=x onerror=alert(8)>\n\n'
    "<div><b>unclosed <iframe src=//evil.example></iframe><svg onload=alert(9)>"
    '<style>body{background:url("javascript:alert(10)")}</style>'
    '<p style="x" onmouseover="alert(11)">Globex</p><form action="javascript:alert(12)">'
    '<math><mi xlink:href="javascript:alert(13)">m</mi></math> <!-- <script>alert(14)</script> -->'
    "\n\n</td></tr></table></textarea></title><script>alert(15)</script>"
)
HOSTILE_CITATIONS = [
    ("javascript:alert(16)", "<script>alert(17)</script>"),
    ('https://evil.example/?q="><script>alert(18)</script>', '" onmouseover="alert(19)'),
    ("data:text/html;base64,PHNjcmlwdD5hbGVydCgyMCk8L3NjcmlwdD4=", "<img src=x onerror=alert(21)>"),
    ("https://acme.com/pricing?utm_source=x&id=1", "Acme <b>pricing</b>"),
]
BAD_SCHEMES = ("javascript:", "data:", "vbscript:")
URL_ATTRS = {"href", "src", "action", "formaction", "xlink:href", "background", "poster", "srcdoc"}


class _Audit(HTMLParser):
    """Collects everything a browser could execute or load."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script":
            src = values.get("src") or ""
            # The admin's own scripts are static files or JSON data blocks.
            own = src.startswith(("/static/", "/admin/jsi18n/"))
            if not (own or values.get("type") == "application/json"):
                self.problems.append(f"script tag {attrs}")
            self._in_script = True
        if tag in {"iframe", "object", "embed", "frame", "base", "math"}:
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"event handler {name}={value!r} on <{tag}>")
            compact = re.sub(r"[\x00-\x20]", "", (value or "")).lower()
            if name in URL_ATTRS and compact.startswith(BAD_SCHEMES):
                self.problems.append(f"{name}={value!r} on <{tag}>")
            if name == "style" and "javascript" in compact:
                self.problems.append(f"style {value!r}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and "alert(" in data:
            self.problems.append(f"script body {data[:80]!r}")


def _audit(page: str, where: str) -> None:
    audit = _Audit()
    audit.feed(page)
    assert audit.problems == [], f"{where}: {audit.problems}"


def test_hostile_answers_and_citations_are_inert_in_console_and_report(
    simulator: SimulatorHandle, local_storage: Any, django_user_model: Any
) -> None:
    from tests.conftest import launch_funded, make_campaign_data
    from tests.inprocess import drive_in_process

    data = make_campaign_data(questions=1, targets=OPENAI, repeats=2)
    data["questions"] = [HOSTILE_QUESTION]
    data["competitors"][0]["name"] = "Globex<svg onload=alert(22)>"
    data["competitors"][0]["aliases"] = ["Globex"]
    run = launch_funded(data)
    drive_in_process(run.pk)  # collection through the simulator (the question is echoed)

    first, second = Sample.objects.filter(run=run).order_by("id")
    # A hostile answer recorded through the archiving path, analysed, sent to review.
    capture = record_result(
        first,
        result(
            HOSTILE_ANSWER,
            HOSTILE_CITATIONS,
            attachments=[Attachment("screenshot", b"<svg onload=alert(23)>", "image/png")],
            warnings=["<script>alert(24)</script>"],
        ),
    )
    analysed = analyse(first)
    Sample.objects.filter(pk=analysed.pk).update(
        analysis_state="review", evidence_state="partial", evidence_reason="<b onclick=alert(25)>"
    )
    assert Capture.objects.get(pk=capture.pk).answer_text == HOSTILE_ANSWER  # raw kept as is

    admin_user = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client = Client()
    client.force_login(admin_user)
    pages = {
        "sample detail": reverse("admin:sampling_sample_change", args=[first.pk]),
        "other sample": reverse("admin:sampling_sample_change", args=[second.pk]),
        "sample list": reverse("admin:sampling_sample_changelist"),
        "capture detail": reverse("admin:evidence_capture_change", args=[capture.pk]),
        "citation list": reverse("admin:evidence_citation_changelist"),
        "run detail": reverse("admin:sampling_run_change", args=[run.pk]),
        "review queue": reverse("admin:evidence_reviewsample_changelist"),
        "review detail": reverse("admin:evidence_reviewsample_change", args=[first.pk]),
        "mention list": reverse("admin:analysis_mention_changelist"),
    }
    for where, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, where
        _audit(response.content.decode(), where)

    review = client.get(pages["review detail"]).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in review  # shown, as text
    assert "alert(24)" in review and "<script>alert(24)" not in review

    Sample.objects.filter(pk=first.pk).update(analysis_state="accepted")  # report needs a bucket
    html = report_html(build_run_report(run_id=run.pk))
    _audit(html, "report")
    assert "<svg onload" not in html
    assert "&lt;script&gt;alert(&#x27;q&#x27;)&lt;/script&gt;" in html  # the question, escaped


@pytest.mark.parametrize(
    "bad",
    [
        "<script>alert(1)</script>",
        '<a href="javascript:alert(1)">x</a>',
        '<a href=" java\tscript:alert(1)">x</a>',
        '<img src="x" onerror="alert(1)">',
        '<iframe src="https://evil.example"></iframe>',
        '<form action="javascript:alert(1)"></form>',
    ],
)
def test_the_audit_itself_catches_executable_markup(bad: str) -> None:
    with pytest.raises(AssertionError):
        _audit(f"<html><body>{bad}</body></html>", "probe")
