"""The auditable report's pass over a run's records, in SQL (analysis/reports.py).

Three grouped queries read the run's rows once each; nothing holds a list of the run's samples
in Python, and no query carries an `IN (...)` of sample ids. Each groups the run's rows per
(platform, question revision, key) once and rolls that up per platform and per question:

* samples per bucket, with the bucket
  classifier written here as SQL, independently of the counters' definitions
  (sampling/counters.py), which the report compares it with;
* mentions per entity of each succeeded sample's analysed capture (its latest completed one)
  in the chosen analysis revision;
* citations of the analysed captures per cited host, fetched in batches and
  folded into the group tallies as they arrive (host rules and registrable domains stay in
  Python, evidence/domains.py, computed once per distinct host).

Mention and citation rows carry their sample's run, platform and question revision, copied
when they are written (docs/decisions.md, "The report reads mentions and citations per run"),
so they are grouped without joining the samples and captures: a row counts unless its sample
is one of the run's not-succeeded samples or its capture one of the run's not-analysed
captures (not completed, or superseded by a later completed one: `Capture.supersedes`). Both
sets are small and come from partial indexes. The report's SQL runs in one transaction with
enough `work_mem` that its hash aggregates and joins stay in memory (`scan_settings`).

Memory grows with the number of groups (platforms + questions) and the distinct cited hosts
per group, never with the number of samples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from uuid import UUID

from django.db import connection

from evidence.domains import extract_host, host_matches, registrable_domain
from evidence.models import Capture, Citation
from sampling.counters import run_param
from sampling.models import Sample

from .models import Mention

SAMPLE = Sample._meta.db_table
CAPTURE = Capture._meta.db_table
MENTION = Mention._meta.db_table
CITATION = Citation._meta.db_table
FETCH = 2000

# A sample's bucket, as `analysis.reports.classify` reads its layers; NULL: a finished sample
# in no bucket (a bug the report names).
BUCKET_CASE = """CASE
  WHEN s.collection_state = 'completed' AND s.analysis_state = 'accepted'
       AND s.validity = 'valid' THEN 'succeeded'
  WHEN s.queue_state <> 'done' THEN 'pending'
  WHEN s.collection_state = 'completed' AND s.validity = 'invalid' THEN 'invalid'
  WHEN s.collection_state = 'completed' AND s.analysis_state = 'review' THEN 'review'
  WHEN s.collection_state = 'failed'
       OR (s.collection_state = 'completed' AND s.analysis_state = 'failed') THEN 'failed'
END"""
SUCCEEDED_SQL = (
    "s.collection_state = 'completed' AND s.analysis_state = 'accepted' AND s.validity = 'valid'"
)
# The run's samples that are not succeeded (sample_run_unsucceeded_idx): a mention or citation
# row of one of them does not count. Parameter: the run.
NOT_SUCCEEDED = f"SELECT s.id FROM {SAMPLE} s WHERE s.run_id = %s AND NOT ({SUCCEEDED_SQL})"
# The run's captures that are not analysed: the analysed capture of a sample is its latest
# completed capture (analysis.services), i.e. a completed one no later completed capture
# supersedes. Parameters: the run, twice.
NOT_ANALYSED = (
    f"SELECT c.id FROM {CAPTURE} c WHERE c.run_id = %s AND c.collection_state <> 'completed' "
    f"UNION ALL SELECT c.supersedes_id FROM {CAPTURE} c WHERE c.run_id = %s "
    "AND c.supersedes_id IS NOT NULL"
)


def counted(alias: str) -> str:
    """The condition on a mention or citation row (`alias`, with sample_id and capture_id)
    that it belongs to a succeeded sample's analysed capture. Parameters: the run, 3 times."""
    return (
        f"NOT EXISTS (SELECT 1 FROM ({NOT_SUCCEEDED}) x WHERE x.id = {alias}.sample_id) "
        f"AND NOT EXISTS (SELECT 1 FROM ({NOT_ANALYSED}) y WHERE y.id = {alias}.capture_id)"
    )


# Per transaction (PostgreSQL): the report's hash aggregates and joins over a million rows
# fit in memory instead of spilling to disk (work_mem defaults to 4 MB), and a query this
# short does not pay for JIT compilation.
SCAN_SETTINGS = ("SET LOCAL work_mem = '256MB'", "SET LOCAL jit = off")


def scan_settings() -> None:
    """Apply SCAN_SETTINGS to the current transaction (call inside `transaction.atomic`)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for statement in SCAN_SETTINGS:
            cursor.execute(statement)


@dataclass
class Tally:
    """What the metrics of one group (the run, a platform, a question revision) need."""

    buckets: Counter[str] = field(default_factory=Counter)
    mentioned: Counter[str] = field(default_factory=Counter)  # entity -> succeeded samples
    rank_sum: int = 0
    rank_n: int = 0
    citations: int = 0
    brand_citations: int = 0
    unparseable: int = 0
    domains: Counter[str] = field(default_factory=Counter)

    def add(self, other: Tally) -> None:
        self.buckets.update(other.buckets)
        self.mentioned.update(other.mentioned)
        self.rank_sum += other.rank_sum
        self.rank_n += other.rank_n
        self.citations += other.citations
        self.brand_citations += other.brand_citations
        self.unparseable += other.unparseable
        self.domains.update(other.domains)


@dataclass
class Groups:
    """The run's tallies: overall, per platform and per question revision."""

    overall: Tally
    by_platform: dict[str, Tally]
    by_question: dict[int, Tally]
    # (question revision, competitor) -> its rows of succeeded samples beside the same
    # sample's brand row: answers, both named, brand named first, brand only, competitor
    # only; in question revision and competitor order (analysis.report_sql.HeadToHead).
    pairs: dict[tuple[int, str], tuple[int, int, int, int, int]] = field(default_factory=dict)

    def tally(self, scope: str, platform: str | None, question: int | None) -> Tally:
        if scope == "p":
            return self.by_platform.setdefault(str(platform), Tally())
        return self.by_question.setdefault(int(question or 0), Tally())


def _rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _streamed(sql: str, params: list[Any]) -> Iterator[tuple[Any, ...]]:
    """Rows turned into Python objects in batches (bounded Python memory). A client-side
    cursor: PostgreSQL plans a server-side cursor (DECLARE) without parallel workers, and the
    result is one row per group and host, not per citation."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        while batch := cursor.fetchmany(FETCH):
            yield from batch


def _per_platform_and_question(base: str, keys: str, sums: str) -> str:
    """One pass over the run's rows (`base`, grouped per platform `p`, question `q` and
    `keys`), rolled up twice: per platform and per question. Each row: scope ('p' or 'q'),
    platform, question, the keys, the sums."""
    return (
        f"WITH base AS ({base}) "
        f"SELECT 'p', p, NULL, {keys}, {sums} FROM base GROUP BY p, {keys} "
        f"UNION ALL SELECT 'q', NULL, q, {keys}, {sums} FROM base GROUP BY q, {keys}"
    )


def _add_samples(groups: Groups, run_id: UUID | str) -> None:
    """Samples per bucket ("unclassified" for a finished sample in no bucket)."""
    sql = _per_platform_and_question(
        f"SELECT s.platform AS p, s.question_revision_id AS q, {BUCKET_CASE} AS b, "
        f"COUNT(*) AS n FROM {SAMPLE} s WHERE s.run_id = %s GROUP BY 1, 2, 3",
        "b",
        "SUM(n)",
    )
    for scope, platform, question, bucket, n in _rows(sql, [run_param(run_id)]):
        groups.tally(scope, platform, question).buckets[bucket or "unclassified"] += int(n)


def unclassified_ids(run_id: UUID | str, limit: int = 10) -> list[int]:
    rows = _rows(
        f"SELECT s.id FROM {SAMPLE} s WHERE s.run_id = %s AND ({BUCKET_CASE}) IS NULL "
        "ORDER BY s.id LIMIT %s",
        [run_param(run_id), limit],
    )
    return [row[0] for row in rows]


def _add_mentions(groups: Groups, run_id: UUID | str, revision_id: int, brand: str) -> None:
    """One pass over the revision's mention rows of succeeded samples (one set of rows per
    sample and revision; a competitor's row carries the brand's result in the same answer):

    * through the analysed captures only: samples whose analysed capture mentions each
      entity, and the sum and number of the brand's first-mention ranks;
    * every row (as the sentiment's count, analysis.report_sql): each competitor against the
      brand in the same answer, per question revision (`Groups.pairs`)."""
    analysed = "y.id IS NULL"
    competitor = "NOT m.is_brand"
    sums = {
        "n": f"m.mentioned AND {analysed}",
        "rs": f"m.mentioned AND {analysed} AND m.entity = %s",
        "rn": f"m.mentioned AND {analysed} AND m.entity = %s AND m.rank IS NOT NULL",
        "ha": competitor,
        "hb": f"{competitor} AND m.mentioned AND m.brand_mentioned",
        "hr": f"{competitor} AND m.mentioned AND m.brand_mentioned AND m.brand_rank < m.rank",
        "hbo": f"{competitor} AND NOT m.mentioned AND m.brand_mentioned",
        "hco": f"{competitor} AND m.mentioned AND NOT m.brand_mentioned",
    }
    selected = ", ".join(
        f"SUM(CASE WHEN {condition} THEN {'m.rank' if name == 'rs' else 1} ELSE 0 END) AS {name}"
        for name, condition in sums.items()
    )
    sql = _per_platform_and_question(
        f"SELECT m.platform AS p, m.question_revision_id AS q, m.entity AS e, {selected} "
        f"FROM {MENTION} m "
        f"LEFT JOIN (SELECT DISTINCT z.id FROM ({NOT_ANALYSED}) z) y ON y.id = m.capture_id "
        f"WHERE m.revision_id = %s AND NOT EXISTS (SELECT 1 FROM ({NOT_SUCCEEDED}) x "
        "WHERE x.id = m.sample_id) GROUP BY m.platform, m.question_revision_id, m.entity",
        "e",
        ", ".join(f"SUM({name})" for name in sums),
    )
    run = run_param(run_id)
    params = [brand, brand, run, run, revision_id, run]
    rows = _rows(f"{sql} ORDER BY 3, 4", params)
    for scope, platform, question, entity, n, rank_sum, rank_n, *pair in rows:
        tally = groups.tally(scope, platform, question)
        tally.mentioned[entity] += int(n or 0)
        tally.rank_sum += int(rank_sum or 0)
        tally.rank_n += int(rank_n or 0)
        if scope == "q" and pair[0]:
            answers, both, ahead, brand_only, competitor_only = (int(v or 0) for v in pair)
            groups.pairs[(int(question), entity)] = (
                answers,
                both,
                ahead,
                brand_only,
                competitor_only,
            )


@lru_cache(maxsize=65536)
def _url_facts(key: str, brands: tuple[str, ...]) -> tuple[bool, bool, str | None]:
    """(parseable, a brand's host, registrable domain) of a cited URL's host part."""
    host = extract_host(key)
    if host is None:
        return False, False, registrable_domain(key)
    return True, any(host_matches(host, b) for b in brands), registrable_domain(key)


def _host_key() -> str:
    """What of a cited URL decides its host: on PostgreSQL, for an http(s) URL, its scheme and
    the text up to the next "/" (urlsplit reads the same netloc from it, so evidence.domains
    gives the same host and domain), otherwise the whole URL. Fewer distinct keys, fewer
    rows, and plain string functions rather than a regular expression per citation."""
    url = "CASE WHEN ci.normalized_url <> '' THEN ci.normalized_url ELSE ci.url END"
    if connection.vendor != "postgresql":
        return url
    return (
        f"CASE WHEN left({url}, 7) = 'http://' OR left({url}, 8) = 'https://' "
        f"THEN split_part({url}, '/', 1) || '//' || split_part({url}, '/', 3) ELSE {url} END"
    )


def _add_citations(groups: Groups, run_id: UUID | str, brand_domains: list[str]) -> None:
    """Citations of the analysed captures, the brand's share, unparseable ones and cited
    registrable domains. Streams (scope, group, host key, n) rows."""
    brands = tuple(h for h in (extract_host(d) for d in brand_domains) if h)
    sql = _per_platform_and_question(
        f"SELECT ci.platform AS p, ci.question_revision_id AS q, {_host_key()} AS k, "
        f"COUNT(*) AS n FROM {CITATION} ci WHERE ci.run_id = %s AND {counted('ci')} "
        "GROUP BY 1, 2, 3",
        "k",
        "SUM(n)",
    )
    run = run_param(run_id)
    for scope, platform, question, key, total in _streamed(sql, [run] * 4):
        tally = groups.tally(scope, platform, question)
        n = int(total)
        parseable, brand, domain = _url_facts(key, brands)
        tally.citations += n
        if brand:
            tally.brand_citations += n
        if not parseable:
            tally.unparseable += n
        if domain is not None:
            tally.domains[domain] += n


def run_groups(
    run_id: UUID | str, revision_id: int | None, brand: str, brand_domains: list[str]
) -> Groups:
    """The run's tallies per platform and per question revision, and overall (the sum of
    the platforms: every sample has one)."""
    groups = Groups(overall=Tally(), by_platform={}, by_question={})
    _add_samples(groups, run_id)
    if revision_id is not None:
        _add_mentions(groups, run_id, revision_id, brand)
    _add_citations(groups, run_id, brand_domains)
    for tally in groups.by_platform.values():
        groups.overall.add(tally)
    return groups
