"""The monitoring dashboard of a campaign (CampaignAdmin's `dashboard` page): its filters, its
one read of the metrics series and the charts drawn from it (console/charts.py).

One statement reads the series rows of the campaign's entities in the chosen scope (all
questions, a topic or a question) and range; they are summed per run x platform x entity and
per run x entity (every selected platform pooled), each pool with the distinct comparability
keys of what it summed. Every figure is a ratio of those sums, as
monitoring.selectors defines them (`METRICS`), and a run's pool gets its key by
`monitoring.selectors.pooled_key`, so a segment here is a segment there: a run whose key
differs from the run before starts a new one. A line is never drawn across a break, and the
summaries (share of voice, sentiment, citations, domains) cover the runs of the latest segment
only, said on the page.

The caller scopes: `campaign` is one the person may see the samples of (tenancy.scope).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from urllib.parse import quote_plus

from django import forms
from django.db import connection
from django.db.models import Count
from django.forms.utils import flatatt
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from analysis.stats import rate
from console.charts import PALETTE, Bar, Part, Point, Series, Stack, bar_chart, stacked_chart
from console.charts import time_chart as draw_time_chart
from evidence.models import Citation, CitationRole
from monitoring.models import SeriesRow
from monitoring.selectors import describe_change, pooled_key
from sampling.models import Campaign

DEFAULT_DAYS = 90
MAX_DAYS = 400
QUESTION_CHOICES = 500
TOP_DOMAINS = 10
DIMENSIONS = ("platform", "region", "device", "mode")
SENTIMENT = (("positive", "#009e73"), ("neutral", "#9ca3af"), ("negative", "#d55e00"))


# --- the filters ---------------------------------------------------------------------------


class PlainSelect(forms.Select):
    """A select whose options are written here rather than by a template each: the question
    filter offers up to QUESTION_CHOICES of them, and Django's per-option templates took a
    sixth of the whole page's time. Same markup and escaping; no option groups (none here)."""

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        chosen = set(self.format_value(value))
        options = format_html_join(
            "",
            '<option value="{}"{}>{}</option>',
            (
                (key, mark_safe(" selected") if str(key) in chosen else "", label)
                for key, label in self.choices
            ),
        )
        own = flatatt(self.build_attrs(self.attrs, attrs))
        return format_html('<select name="{}"{}>{}</select>', name, own, options)


class DashboardFilters(forms.Form):
    """The filters, read from the URL (a GET form: a filtered dashboard is a link to share
    inside the tenant). Choices: the campaign's targets, topics and questions."""

    since = forms.DateField(
        label="from", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        label="to", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    platform = forms.ChoiceField(required=False)
    region = forms.ChoiceField(required=False)
    device = forms.ChoiceField(required=False)
    mode = forms.ChoiceField(required=False)
    topic = forms.ChoiceField(required=False)
    question = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, widget=PlainSelect
    )

    def __init__(self, data: Mapping[str, Any], *, campaign: Campaign) -> None:
        super().__init__(data)
        targets = list(campaign.targets.values(*DIMENSIONS))
        for name in DIMENSIONS:
            values = sorted({str(t[name]) for t in targets} | _given(data, name))
            self._offer(name, [(v, v) for v in values])
        self._offer("topic", [(t, t) for t in sorted(topics_of(campaign) | _given(data, "topic"))])
        questions = (
            campaign.questions.select_related("current_revision")
            .order_by("position", "id")
            .values_list("pk", "position", "current_revision__text")[:QUESTION_CHOICES]
        )
        self._offer(
            "question",
            [(str(pk), f"{position}. {(text or '')[:80]}") for pk, position, text in questions],
        )

    def _offer(self, name: str, choices: list[tuple[str, str]]) -> None:
        field_ = self.fields[name]
        assert isinstance(field_, forms.ChoiceField)
        field_.choices = [("", "all"), *choices]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            self.add_error("until", "The end of the range is before its start.")
        elif since and until and (until - since).days > MAX_DAYS:
            self.add_error("until", f"At most {MAX_DAYS} days at a time.")
        return cleaned


def _given(data: Mapping[str, Any], name: str) -> set[str]:
    value = data.get(name)
    return {str(value)} if value else set()


def topics_of(campaign: Campaign) -> set[str]:
    """The topics of the campaign's questions (what a run freezes into its series rows)."""
    return {
        str(topic)
        for topics in campaign.questions.values_list("topics", flat=True)
        for topic in (topics or [])
        if topic
    }


@dataclass(frozen=True)
class Filters:
    since: date
    until: date
    platform: str | None = None
    region: str | None = None
    device: str | None = None
    mode: str | None = None
    topic: str | None = None
    question: int | None = None

    @classmethod
    def from_form(cls, form: DashboardFilters, *, today: date) -> Filters:
        """The form's values once valid; the default range (the last DEFAULT_DAYS days)
        where a date is missing or the form is not valid."""
        data = form.cleaned_data if form.is_valid() else {}
        until = data.get("until") or today
        since = data.get("since") or until - timedelta(days=DEFAULT_DAYS - 1)
        values = {name: data.get(name) or None for name in (*DIMENSIONS, "topic", "question")}
        return cls(since=since, until=until, **values)

    @property
    def start(self) -> datetime:
        return datetime.combine(self.since, time.min, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """Exclusive: the start of the day after `until` (UTC)."""
        return datetime.combine(self.until + timedelta(days=1), time.min, tzinfo=UTC)

    def targets(self) -> dict[str, str]:
        return {name: value for name in DIMENSIONS if (value := getattr(self, name)) is not None}


# --- the one read ------------------------------------------------------------------------


@dataclass
class RunPool:
    """One run's sums in one pool (a platform, or every selected platform): per entity, the
    READ counts in their order."""

    run_id: str
    at: datetime
    keys: set[str] = field(default_factory=set)
    entities: dict[str, list[int]] = field(default_factory=dict)
    segment: int = 0

    @property
    def key(self) -> str:
        return pooled_key(self.keys)

    @property
    def stamp(self) -> str:
        return _stamp(self.at)

    def count(self, entity: str, name: str) -> int:
        values = self.entities.get(entity)
        return values[READ_INDEX[name]] if values is not None else 0

    def all_mentioned(self) -> int:
        at = READ_INDEX["mentioned"]
        return sum(values[at] for values in self.entities.values())


@lru_cache(maxsize=4096)  # a run's moment is shown by each of its platforms' pools
def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M")


def entities_of(campaign: Campaign) -> list[str]:
    """The brand first, then the competitors in their order."""
    competitors = campaign.competitors.order_by("position", "id").values_list("name", flat=True)
    return [campaign.brand.name, *(name for name in competitors if name != campaign.brand.name)]


# The counts the dashboard's figures read (of monitoring.models.COUNTS).
READ = (
    "valid",
    "mentioned",
    "ranked",
    "position_sum",
    "rated",
    "positive",
    "negative",
    "citations",
    "own_citations",
)
READ_INDEX = {name: index for index, name in enumerate(READ)}


def read_pools(
    campaign: Campaign, filters: Filters, entities: Sequence[str]
) -> tuple[dict[str, list[RunPool]], list[RunPool]]:
    """(platform -> its runs oldest first, the runs pooled over every selected platform),
    each with its segment index. Two index-only scans of the scope's rows
    (series_row_scope_read_idx): the brand's rows, summed here per run x platform, and every
    entity's sums per run; a pool's keys are the distinct keys of the rows it summed."""
    where = ["campaign_id = %s", "entity = ANY(%s)", "at >= %s", "at < %s"]
    params: list[Any] = [campaign.pk, list(entities), filters.start, filters.end]
    for name, value in filters.targets().items():
        where.append(f"{name} = %s")  # a name of DIMENSIONS, never user text
        params.append(value)
    if filters.question is not None:
        where.append("question_id = %s")
        params.append(filters.question)
    else:
        where += ["question_id IS NULL", "topic = %s"]
        params.append(filters.topic or "")
    table, condition = SeriesRow._meta.db_table, " AND ".join(where)
    by_platform: dict[str, dict[str, RunPool]] = defaultdict(dict)
    pooled: dict[str, RunPool] = {}
    moments: dict[float, datetime] = {}
    with connection.cursor() as cursor:
        # The per-platform charts show the brand only, and every entity of a target and scope
        # has a row with the same key (monitoring.services.series_rows): the brand's rows
        # carry every key a run x platform pool has, a quarter of the rows with three rivals.
        cursor.execute(
            "SELECT run_id::text, extract(epoch FROM at)::float8, platform, entity, "
            f"comparability_key, {', '.join(READ)} FROM {table} "
            f"WHERE {condition} AND entity = %s",
            [*params, entities[0]],
        )
        rows = cursor.fetchall()
        # every selected platform pooled per run, summed by PostgreSQL (a hash aggregate)
        cursor.execute(
            f"SELECT run_id::text, entity, {', '.join(f'sum({n})::bigint' for n in READ)} "
            f"FROM {table} WHERE {condition} GROUP BY run_id, entity",
            params,
        )
        sums = cursor.fetchall()
    # A year of daily runs is about 15,000 rows: the loop is kept plain (no call per row).
    for run, epoch, platform, entity, key, *values in rows:
        pools = by_platform[platform]
        pool = pools.get(run)
        if pool is None:
            at = moments.get(epoch)
            if at is None:
                at = moments[epoch] = datetime.fromtimestamp(epoch, UTC)
            pool = pools[run] = RunPool(run_id=run, at=at)
            every = pooled.get(run)
            if every is None:
                pooled[run] = RunPool(run_id=run, at=at)
        known = pool.entities.get(entity)
        if known is None:
            pool.entities[entity] = values
        else:  # several regions, devices or modes of the platform
            pool.entities[entity] = [a + b for a, b in zip(known, values, strict=True)]
        pool.keys.add(key)
    for pools in by_platform.values():
        for run, pool in pools.items():
            pooled[run].keys |= pool.keys
    for run, entity, *values in sums:
        pooled[run].entities[entity] = values
    platforms = {name: _in_segments(runs.values()) for name, runs in sorted(by_platform.items())}
    return platforms, _in_segments(pooled.values())


def _in_segments(pools: Any) -> list[RunPool]:
    ordered = sorted(pools, key=lambda pool: (pool.at, pool.run_id))
    last_key: str | None = None
    segment = 0
    for pool in ordered:
        key = pool.key
        if last_key is not None and key != last_key:
            segment += 1
        pool.segment, last_key = segment, key
    return ordered


def latest_segment(runs: Sequence[RunPool]) -> list[RunPool]:
    return [pool for pool in runs if runs and pool.segment == runs[-1].segment]


# --- the figures ---------------------------------------------------------------------------


def _rate_point(pool: RunPool, hits: int, n: int, href: str, what: str) -> Point:
    figure = rate(hits, n)
    day = pool.stamp
    if figure.value is None:
        return Point(pool.at, None, segment=pool.segment)
    label = (
        f"{day} · {what} {figure.value * 100:.1f} % ({hits} of {n}), "
        f"95 % CI {figure.low * 100:.0f}–{figure.high * 100:.0f} % · segment {pool.segment + 1}"
    )
    return Point(pool.at, figure.value, figure.low, figure.high, href, label, pool.segment)


def _sample_links(platform: str | None, **extra: str) -> Callable[[RunPool], str]:
    """The sample list of a run (and platform), as console.widgets.samples_url. The list's
    path and the query's fixed part are built once per chart, the run id (hex and dashes:
    nothing to quote) once per point."""
    fixed = {"platform": platform or "", **extra}
    tail = "".join(f"&{name}={quote_plus(value)}" for name, value in fixed.items() if value)
    base = reverse("admin:sampling_sample_changelist")
    return lambda pool: f"{base}?run={pool.run_id}{tail}"


def visibility_charts(
    platforms: Mapping[str, list[RunPool]], brand: str, filters: Filters
) -> list[dict[str, Any]]:
    """One chart per platform: the brand's visibility (mentioned of valid answers) per run,
    its 95 % interval as a band; each point links to that run's valid samples there."""
    charts = []
    for platform, runs in platforms.items():
        link = _sample_links(platform, validity="valid")
        points = [
            _rate_point(
                pool,
                pool.count(brand, "mentioned"),
                pool.count(brand, "valid"),
                link(pool),
                "visibility",
            )
            for pool in runs
        ]
        charts.append(
            {
                "platform": platform,
                "segments": runs[-1].segment + 1 if runs else 0,
                "svg": draw_time_chart(
                    [Series(brand, points)],
                    title=f"{brand}: visibility on {platform}",
                    start=filters.start,
                    end=filters.end,
                    width=560,
                    height=200,
                ),
            }
        )
    return charts


def share_of_voice_chart(runs: Sequence[RunPool], entities: Sequence[str], filters: Filters) -> Any:
    link = _sample_links(filters.platform)
    lines = []
    for index, entity in enumerate(entities):
        points = [
            _rate_point(
                pool,
                pool.count(entity, "mentioned"),
                pool.all_mentioned(),
                link(pool),
                f"{entity}: share of voice",
            )
            for pool in runs
        ]
        lines.append(Series(entity, points, PALETTE[index % len(PALETTE)]))
    return draw_time_chart(
        lines, title="Share of voice over time", start=filters.start, end=filters.end
    )


def average_position_chart(
    runs: Sequence[RunPool], entities: Sequence[str], filters: Filters
) -> Any:
    link = _sample_links(filters.platform, validity="valid")
    lines, worst = [], 1.0
    for index, entity in enumerate(entities):
        points = []
        for pool in runs:
            ranked = pool.count(entity, "ranked")
            if not ranked:
                points.append(Point(pool.at, None, segment=pool.segment))
                continue
            mean = pool.count(entity, "position_sum") / ranked
            worst = max(worst, mean)
            label = (
                f"{pool.stamp} · {entity}: average position {mean:.2f} "
                f"over {ranked} ranked answers · segment {pool.segment + 1}"
            )
            href = link(pool)
            points.append(Point(pool.at, mean, href=href, label=label, segment=pool.segment))
        lines.append(Series(entity, points, PALETTE[index % len(PALETTE)]))
    return draw_time_chart(
        lines,
        title="Average position over time (1 = named first)",
        start=filters.start,
        end=filters.end,
        y_min=1.0,
        y_max=max(2.0, float(int(worst) + 1)),
        percent=False,
        invert=True,
    )


def own_citation_chart(runs: Sequence[RunPool], brand: str, filters: Filters) -> Any:
    link = _sample_links(filters.platform, validity="valid")
    points = [
        _rate_point(
            pool,
            pool.count(brand, "own_citations"),
            pool.count(brand, "citations"),
            link(pool),
            "own-domain citations",
        )
        for pool in runs
    ]
    return draw_time_chart(
        [Series(brand, points)],
        title="Own-domain citation rate over time",
        start=filters.start,
        end=filters.end,
    )


def _summed(runs: Sequence[RunPool], entity: str, name: str) -> int:
    return sum(pool.count(entity, name) for pool in runs)


def _rate_bar(entity: str, hits: int, n: int, of: str) -> Bar | None:
    """A bar of hits over n with its interval, labelled "x % (hits of n <of>)"; None when
    n is 0 (nothing to show, not a 0 %)."""
    figure = rate(hits, n)
    if figure.value is None:
        return None
    label = f"{figure.value * 100:.1f} % ({hits} of {n} {of})"
    return Bar(entity, figure.value, figure.low, figure.high, label)


def share_of_voice_bars(runs: Sequence[RunPool], entities: Sequence[str]) -> Any:
    everyone = sum(pool.all_mentioned() for pool in runs)
    bars = [_rate_bar(e, _summed(runs, e, "mentioned"), everyone, "mentions") for e in entities]
    return bar_chart([b for b in bars if b], title="Share of voice, latest segment")


def sentiment_bars(runs: Sequence[RunPool], entities: Sequence[str]) -> Any:
    stacks = []
    for entity in entities:
        rated = _summed(runs, entity, "rated")
        positive = _summed(runs, entity, "positive")
        negative = _summed(runs, entity, "negative")
        neutral = max(0, rated - positive - negative)
        counts = {"positive": positive, "neutral": neutral, "negative": negative}
        stacks.append(
            Stack(entity, [Part(name, counts[name], colour) for name, colour in SENTIMENT])
        )
    return stacked_chart(stacks, title="Sentiment of the mentions, latest segment")


def own_citation_bars(runs: Sequence[RunPool], entities: Sequence[str]) -> Any:
    bars = [
        _rate_bar(e, _summed(runs, e, "own_citations"), _summed(runs, e, "citations"), "citations")
        for e in entities
    ]
    return bar_chart([b for b in bars if b], title="Own-domain citation rate, latest segment")


def top_domains(campaign: Campaign, filters: Filters, run_ids: Sequence[str]) -> Any:
    """The most cited domains in the answers of these runs (narrowed to the targets and the
    question chosen; a topic does not narrow them: citations carry no topic)."""
    # Cited sources only: a source the engine found and the answer does not cite is no citation.
    citations = Citation.objects.filter(run_id__in=list(run_ids), role=CitationRole.CITED).exclude(
        domain=""
    )
    if filters.platform:
        citations = citations.filter(platform=filters.platform)
    for name in ("region", "device", "mode"):
        value = getattr(filters, name)
        if value:
            citations = citations.filter(**{f"sample__{name}": value})
    if filters.question is not None:
        citations = citations.filter(question_revision__question_id=filters.question)
    counted = list(
        citations.order_by()
        .values("domain")
        .annotate(n=Count("id"))
        .order_by("-n", "domain")[:TOP_DOMAINS]
    )
    total = citations.count() if counted else 0
    most = counted[0]["n"] if counted else 1
    return bar_chart(
        [
            Bar(row["domain"], row["n"] / most, text=f"{row['n']} ({row['n'] / total:.0%})")
            for row in counted
        ],
        title="Top cited domains, latest segment",
        colour=PALETTE[2],
    )


def segment_rows(runs: Sequence[RunPool]) -> list[dict[str, Any]]:
    """The pooled series' segments in the range, with what changed at each break."""
    out: list[dict[str, Any]] = []
    for pool in runs:
        if out and out[-1]["index"] == pool.segment:
            out[-1]["end"], out[-1]["runs"] = pool.at, out[-1]["runs"] + 1
            continue
        changes = describe_change(out[-1]["key"], pool.key) if out else []
        out.append(
            {
                "index": pool.segment,
                "number": pool.segment + 1,
                "key": pool.key,
                "start": pool.at,
                "end": pool.at,
                "runs": 1,
                "changes": changes,
            }
        )
    return out


def dashboard_context(campaign: Campaign, filters: Filters) -> dict[str, Any]:
    entities = entities_of(campaign)
    brand = entities[0]
    platforms, pooled = read_pools(campaign, filters, entities)
    latest = latest_segment(pooled)
    return {
        "entities": entities,
        "brand": brand,
        "runs_in_range": len(pooled),
        "latest_runs": len(latest),
        "latest_since": latest[0].at if latest else None,
        "segments": segment_rows(pooled),
        "visibility_charts": visibility_charts(platforms, brand, filters),
        "share_of_voice_chart": share_of_voice_chart(pooled, entities, filters),
        "average_position_chart": average_position_chart(pooled, entities, filters),
        "own_citation_chart": own_citation_chart(pooled, brand, filters),
        "share_of_voice_bars": share_of_voice_bars(latest, entities),
        "sentiment_bars": sentiment_bars(latest, entities),
        "own_citation_bars": own_citation_bars(latest, entities),
        "top_domains": top_domains(campaign, filters, [pool.run_id for pool in latest]),
    }
