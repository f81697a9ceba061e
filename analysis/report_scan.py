"""The auditable report's pass over a run's records, in SQL (analysis/reports.py).

Three grouped queries read the run's rows once each; nothing holds a list of the run's samples
in Python, and no query carries an `IN (...)` of sample ids. Each groups the run's rows per
(platform, question revision, key) once and rolls that up per platform and per question:

* samples per bucket, classified row by row with the buckets' one definition
  (sampling/buckets.py), which the trigger-maintained counters (sampling/counters.py) add up
  by another route, and which the report compares them with; in the same pass, samples per
  evidence state and reason (analysis.evidence_summary);
* mentions per entity of each succeeded sample's analysed capture (its latest completed one)
  in the chosen analysis revision, and in the same pass every tally that counts all of the
  succeeded samples' rows: sentiment and recommendation (analysis.mention_metrics), competitor
  head-to-head;
* citations of the analysed captures per cited host, fetched in batches and folded into the
  group tallies as they arrive (host rules and registrable domains stay in Python,
  evidence/domains.py, computed once per distinct host); cited and found-but-not-cited
  sources (`Citation.role`) are two counts of the same grouped rows.

Two more grouped passes, each over one table's rows of the run, read what the field calls
query fan-out and source opportunities: the searches the engines ran per platform, question
and query (`SearchQuery`), and per cited registrable domain the answers citing it that name
a competitor and those that name the brand (citations joined to the answer's mentions, grouped
per capture first).

Mention and citation rows carry their sample's run, platform and question revision, copied
when they are written (docs/decisions.md, "The report reads mentions and citations per run"),
so they are grouped without joining the samples and captures. A row counts unless its sample
is one of the run's not-succeeded samples or its capture one of the run's not-analysed
captures (not completed, or superseded by a later completed one: `Capture.supersedes`). Both
sets are small and come from partial indexes: each pass groups all of the run's rows, groups
the rows of those sets (read through the rows' indexes on sample and capture) the same way,
and subtracts (`net_cells`, docs/decisions.md "The report subtracts the rows that do not
count"). The report's SQL runs in one transaction with enough `work_mem` that its hash
aggregates stay in memory (`scan_settings`).

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
from evidence.models import Capture, Citation, CitationRole, SearchQuery
from sampling import buckets
from sampling.counters import run_param
from sampling.models import Sample

from .evidence_summary import MISSING_STATES
from .models import Mention

SAMPLE = Sample._meta.db_table
CAPTURE = Capture._meta.db_table
MENTION = Mention._meta.db_table
CITATION = Citation._meta.db_table
SEARCH_QUERY = SearchQuery._meta.db_table
CITED = CitationRole.CITED.value
FETCH = 2000

# A sample's bucket in the report's partition (sampling/buckets.py REPORTED: cancelled apart
# from failed); NULL: a finished sample in no bucket (a bug the report names).
BUCKET_CASE = buckets.case_sql("s", buckets.REPORTED)
SUCCEEDED_SQL = buckets.SUCCEEDED.sql("s")
# The run's samples that are not succeeded (sample_run_unsucceeded_idx): a mention or citation
# row of one of them does not count. Parameter: the run.
NOT_SUCCEEDED = f"SELECT s.id FROM {SAMPLE} s WHERE s.run_id = %s AND NOT ({SUCCEEDED_SQL})"
# The run's captures that are not analysed: the analysed capture of a sample is its latest
# completed capture (analysis.services), i.e. a completed one no later completed capture
# supersedes (capture_run_incomplete_idx, capture_run_superseded_idx). Parameters: the run,
# twice.
NOT_ANALYSED = (
    f"SELECT c.id FROM {CAPTURE} c WHERE c.run_id = %s AND c.collection_state <> 'completed' "
    f"UNION ALL SELECT c.supersedes_id FROM {CAPTURE} c WHERE c.run_id = %s "
    "AND c.supersedes_id IS NOT NULL"
)


def among(column: str, ids: str) -> str:
    """The condition that `column` is one of the ids the query `ids` selects. On PostgreSQL an
    array of them, which the planner looks up through the column's index; with `IN` or a join
    it may hash the set and scan the whole table instead. Only for a small share of a table's
    rows: the other rows are never read."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(ARRAY({ids}))"
    return f"{column} IN ({ids})"


def net_cells(
    keys: list[str],
    cells: str,
    less: list[str],
    nets: dict[str, tuple[str, tuple[int, ...]]],
    present: str,
) -> str:
    """Counted cells as all cells minus those of the rows that do not count.

    `cells` groups all of the run's rows (mentions or citations) per `keys` into its columns;
    each query of `less` groups a set of rows that must not count (rows of the run's
    not-succeeded samples, of its not-analysed captures) the same way. `nets`: each output
    column, the column of the cells it comes from and the queries of `less` subtracted from
    it. The report counts a row unless its sample is not succeeded or its capture not analysed
    (analysis/reports.py); both sets are small, so reading them through indexes (`among`) and
    subtracting costs far less than probing them for each of the million rows that count (a
    hash anti-join per row). Every column is a count or a sum of a column, so subtracting
    gives what counting only the counted rows gives. A cell that keeps no row (`present`, the
    count of its rows, is 0) is dropped, as a count over the counted rows would not have
    made it."""
    joined = " ".join(
        f"LEFT JOIN ({query}) x{i} ON " + " AND ".join(f"x{i}.{k} = a.{k}" for k in keys)
        for i, query in enumerate(less)
    )
    net = ", ".join(
        f"COALESCE(a.{column}, 0)"
        + "".join(f" - COALESCE(x{i}.{column}, 0)" for i in minus)
        + f" AS {name}"
        for name, (column, minus) in nets.items()
    )
    columns = ", ".join(f"a.{k} AS {k}" for k in keys)
    return (
        f"SELECT * FROM (SELECT {columns}, {net} FROM ({cells}) a {joined}) net WHERE {present} > 0"
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
    found: int = 0  # sources found but not cited (not in `citations`)
    entity_citations: Counter[str] = field(default_factory=Counter)  # entity -> its domains'

    def add(self, other: Tally) -> None:
        self.buckets.update(other.buckets)
        self.mentioned.update(other.mentioned)
        self.rank_sum += other.rank_sum
        self.rank_n += other.rank_n
        self.citations += other.citations
        self.brand_citations += other.brand_citations
        self.unparseable += other.unparseable
        self.domains.update(other.domains)
        self.found += other.found
        self.entity_citations.update(other.entity_citations)


@dataclass
class Sentiments:
    """An entity's mentioned rows of the revision's succeeded samples (every row, not only the
    analysed capture's): how many, how many recommend it, how many per sentiment."""

    mentioned: int = 0
    recommended: int = 0
    by_sentiment: Counter[str] = field(default_factory=Counter)


@dataclass
class EntityCell:
    """One entity in one cell (target x question revision) of `run_cells`: its ranks through
    the analysed captures (sum, how many ranked, how many first), its mentioned rows of every
    capture (`Sentiments`, as the report's sentiment and recommendation count them) and the
    citations to its own domains."""

    rank_sum: int = 0
    ranked: int = 0
    first: int = 0
    rows: Sentiments = field(default_factory=lambda: Sentiments())
    own_citations: int = 0


@dataclass
class CellTally(Tally):
    """A cell of `run_cells`: a target's tally for one question revision (the same columns
    as the report's groups), with per entity what the series needs beside them."""

    evidence_missing: int = 0
    entities: dict[str, EntityCell] = field(default_factory=dict)

    def entity(self, name: str) -> EntityCell:
        found = self.entities.get(name)
        if found is None:
            found = self.entities[name] = EntityCell()
        return found


@dataclass
class Groups:
    """The run's tallies: overall, per platform and per question revision (or, from
    `run_cells`, per target and question revision: `by_cell`)."""

    overall: Tally
    by_platform: dict[str, Tally]
    by_question: dict[int, Tally]
    by_cell: dict[tuple[str, int], CellTally] = field(default_factory=dict)
    # (question revision, competitor) -> its rows of succeeded samples beside the same
    # sample's brand row: answers, both named, brand named first, brand only, competitor
    # only; in question revision and competitor order (analysis.mention_metrics.HeadToHead).
    pairs: dict[tuple[int, str], tuple[int, int, int, int, int]] = field(default_factory=dict)
    sentiments: dict[str, Sentiments] = field(default_factory=dict)  # entity -> its rows
    # (platform, evidence state, reason or "" outside MISSING_STATES, samples), from the
    # sample pass (analysis.evidence_summary).
    evidence: list[tuple[str, str, str, int]] = field(default_factory=list)
    # (platform, question revision) -> query -> times the engines ran it (query fan-out).
    searches: dict[tuple[str, int], Counter[str]] = field(default_factory=dict)
    # registrable domain -> (answers citing it that name a competitor, answers citing it that
    # name the brand), of the analysed captures of succeeded samples.
    cited_beside: dict[str, tuple[int, int]] = field(default_factory=dict)

    def tally(self, scope: str, platform: str | None, question: int | None) -> Tally:
        # Looked up before it is made: this runs once per result row, and a Tally made only
        # to be discarded by setdefault costs three Counters.
        if scope == "c":
            return self.cell(str(platform), int(question or 0))
        if scope == "p":
            key = str(platform)
            found = self.by_platform.get(key)
            if found is None:
                found = self.by_platform[key] = Tally()
            return found
        number = int(question or 0)
        found = self.by_question.get(number)
        if found is None:
            found = self.by_question[number] = Tally()
        return found

    def cell(self, target: str, question: int) -> CellTally:
        found = self.by_cell.get((target, question))
        if found is None:
            found = self.by_cell[(target, question)] = CellTally()
        return found


TARGET_PARTS = ("platform", "device", "region", "mode")


def target_key(platform: str, device: str, region: str, mode: str) -> str:
    """A target as the by-target pass names its group (billing.services.target_key's form)."""
    return "|".join((platform, device, region, mode))


def _target_sql(alias: str) -> str:
    return " || '|' || ".join(f"{alias}.{part}" for part in TARGET_PARTS)


def _keyed(table: str, alias: str, by_target: bool) -> tuple[str, str]:
    """(FROM clause, group key) of a pass over a run's mention or citation rows: per
    platform, or per target (read from the row's sample: these rows carry only the
    platform)."""
    if not by_target:
        return f"{table} {alias}", f"{alias}.platform"
    return f"{table} {alias} JOIN {SAMPLE} t ON t.id = {alias}.sample_id", _target_sql("t")


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


def _total(column: str) -> str:
    """The sum of a count over grouped rows, as an integer: PostgreSQL sums bigints into a
    numeric, which reaches Python as a Decimal per value."""
    return f"CAST(SUM({column}) AS BIGINT)"


def _per_platform_and_question(base: str, keys: str, sums: str, cells: bool = False) -> str:
    """One pass over the run's rows (`base`, grouped per platform `p`, question `q` and
    `keys`), rolled up twice: per platform and per question. Each row: scope ('p' or 'q'),
    platform, question, the keys, the sums. With `cells`, not rolled up: one row per
    platform (or target) and question, scope 'c' (`run_cells`)."""
    if cells:
        return (
            f"WITH base AS ({base}) "
            f"SELECT 'c', p, q, {keys}, {sums} FROM base GROUP BY p, q, {keys}"
        )
    return (
        f"WITH base AS ({base}) "
        f"SELECT 'p', p, NULL, {keys}, {sums} FROM base GROUP BY p, {keys} "
        f"UNION ALL SELECT 'q', NULL, q, {keys}, {sums} FROM base GROUP BY q, {keys}"
    )


def _add_samples(
    groups: Groups, run_id: UUID | str, by_target: bool = False, per_cell: bool = False
) -> None:
    """Samples per bucket ("unclassified" for a finished sample in no bucket), and per
    platform, evidence state and reason: one pass over the run's samples for both. With
    `per_cell`: per target and question revision, buckets and samples with evidence missing."""
    missing_states = [str(state) for state in MISSING_STATES]
    missing = ", ".join("%s" for _ in missing_states)
    key = _target_sql("s") if by_target else "s.platform"
    sql = (
        f"WITH base AS (SELECT {key} AS p, s.question_revision_id AS q, {BUCKET_CASE} AS b, "
        f"s.evidence_state AS es, CASE WHEN s.evidence_state IN ({missing}) "
        "THEN s.evidence_reason ELSE '' END AS er, "
        f"COUNT(*) AS n FROM {SAMPLE} s WHERE s.run_id = %s GROUP BY 1, 2, 3, 4, 5) "
    )
    if per_cell:
        sql += (
            f"SELECT 'c', p, q, b, NULL, NULL, {_total('n')} FROM base GROUP BY p, q, b "
            f"UNION ALL SELECT 'x', p, q, NULL, es, NULL, {_total('n')} FROM base "
            f"WHERE es IN ({missing}) GROUP BY p, q, es"
        )
    else:
        sql += (
            f"SELECT 'p', p, NULL, b, NULL, NULL, {_total('n')} FROM base GROUP BY p, b "
            f"UNION ALL SELECT 'q', NULL, q, b, NULL, NULL, {_total('n')} FROM base GROUP BY q, b "
            f"UNION ALL SELECT 'e', p, NULL, NULL, es, er, {_total('n')} FROM base "
            "GROUP BY p, es, er"
        )
    params = [*missing_states, run_param(run_id)] + (missing_states if per_cell else [])
    for scope, platform, question, bucket, state, reason, n in _rows(sql, params):
        if scope == "x":
            groups.cell(str(platform), int(question)).evidence_missing += int(n)
        elif scope == "e":
            groups.evidence.append((str(platform), str(state), str(reason), int(n)))
        else:
            groups.tally(scope, platform, question).buckets[bucket or "unclassified"] += int(n)


def unclassified_ids(run_id: UUID | str, limit: int = 10) -> list[int]:
    rows = _rows(
        f"SELECT s.id FROM {SAMPLE} s WHERE s.run_id = %s AND ({BUCKET_CASE}) IS NULL "
        "ORDER BY s.id LIMIT %s",
        [run_param(run_id), limit],
    )
    return [row[0] for row in rows]


def _add_mentions(
    groups: Groups,
    run_id: UUID | str,
    revision_id: int,
    brand: str,
    sentiments: tuple[str, ...],
    by_target: bool = False,
    per_cell: bool = False,
) -> None:
    """One pass over the revision's mention rows of succeeded samples (one set of rows per
    sample and revision; a competitor's row carries the brand's result in the same answer):

    * through the analysed captures only: samples whose analysed capture mentions each
      entity, and the sum and number of the brand's first-mention ranks;
    * every row: each competitor against the brand in the same answer, per question revision
      (`Groups.pairs`), and each entity's sentiment and recommendation (`Groups.sentiments`).

    Every tally is a `COUNT(*) FILTER` of the same grouped rows, so adding one costs no scan.
    The rows of not-succeeded samples are subtracted from every tally, those of not-analysed
    captures (of succeeded samples) from the analysed ones (`net_cells`).

    With `per_cell` (`run_cells`): not rolled up, one row per target, question revision and
    entity; every entity's ranks are kept, with how many ranked it first (`fp`, through the
    analysed captures), and its sentiment and recommendation per cell."""
    competitor = "NOT m.is_brand"
    counts = {
        "mentioned": "m.mentioned",
        "ha": competitor,
        "hb": f"{competitor} AND m.mentioned AND m.brand_mentioned",
        "hr": f"{competitor} AND m.mentioned AND m.brand_mentioned AND m.brand_rank < m.rank",
        "hbo": f"{competitor} AND NOT m.mentioned AND m.brand_mentioned",
        "hco": f"{competitor} AND m.mentioned AND NOT m.brand_mentioned",
        "sr": "m.mentioned AND m.recommended",
        **{f"s{i}": "m.mentioned AND m.sentiment = %s" for i in range(len(sentiments))},
        **({"fp": "m.mentioned AND m.rank = 1"} if per_cell else {}),
    }
    # The ranks of every entity (the brand's are kept below): the cell has one entity, so
    # this needs no comparison with the brand's name per row.
    selected = (
        "COUNT(*) AS kept, SUM(m.rank) FILTER (WHERE m.mentioned) AS rs, "
        "COUNT(m.rank) FILTER (WHERE m.mentioned) AS rn, "
        + ", ".join(f"COUNT(*) FILTER (WHERE {where}) AS {name}" for name, where in counts.items())
    )

    source, key = _keyed(MENTION, "m", by_target)

    def cells(where: str) -> str:
        return (
            f"SELECT {key} AS p, m.question_revision_id AS q, m.entity AS e, {selected} "
            f"FROM {source} WHERE m.revision_id = %s{where} "
            f"GROUP BY {key}, m.question_revision_id, m.entity"
        )

    # Less the rows of not-succeeded samples (0) everywhere, and those of the not-analysed
    # captures of succeeded samples (1) where only the analysed capture counts.
    succeeded, analysed = (0,), (0, 1)
    nets = {
        "rs": ("rs", analysed),
        "rn": ("rn", analysed),
        "n": ("mentioned", analysed),
        **{name: (name, succeeded) for name in ("ha", "hb", "hr", "hbo", "hco")},
        "sn": ("mentioned", succeeded),
        **{name: (name, succeeded) for name in ("sr", *(f"s{i}" for i in range(len(sentiments))))},
        **({"fp": ("fp", analysed)} if per_cell else {}),
    }
    base = net_cells(
        ["p", "q", "e"],
        cells(""),
        [
            cells(f" AND {among('m.sample_id', NOT_SUCCEEDED)}"),
            cells(
                f" AND {among('m.capture_id', NOT_ANALYSED)} AND NOT EXISTS "
                f"(SELECT 1 FROM ({NOT_SUCCEEDED}) x WHERE x.id = m.sample_id)"
            ),
        ],
        {"kept": ("kept", succeeded), **nets},
        "kept",
    )
    sql = _per_platform_and_question(base, "e", ", ".join(_total(name) for name in nets), per_cell)
    run = run_param(run_id)
    params = [*sentiments, revision_id, *sentiments, revision_id, run]
    params += [*sentiments, revision_id, run, run, run]
    rows = _rows(f"{sql} ORDER BY 3, 4", params)
    if per_cell:
        _add_cell_mentions(groups, rows, sentiments)
        return
    for scope, platform, question, entity, rank_sum, rank_n, n, *rest in rows:
        pair, (mentioned, recommended, *by_sentiment) = rest[:5], rest[5:]
        tally = groups.tally(scope, platform, question)
        tally.mentioned[entity] += int(n or 0)
        if entity == brand:
            tally.rank_sum += int(rank_sum or 0)
            tally.rank_n += int(rank_n or 0)
        if scope == "p":  # the platforms add up to the run: every row has one
            stat = groups.sentiments.setdefault(entity, Sentiments())
            stat.mentioned += int(mentioned or 0)
            stat.recommended += int(recommended or 0)
            for name, count in zip(sentiments, by_sentiment, strict=True):
                stat.by_sentiment[name] += int(count or 0)
        if scope == "q" and pair[0]:
            answers, both, ahead, brand_only, competitor_only = (int(v or 0) for v in pair)
            groups.pairs[(int(question), entity)] = (
                answers,
                both,
                ahead,
                brand_only,
                competitor_only,
            )


def _add_cell_mentions(
    groups: Groups, rows: list[tuple[Any, ...]], sentiments: tuple[str, ...]
) -> None:
    """The rows of `_add_mentions` in cell mode into `Groups.by_cell`."""
    for _scope, target, question, entity, rank_sum, rank_n, n, *rest in rows:
        mentioned, recommended, *by_sentiment = rest[5 : 7 + len(sentiments)]
        cell = groups.cell(str(target), int(question))
        cell.mentioned[entity] += int(n or 0)
        counts = cell.entity(entity)
        counts.rank_sum += int(rank_sum or 0)
        counts.ranked += int(rank_n or 0)
        counts.first += int(rest[-1] or 0)
        counts.rows.mentioned += int(mentioned or 0)
        counts.rows.recommended += int(recommended or 0)
        for name, count in zip(sentiments, by_sentiment, strict=True):
            counts.rows.by_sentiment[name] += int(count or 0)


EntityHosts = tuple[tuple[str, tuple[str, ...]], ...]


@lru_cache(maxsize=65536)
def _url_facts(
    key: str, brands: tuple[str, ...], entities: EntityHosts = ()
) -> tuple[bool, bool, str | None, str | None]:
    """(parseable, a brand's host, registrable domain, the entity whose domains hold the
    host) of a cited URL's host part."""
    host = extract_host(key)
    if host is None:
        return False, False, registrable_domain(key), None
    entity = next(
        (name for name, hosts in entities if any(host_matches(host, h) for h in hosts)), None
    )
    return True, any(host_matches(host, b) for b in brands), registrable_domain(key), entity


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


def _hosts(domains: list[str]) -> tuple[str, ...]:
    return tuple(h for h in (extract_host(d) for d in domains) if h)


def _add_citations(
    groups: Groups,
    run_id: UUID | str,
    brand_domains: list[str],
    by_target: bool = False,
    entity_domains: dict[str, list[str]] | None = None,
    *,
    per_cell: bool = False,
) -> None:
    """Citations of the analysed captures, the brand's share, unparseable ones, cited
    registrable domains and the citations of each entity's domains (`entity_domains`, the
    brand first); beside them, the sources found but not cited. Streams (scope, group, host
    key, cited n, found n) rows: only cited rows make the citation figures.

    A citation does not count if its capture is not analysed or its sample not succeeded:
    the citations of those captures, and of every capture of those samples (a citation's
    sample is its capture's, copied with the row), are subtracted (`net_cells`).

    With `per_cell` (`run_cells`): per target and question revision, not rolled up, and
    each entity's own-domain citations counted by the same host rule as the brand's."""
    brands = _hosts(brand_domains)
    entities = tuple((name, _hosts(domains)) for name, domains in (entity_domains or {}).items())

    source, key = _keyed(CITATION, "ci", by_target)

    def cells(where: str) -> str:
        return (
            f"SELECT {key} AS p, ci.question_revision_id AS q, {_host_key()} AS k, "
            f"COUNT(*) FILTER (WHERE ci.role = '{CITED}') AS n, "
            f"COUNT(*) FILTER (WHERE ci.role <> '{CITED}') AS nf, COUNT(*) AS kept "
            f"FROM {source} WHERE ci.run_id = %s{where} GROUP BY 1, 2, 3"
        )

    base = net_cells(
        ["p", "q", "k"],
        cells(""),
        [cells(f" AND {among('ci.capture_id', _not_counted_captures())}")],
        {"n": ("n", (0,)), "nf": ("nf", (0,)), "kept": ("kept", (0,))},
        "kept",
    )
    sql = _per_platform_and_question(base, "k", f"{_total('n')}, {_total('nf')}", per_cell)
    run = run_param(run_id)
    for scope, platform, question, key, total, found in _streamed(sql, [run] * 5):
        tally = groups.tally(scope, platform, question)
        tally.found += int(found)
        n = int(total)
        if not n:
            continue
        parseable, brand, domain, entity = _url_facts(key, brands, entities)
        if entity is not None:
            tally.entity_citations[entity] += n
        tally.citations += n
        if brand:
            tally.brand_citations += n
        if not parseable:
            tally.unparseable += n
        if domain is not None:
            tally.domains[domain] += n
        if isinstance(tally, CellTally):
            for name, hosts in entities:
                if hosts and _url_facts(key, hosts)[1]:
                    tally.entity(name).own_citations += n


def _not_counted_captures() -> str:
    """The captures whose rows do not count: those of not-succeeded samples, and the
    not-analysed ones. Parameters: the run, three times."""
    return (
        f"SELECT c.id FROM {CAPTURE} c WHERE {among('c.sample_id', NOT_SUCCEEDED)} "
        f"UNION ALL {NOT_ANALYSED}"
    )


def _add_searches(groups: Groups, run_id: UUID | str) -> None:
    """The searches the engines ran (query fan-out) for the analysed captures of succeeded
    samples: one pass over the run's search query rows, grouped per platform, question
    revision and query, less those of the captures that do not count (`net_cells`)."""

    def cells(where: str) -> str:
        return (
            "SELECT sq.platform AS p, sq.question_revision_id AS q, sq.query AS k, "
            f"COUNT(*) AS n FROM {SEARCH_QUERY} sq WHERE sq.run_id = %s{where} GROUP BY 1, 2, 3"
        )

    sql = net_cells(
        ["p", "q", "k"],
        cells(""),
        [cells(f" AND {among('sq.capture_id', _not_counted_captures())}")],
        {"n": ("n", (0,))},
        "n",
    )
    run = run_param(run_id)
    for platform, question, query, n in _streamed(sql, [run] * 5):
        counted = groups.searches.setdefault((str(platform), int(question)), Counter())
        counted[str(query)] += int(n)


def _add_cited_beside(groups: Groups, run_id: UUID | str, revision_id: int) -> None:
    """Per cited registrable domain, the answers citing it that name a competitor and those
    that name the brand, in analysis revision `revision_id`: one pass over the run's cited
    rows joined to their capture's mentions, folded per capture first (one row per capture,
    whatever the number of entities), less the captures that do not count (`net_cells`).
    Counts of distinct captures subtract exactly: the two capture sets are disjoint."""
    answers = (
        # MAX over 0/1 rather than bool_or: the embedded default (SQLite, `make demo`) has none.
        "SELECT m.capture_id AS c, "
        "MAX(CASE WHEN m.mentioned AND m.is_brand THEN 1 ELSE 0 END) = 1 AS b, "
        "MAX(CASE WHEN m.mentioned AND NOT m.is_brand THEN 1 ELSE 0 END) = 1 AS o "
        f"FROM {MENTION} m WHERE m.revision_id = %s GROUP BY m.capture_id"
    )

    def cells(where: str) -> str:
        return (
            "SELECT ci.domain AS k, COUNT(DISTINCT ci.capture_id) FILTER (WHERE a.o) AS o, "
            "COUNT(DISTINCT ci.capture_id) FILTER (WHERE a.b) AS b, COUNT(*) AS kept "
            f"FROM {CITATION} ci JOIN ({answers}) a ON a.c = ci.capture_id "
            f"WHERE ci.run_id = %s AND ci.role = '{CITED}' AND ci.domain <> ''{where} "
            "GROUP BY 1"
        )

    sql = net_cells(
        ["k"],
        cells(""),
        [cells(f" AND {among('ci.capture_id', _not_counted_captures())}")],
        {"o": ("o", (0,)), "b": ("b", (0,)), "kept": ("kept", (0,))},
        "kept",
    )
    run = run_param(run_id)
    for domain, competitor, brand, _kept in _streamed(sql, [revision_id, run] * 2 + [run] * 3):
        groups.cited_beside[str(domain)] = (int(competitor or 0), int(brand or 0))


def run_groups(
    run_id: UUID | str,
    revision_id: int | None,
    brand: str,
    brand_domains: list[str],
    sentiments: tuple[str, ...] = (),
    *,
    by_target: bool = False,
    entity_domains: dict[str, list[str]] | None = None,
    sources: bool = False,
) -> Groups:
    """The run's tallies per platform and per question revision, and overall (the sum of
    the platforms: every sample has one); `sentiments`: the sentiments to count. With
    `by_target`, `by_platform` is keyed by target (`target_key`) instead: the mention and
    citation passes then read each row's sample for its device, region and mode (a join the
    per-platform report does not pay; only runs with several targets of a kind ask for it).
    `entity_domains`: each entity's domains, for the citations of each; `sources`: also the
    searches the engines ran and the domains cited beside the brand or a competitor."""
    groups = Groups(overall=Tally(), by_platform={}, by_question={})
    _add_samples(groups, run_id, by_target)
    if revision_id is not None:
        _add_mentions(groups, run_id, revision_id, brand, sentiments, by_target)
    _add_citations(groups, run_id, brand_domains, by_target, entity_domains)
    if sources:
        _add_searches(groups, run_id)
        if revision_id is not None:
            _add_cited_beside(groups, run_id, revision_id)
    for tally in groups.by_platform.values():
        groups.overall.add(tally)
    return groups


def run_cells(
    run_id: UUID | str,
    revision_id: int | None,
    brand: str,
    entity_domains: dict[str, list[str]],
    sentiments: tuple[str, ...] = (),
) -> dict[tuple[str, int], CellTally]:
    """The run's tallies per target (`target_key`) and question revision, not rolled up: the
    same three passes as `run_groups` (the same rows, buckets, analysed captures and
    subtractions), grouped one level finer. `run_groups` rolls the same base cells up per
    platform and per question; the metrics series (monitoring) sums these into its scopes,
    and pipeline/invariants.py compares the two. `entity_domains`: each entity's domains
    (the brand's give `brand_citations` too)."""
    groups = Groups(overall=Tally(), by_platform={}, by_question={})
    _add_samples(groups, run_id, by_target=True, per_cell=True)
    if revision_id is not None:
        _add_mentions(groups, run_id, revision_id, brand, sentiments, by_target=True, per_cell=True)
    brand_domains = entity_domains.get(brand, [])
    _add_citations(
        groups, run_id, brand_domains, True, entity_domains=entity_domains, per_cell=True
    )
    return groups.by_cell
