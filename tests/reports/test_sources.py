"""Where the citations come from: the searches the engines ran, found-but-not-cited sources,
citation share per source category and per entity, and source opportunities, each equal to
what a plain join over the evidence rows gives."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection

from analysis.report_exports import report_csv, report_html, report_xlsx
from analysis.reports import build_run_report
from analysis.services import current_revision
from evidence.categories import shipped
from evidence.models import DomainCategory, SearchQuery
from sampling.counters import run_param
from simulator import SimulatorHandle
from tests.reports.conftest import collected_run
from tests.reports.test_report_rows import LATEST, SUCCEEDED

pytestmark = pytest.mark.django_db

# Per cited domain of the analysed captures of succeeded samples: the answers citing it that
# name a competitor, and those that name the brand.
JOINED_BESIDE = (
    "SELECT ci.domain, COUNT(DISTINCT c.id) FILTER (WHERE a.o), "
    "COUNT(DISTINCT c.id) FILTER (WHERE a.b) FROM sampling_sample s "
    "JOIN evidence_capture c ON c.sample_id = s.id AND " + LATEST + " "
    "JOIN evidence_citation ci ON ci.capture_id = c.id AND ci.role = 'cited' "
    "JOIN (SELECT capture_id, bool_or(mentioned AND is_brand) AS b, "
    "bool_or(mentioned AND NOT is_brand) AS o FROM analysis_mention WHERE revision_id = %s "
    "GROUP BY capture_id) a ON a.capture_id = c.id "
    "WHERE s.run_id = %s AND " + SUCCEEDED + " AND ci.domain <> '' GROUP BY 1"
)
JOINED_QUERIES = (
    "SELECT s.platform, s.question_revision_id, q.query, COUNT(*) FROM sampling_sample s "
    "JOIN evidence_capture c ON c.sample_id = s.id AND " + LATEST + " "
    "JOIN evidence_searchquery q ON q.capture_id = c.id "
    "WHERE s.run_id = %s AND " + SUCCEEDED + " GROUP BY 1, 2, 3"
)


def _rows(sql: str, params: list[object]) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def test_the_report_shows_searches_categories_and_opportunities_as_the_joins_give_them(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=2, repeats=2)
    report = build_run_report(run_id=run.pk, with_trend=False)
    assert [c.name for c in report.checks] == ["conservation", "double count", "second count"]

    # What the engines searched: OpenAI's web_search_call queries, per question and platform.
    labels = {int(m.key): m.label for m in report.by_question}
    joined = Counter[tuple[str, str, str]]()
    for platform, question, query, n in _rows(JOINED_QUERIES, [run_param(run.pk)]):
        joined[(labels[int(question)], str(platform), str(query))] += int(n)  # type: ignore[call-overload]
    assert {(s.question, s.platform, s.query): s.n for s in report.searches} == joined
    assert {s.platform for s in report.searches} == {"openai"}  # Sonar does not say
    assert SearchQuery.objects.filter(run_id=run.pk).values("sample_id").distinct().count()

    # Categories: the brand's domains are own, competitors' competitor, g2.com reviews.
    overall = report.overall
    shares = overall.category_share
    assert sum(r.successes for r in shares.values()) == overall.citation_share.n - (
        overall.citations_unparseable
    )
    assert shares["own"].successes == overall.citation_share.successes
    assert report.classification_version == shipped().version
    assert set(shares) <= {"own", "competitor", "reviews", "reference", "editorial",
                           "unclassified"}  # fmt: skip
    entity = overall.entity_citation_share
    assert entity["Acme"].successes == overall.citation_share.successes
    assert entity["Acme"].successes + entity["Globex"].successes <= overall.citation_share.n

    # Source opportunities: cited beside a competitor, never beside the brand, by answers.
    revision = current_revision(run_id=run.pk)
    assert revision is not None
    beside = _rows(JOINED_BESIDE, [revision.pk, run_param(run.pk)])
    own_or_rival = {"acme.com", "globex.com", "initech.com"}
    expected = sorted(
        ((str(d), int(o)) for d, o, b in beside if o and not b and d not in own_or_rival),  # type: ignore[call-overload]
        key=lambda item: (-item[1], item[0]),
    )
    assert [(o.domain, o.n) for o in report.opportunities] == expected

    # Every export carries them.
    csv = report_csv(report)
    assert "search_query" in csv and "citation_share_category" in csv
    assert "found_not_cited" in csv
    html = report_html(report)
    assert "What the engines searched" in html and "Source opportunities" in html
    assert report.searches[0].query in html
    assert report_xlsx(report)[:2] == b"PK"


def test_a_tenant_override_recategorises_a_cited_domain(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=1, repeats=2)
    before = build_run_report(run_id=run.pk, with_trend=False).overall.category_share
    assert "reference" in before  # wikipedia.org, shipped as reference
    DomainCategory.objects.create(
        tenant_id=run.tenant_id, domain="wikipedia.org", category="editorial"
    )
    after = build_run_report(run_id=run.pk, with_trend=False).overall.category_share
    assert "reference" not in after
    was_editorial = before["editorial"].successes if "editorial" in before else 0
    assert after["editorial"].successes == was_editorial + before["reference"].successes
