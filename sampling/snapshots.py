"""A run's frozen JSON, typed: `RunConfig` is what launch froze of the campaign
(`Run.config_snapshot`), `Quote` the price the run was launched at (`Run.quote_snapshot`).

Writers build the dataclass and store `to_json()`; readers take `RunConfig.of(run)` /
`Quote.of(run)` instead of looking keys up. The JSON shape is the one runs have always
stored, so no row is migrated: `to_json(from_json(x)) == x` for every snapshot written since
`snapshot_version` 1, and a key that older rows lack takes the default the readers assumed
before these types existed. A key every reader needed (the tenant, the brand) is still
needed: its absence raises `SnapshotError`, as the `KeyError` of a key lookup did.

Here, below every app that reads them, so each layer can import them (sampling imports only
connectors).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from sampling.models import Run

SNAPSHOT_VERSION = 1
QUOTE_VERSION = 1
NO_SCREENSHOTS = "none"  # the screenshot policy that asks for none

T = TypeVar("T")
JsonObject = dict[str, object]


class SnapshotError(ValueError):
    """A stored snapshot lacks a key every reader needs, or holds a value of the wrong type."""


# --- reading JSON values, checked ---------------------------------------------------------------


def _object(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise SnapshotError(f"{where}: {value!r} is not an object")
    return value


def _required(data: Mapping[str, object], key: str) -> object:
    if key not in data:
        raise SnapshotError(f"the snapshot has no {key!r}")
    return data[key]


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise SnapshotError(f"{where}: {value!r} is not a string")
    return value


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{where}: {value!r} is not an integer")
    return value


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{where}: {value!r} is not a boolean")
    return value


def _optional_int(value: object, where: str) -> int | None:
    return None if value is None else _int(value, where)


def _optional_str(value: object, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _list(value: object, where: str) -> list[object]:
    if not isinstance(value, list | tuple):
        raise SnapshotError(f"{where}: {value!r} is not a list")
    return list(value)


def _strs(value: object, where: str) -> tuple[str, ...]:
    return tuple(_str(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where)))


def _items(value: object, where: str, parse: Callable[[object, str], T]) -> tuple[T, ...]:
    return tuple(parse(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where)))


def _mapping(value: object, where: str, parse: Callable[[object, str], T]) -> dict[str, T]:
    return {key: parse(item, f"{where}.{key}") for key, item in _object(value, where).items()}


# --- the run's configuration --------------------------------------------------------------------


@dataclass(frozen=True)
class EntitySnapshot:
    """The brand or a competitor as frozen: what the analysis looks for in an answer."""

    name: str
    aliases: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    # Words of the entity that are also common words; launch does not freeze them (the
    # analysis revision does), only hand-written snapshots carry them.
    ambiguous_words: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, value: object, where: str) -> EntitySnapshot:
        data = _object(value, where)
        words = data.get("ambiguous_words")
        return cls(
            name=_str(_required(data, "name"), f"{where}.name"),
            aliases=_strs(data.get("aliases", []), f"{where}.aliases"),
            domains=_strs(data.get("domains", []), f"{where}.domains"),
            ambiguous_words=None if words is None else _strs(words, f"{where}.ambiguous_words"),
        )

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "name": self.name,
            "aliases": list(self.aliases),
            "domains": list(self.domains),
        }
        if self.ambiguous_words is not None:
            data["ambiguous_words"] = list(self.ambiguous_words)
        return data


@dataclass(frozen=True)
class QuestionSnapshot:
    """One question of the run: the immutable revision its samples ask."""

    revision_id: int
    question_id: int
    revision_no: int
    text: str
    # The question's topics (tags) as the campaign had them at launch; None: a run launched
    # before questions had topics (none).
    topics: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, value: object, where: str) -> QuestionSnapshot:
        data = _object(value, where)
        topics = data.get("topics")
        return cls(
            revision_id=_int(_required(data, "revision_id"), f"{where}.revision_id"),
            question_id=_int(_required(data, "question_id"), f"{where}.question_id"),
            revision_no=_int(_required(data, "revision_no"), f"{where}.revision_no"),
            text=_str(_required(data, "text"), f"{where}.text"),
            topics=None if topics is None else _strs(topics, f"{where}.topics"),
        )

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "revision_id": self.revision_id,
            "question_id": self.question_id,
            "revision_no": self.revision_no,
            "text": self.text,
        }
        if self.topics is not None:
            data["topics"] = list(self.topics)
        return data


@dataclass(frozen=True)
class TargetSnapshot:
    platform: str
    device: str
    region: str
    mode: str

    @classmethod
    def from_json(cls, value: object, where: str) -> TargetSnapshot:
        data = _object(value, where)
        return cls(
            **{
                key: _str(_required(data, key), f"{where}.{key}")
                for key in ("platform", "device", "region", "mode")
            }
        )

    def to_json(self) -> JsonObject:
        return {
            "platform": self.platform,
            "device": self.device,
            "region": self.region,
            "mode": self.mode,
        }


@dataclass(frozen=True)
class DroppedDuplicate:
    """A question row of the campaign file planning dropped as a repeat of an earlier row."""

    row: int
    duplicate_of: int
    text: str

    @classmethod
    def from_json(cls, value: object, where: str) -> DroppedDuplicate:
        data = _object(value, where)
        return cls(
            row=_int(_required(data, "row"), f"{where}.row"),
            duplicate_of=_int(_required(data, "duplicate_of"), f"{where}.duplicate_of"),
            text=_str(_required(data, "text"), f"{where}.text"),
        )

    def to_json(self) -> JsonObject:
        return {"row": self.row, "duplicate_of": self.duplicate_of, "text": self.text}


@dataclass(frozen=True)
class RunConfig:
    """What launch froze of the campaign (`Run.config_snapshot`): nothing in a run reads the
    live campaign again."""

    tenant: str  # the tenant's slug: evidence object keys start with it
    brand: EntitySnapshot
    snapshot_version: int = SNAPSHOT_VERSION
    campaign_id: int | None = None
    campaign_name: str = ""
    competitors: tuple[EntitySnapshot, ...] = ()
    # None: read without its question list (a step's frozen run, pipeline/execution.py reads
    # the snapshot without it, as it grows with the campaign).
    questions: tuple[QuestionSnapshot, ...] | None = None
    targets: tuple[TargetSnapshot, ...] = ()
    # The model per platform, frozen at launch; a platform without one (runs launched before
    # models were frozen) asks the connector's configured model.
    models: Mapping[str, str | None] = field(default_factory=dict)
    repeats: int = 1
    screenshot_policy: str = NO_SCREENSHOTS
    priority: int = 0
    submission_limits: Mapping[str, int] = field(default_factory=dict)
    duplicates_dropped: tuple[DroppedDuplicate, ...] = ()

    @classmethod
    def of(cls, run: Run) -> RunConfig:
        """The run's configuration, parsed once per snapshot read (cached by run id, for the
        steps that read it for every sample of a run)."""
        return _cached(_CONFIGS, run.pk, run.config_snapshot, cls.from_json)

    @classmethod
    def from_json(cls, value: object) -> RunConfig:
        data = _object(value, "config snapshot")
        questions = data.get("questions")
        return cls(
            tenant=_str(_required(data, "tenant"), "tenant"),
            brand=EntitySnapshot.from_json(_required(data, "brand"), "brand"),
            snapshot_version=_int(data.get("snapshot_version", SNAPSHOT_VERSION), "version"),
            campaign_id=_optional_int(data.get("campaign_id"), "campaign_id"),
            campaign_name=_str(data.get("campaign_name", ""), "campaign_name"),
            competitors=_items(
                data.get("competitors", []), "competitors", EntitySnapshot.from_json
            ),
            questions=None
            if questions is None
            else _items(questions, "questions", QuestionSnapshot.from_json),
            targets=_items(data.get("targets", []), "targets", TargetSnapshot.from_json),
            models=_mapping(data.get("models", {}), "models", _optional_str),
            repeats=_int(data.get("repeats", 1), "repeats"),
            screenshot_policy=_str(data.get("screenshot_policy", NO_SCREENSHOTS), "screenshots"),
            priority=_int(data.get("priority", 0), "priority"),
            submission_limits=_mapping(data.get("submission_limits", {}), "limits", _int),
            duplicates_dropped=_items(
                data.get("duplicates_dropped", []), "duplicates_dropped", DroppedDuplicate.from_json
            ),
        )

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "snapshot_version": self.snapshot_version,
            "tenant": self.tenant,
            "campaign_id": self.campaign_id,
            "campaign_name": self.campaign_name,
            "brand": self.brand.to_json(),
            "competitors": [c.to_json() for c in self.competitors],
        }
        if self.questions is not None:
            data["questions"] = [q.to_json() for q in self.questions]
        data |= {
            "targets": [t.to_json() for t in self.targets],
            "models": dict(self.models),
            "repeats": self.repeats,
            "screenshot_policy": self.screenshot_policy,
            "priority": self.priority,
            "submission_limits": dict(self.submission_limits),
            "duplicates_dropped": [d.to_json() for d in self.duplicates_dropped],
        }
        return data

    @property
    def entities(self) -> tuple[EntitySnapshot, ...]:
        """The brand, then the competitors: every entity the analysis counts."""
        return (self.brand, *self.competitors)

    @property
    def entity_names(self) -> list[str]:
        return [entity.name for entity in self.entities]

    @property
    def wants_screenshots(self) -> bool:
        return self.screenshot_policy != NO_SCREENSHOTS

    def model_for(self, platform: str) -> str | None:
        """The model the run froze for the platform (None: the connector's configured one)."""
        return self.models.get(platform)


# --- the run's quote ----------------------------------------------------------------------------


@dataclass(frozen=True)
class QuoteLine:
    """One target's share of the quote: each of its samples holds `unit_price` at launch."""

    target: str  # billing.services.target_key: platform|device|region|mode
    platform: str
    deep_thinking: bool
    screenshot: bool
    samples: int
    unit_price: int
    amount: int

    @classmethod
    def from_json(cls, value: object, where: str) -> QuoteLine:
        data = _object(value, where)
        return cls(
            target=_str(_required(data, "target"), f"{where}.target"),
            platform=_str(_required(data, "platform"), f"{where}.platform"),
            deep_thinking=_bool(data.get("deep_thinking", False), f"{where}.deep_thinking"),
            screenshot=_bool(data.get("screenshot", False), f"{where}.screenshot"),
            samples=_int(_required(data, "samples"), f"{where}.samples"),
            unit_price=_int(_required(data, "unit_price"), f"{where}.unit_price"),
            amount=_int(_required(data, "amount"), f"{where}.amount"),
        )

    def to_json(self) -> JsonObject:
        return {
            "target": self.target,
            "platform": self.platform,
            "deep_thinking": self.deep_thinking,
            "screenshot": self.screenshot,
            "samples": self.samples,
            "unit_price": self.unit_price,
            "amount": self.amount,
        }


@dataclass(frozen=True)
class ProviderQuote:
    """What a provider that prices tasks itself said the run's tasks on it would cost us
    (connectors.base.Quote, with its unit costs counted as `tasks`), or why it said nothing
    (`unavailable`). Recorded, never charged to the tenant."""

    quote_id: str = ""
    currency: str = ""
    total: int = 0  # minor units
    tasks: int = 0
    unavailable: str = ""

    @classmethod
    def from_json(cls, value: object, where: str) -> ProviderQuote:
        data = _object(value, where)
        if "unavailable" in data:
            return cls(unavailable=_str(data["unavailable"], f"{where}.unavailable"))
        return cls(
            quote_id=_str(data.get("quote_id", ""), f"{where}.quote_id"),
            currency=_str(data.get("currency", ""), f"{where}.currency"),
            total=_int(data.get("total", 0), f"{where}.total"),
            tasks=_int(data.get("tasks", 0), f"{where}.tasks"),
        )

    def to_json(self) -> JsonObject:
        if self.unavailable:
            return {"unavailable": self.unavailable}
        return {
            "quote_id": self.quote_id,
            "currency": self.currency,
            "total": self.total,
            "tasks": self.tasks,
        }


@dataclass(frozen=True)
class Quote:
    """The run's price (`Run.quote_snapshot`): what the operator confirmed, and what every
    later charge of the run is computed from (billing/services/runs.py)."""

    currency: str = ""  # "": nothing was held (see `holds_money`)
    estimated_max: int = 0  # minor units, held at launch
    quote_version: int = QUOTE_VERSION
    price_version: str = ""
    price_version_id: int | None = None
    # platform -> component -> minor units, for the platforms the lines use
    unit_prices: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    screenshot_policy: str = NO_SCREENSHOTS
    lines: tuple[QuoteLine, ...] = ()
    samples: int = 0
    rules: str = ""
    # None: no provider was asked (the key is absent from the snapshot).
    provider_quotes: Mapping[str, ProviderQuote] | None = None

    @classmethod
    def of(cls, run: Run) -> Quote | None:
        """The run's quote; None before one was recorded (the snapshot is null or empty)."""
        if not run.quote_snapshot:
            return None
        return _cached(_QUOTES, run.pk, run.quote_snapshot, cls.from_json)

    @classmethod
    def from_json(cls, value: object) -> Quote:
        data = _object(value, "quote snapshot")
        providers = data.get("provider_quotes")
        return cls(
            currency=_str(data.get("currency") or "", "currency"),
            estimated_max=_int(data.get("estimated_max") or 0, "estimated_max"),
            quote_version=_int(data.get("quote_version", QUOTE_VERSION), "quote_version"),
            price_version=_str(data.get("price_version") or "", "price_version"),
            price_version_id=_optional_int(data.get("price_version_id"), "price_version_id"),
            unit_prices=_mapping(
                data.get("unit_prices", {}),
                "unit_prices",
                lambda prices, where: _mapping(prices, where, _int),
            ),
            screenshot_policy=_str(data.get("screenshot_policy", NO_SCREENSHOTS), "screenshots"),
            lines=_items(data.get("lines", []), "lines", QuoteLine.from_json),
            samples=_int(data.get("samples", 0), "samples"),
            rules=_str(data.get("rules", ""), "rules"),
            provider_quotes=None
            if providers is None
            else _mapping(providers, "provider_quotes", ProviderQuote.from_json),
        )

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "quote_version": self.quote_version,
            "price_version": self.price_version,
            "price_version_id": self.price_version_id,
            "currency": self.currency,
            "unit_prices": {p: dict(prices) for p, prices in self.unit_prices.items()},
            "screenshot_policy": self.screenshot_policy,
            "lines": [line.to_json() for line in self.lines],
            "samples": self.samples,
            "estimated_max": self.estimated_max,
            "rules": self.rules,
        }
        if self.provider_quotes is not None:
            data["provider_quotes"] = {p: q.to_json() for p, q in self.provider_quotes.items()}
        return data

    @property
    def holds_money(self) -> bool:
        """Whether launch held anything for this quote (a free run holds nothing)."""
        return bool(self.currency) and self.estimated_max > 0

    def line_for(self, target: str) -> QuoteLine | None:
        return next((line for line in self.lines if line.target == target), None)

    def with_provider_quotes(self, quotes: Mapping[str, ProviderQuote]) -> Quote:
        return replace(self, provider_quotes=dict(quotes))

    def as_confirmed(self) -> Quote:
        """The quote as the operator confirmed it: without the providers' own quotes, which
        launch adds after the preview and which are not what the tenant pays."""
        return replace(self, provider_quotes=None)


# --- one parse per snapshot read ----------------------------------------------------------------

# run id -> (the snapshot value parsed, its parse). A hit needs the very same value: a run read
# again from the database (or a snapshot assigned anew) is parsed again, so an entry never
# outlives what it was parsed from. Steps read their run through a per-process cache of the
# frozen row (pipeline/execution.py `_frozen_run`), so their runs hit.
_CONFIGS: dict[object, tuple[object, RunConfig]] = {}
_QUOTES: dict[object, tuple[object, Quote]] = {}
_CACHED = 256


def _cached(
    cache: dict[object, tuple[object, T]],
    key: object,
    source: object,
    parse: Callable[[object], T],
) -> T:
    entry = cache.get(key)
    if entry is not None and entry[0] is source:
        return entry[1]
    parsed = parse(source)
    if len(cache) >= _CACHED:
        cache.clear()
    cache[key] = (source, parsed)
    return parsed
