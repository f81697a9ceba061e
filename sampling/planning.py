"""Validate and normalise a campaign specification before anything is written.

Every problem names the offending row (``questions[3]: ...``) so an operator can fix the file in
one pass. This module is pure: it reads connector capabilities but touches no table.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from connectors.registry import UnknownPlatform, get_connector

from . import inputs
from .inputs import InputError
from .models import ScreenshotPolicy

_WHITESPACE = re.compile(r"\s+")
_NAME_MAX = 200


class PlanError(ValueError):
    """The specification cannot become a plan; `problems` lists every reason ("where:
    what"), `located` the same as (where, what) pairs, for a form that shows each problem
    beside its field or row."""

    def __init__(self, problems: list[str], located: list[tuple[str, str]] | None = None) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
        self.located = located if located is not None else [_split(p) for p in problems]


def _split(problem: str) -> tuple[str, str]:
    where, _, what = problem.partition(": ")
    return (where, what) if what else ("", problem)


def normalize_text(text: str) -> str:
    """NFKC, then strip and collapse runs of whitespace to one space."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def question_key(text: str) -> str:
    """What two questions are compared by: width (NFKC), letter case and every space ignored
    ("best CRM ?" and "Best CRM？" are one question; so, rarely, are "a cat" and "acat": the
    operator is told and can reword). Only for comparison: a question is stored and asked
    exactly as typed (`as_typed`), since "？" and "?" are different requests to an engine."""
    return _WHITESPACE.sub("", unicodedata.normalize("NFKC", text)).casefold()


def as_typed(text: str) -> str:
    """A question as the operator typed it; only the surrounding whitespace (a textarea's
    trailing line break) goes."""
    return text.strip()


REPEATS = (1, 100)
PRIORITIES = (-10, 10)


def repeats_problem(value: Any) -> str:
    """Why `value` cannot be a campaign's repeats, in plain words; "" when it can. The one
    rule for the console form, the API and the plan preview."""
    low, high = REPEATS
    if not _whole(value):
        return f"expected a whole number, got {value!r}"
    if not low <= value <= high:
        return f"{value} is not possible: each question is asked {low} to {high} times per target"
    return ""


def priority_problem(value: Any) -> str:
    """Why `value` cannot be a campaign's priority, in plain words; "" when it can."""
    low, high = PRIORITIES
    if not _whole(value):
        return f"expected a whole number, got {value!r}"
    if not low <= value <= high:
        return f"{value} is not possible: a priority is from {low} (lowest) to {high} (highest)"
    return ""


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class EntitySpec:
    name: str
    aliases: tuple[str, ...]
    domains: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "aliases": list(self.aliases), "domains": list(self.domains)}


@dataclass(frozen=True)
class TargetSpec:
    platform: str
    device: str
    region: str
    mode: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Duplicate:
    row: int
    duplicate_of: int
    text: str


@dataclass
class CampaignSpec:
    tenant: str
    name: str
    brand: EntitySpec
    competitors: list[EntitySpec]
    questions: list[str]  # as typed, duplicates (by question_key) removed, in file order
    targets: list[TargetSpec]
    repeats: int
    screenshot_policy: str
    priority: int = 0
    duplicates: list[Duplicate] = field(default_factory=list)
    submission_limits: dict[str, int] = field(default_factory=dict)
    # question text -> its topics (tags); None: the file gave none, a saved campaign's stay
    topics: dict[str, tuple[str, ...]] | None = None

    @property
    def sample_count(self) -> int:
        return len(self.questions) * len(self.targets) * self.repeats


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.located: list[tuple[str, str]] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")
        self.located.append((where, message))


def _checked(
    rule: Callable[..., str], value: Any, where: str, problems: _Problems, **options: Any
) -> str:
    """`rule(value, where)` from sampling/inputs.py, its refusal recorded as a problem."""
    try:
        return rule(value, where, **options)
    except InputError as error:
        problems.add(error.field, error.problem)
        return ""


def _string(value: Any, where: str, problems: _Problems, *, max_length: int = _NAME_MAX) -> str:
    """A name, alias or question: normalised, then held to the input rules."""
    if not isinstance(value, str):
        problems.add(where, f"expected a string, got {type(value).__name__}")
        return ""
    return _checked(inputs.text, normalize_text(value), where, problems, max_length=max_length)


def _domain(value: Any, where: str, problems: _Problems) -> str:
    return _checked(inputs.domain, value, where, problems)


def _string_list(
    value: Any, where: str, problems: _Problems, item: Callable[[Any, str, _Problems], str]
) -> tuple[str, ...]:
    """A list of strings, each checked by `item`; repeats after checking dropped."""
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(where, f"expected a list, got {type(value).__name__}")
        return ()
    items = [item(entry, f"{where}[{i}]", problems) for i, entry in enumerate(value)]
    return tuple(dict.fromkeys(entry for entry in items if entry))


def _entity(value: Any, where: str, problems: _Problems) -> EntitySpec:
    if not isinstance(value, Mapping):
        problems.add(where, "expected an object with name, aliases and domains")
        return EntitySpec("", (), ())
    return EntitySpec(
        name=_string(value.get("name"), f"{where}.name", problems),
        aliases=_string_list(value.get("aliases"), f"{where}.aliases", problems, _string),
        domains=_string_list(value.get("domains"), f"{where}.domains", problems, _domain),
    )


def _question(value: Any, where: str, problems: _Problems) -> str:
    """A question as typed (`as_typed`), held to the input rules."""
    if not isinstance(value, str):
        problems.add(where, f"expected a string, got {type(value).__name__}")
        return ""
    limit = settings.GEO_MAX_QUESTION_CHARS
    return _checked(inputs.text, as_typed(value), where, problems, max_length=limit)


def _questions(
    value: Any, problems: _Problems, *, refuse_duplicates: bool
) -> tuple[list[str], list[Duplicate]]:
    if not isinstance(value, list) or not value:
        problems.add("questions", "a campaign needs at least one question")
        return [], []
    kept: list[str] = []
    first_row: dict[str, tuple[int, str]] = {}
    duplicates: list[Duplicate] = []
    for row, raw in enumerate(value):
        where = f"questions[{row}]"
        text = _question(raw, where, problems)
        if not text:
            continue
        key = question_key(text)
        if key not in first_row:
            first_row[key] = (row, text)
            kept.append(text)
            continue
        first, first_text = first_row[key]
        duplicates.append(Duplicate(row=row, duplicate_of=first, text=text))
        if refuse_duplicates:
            problems.add(
                where,
                f"the same question as {first_text[:80]!r} (question {first + 1}; compared "
                "ignoring spaces, full-width characters and letter case)",
            )
    return kept, duplicates


TOPIC_MAX = 100  # monitoring.models.SeriesRow.topic


def _topics(
    value: Any, questions: list[str], problems: _Problems
) -> dict[str, tuple[str, ...]] | None:
    """`topics`: an object from a question's text (one of `questions`) to its topics, each a
    non-empty name of at most TOPIC_MAX characters; a question left out has none."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.add("topics", "expected an object from question text to a list of topics")
        return None
    known = set(questions)
    out: dict[str, tuple[str, ...]] = {}
    for text, names in value.items():
        where = f"topics[{str(text)[:60]!r}]"
        if text not in known:
            problems.add(where, "not one of the campaign's questions")
            continue
        if not isinstance(names, list):
            problems.add(where, "expected a list of topics")
            continue
        kept: list[str] = []
        for name in names:
            topic = " ".join(str(name).split()) if isinstance(name, str) else ""
            if not topic or len(topic) > TOPIC_MAX:
                problems.add(where, f"a topic is a name of 1 to {TOPIC_MAX} characters")
            elif topic not in kept:
                kept.append(topic)
        out[text] = tuple(kept)
    return out


def _targets(value: Any, policy: str, problems: _Problems) -> list[TargetSpec]:
    if not isinstance(value, list) or not value:
        problems.add("targets", "a campaign needs at least one platform target")
        return []
    targets: list[TargetSpec] = []
    for row, raw in enumerate(value):
        where = f"targets[{row}]"
        if not isinstance(raw, Mapping):
            problems.add(where, "expected an object with platform, device, region and mode")
            continue
        target = TargetSpec(
            platform=str(raw.get("platform", "")).strip().lower(),
            device=str(raw.get("device", "desktop")).strip().lower(),
            region=str(raw.get("region", "us")).strip().lower(),
            mode=str(raw.get("mode", "web_search")).strip().lower(),
        )
        if target in targets:
            problems.add(where, f"duplicate target {target.as_dict()}")
            continue
        for message in _capability_problems(target, policy):
            problems.add(where, message)
        targets.append(target)
    return targets


def _capability_problems(target: TargetSpec, policy: str) -> list[str]:
    if not target.platform:
        return ["platform is required"]
    try:
        capabilities = get_connector(target.platform).capabilities()
    except UnknownPlatform as exc:
        return [str(exc.args[0])]
    return capabilities.problems(
        device=target.device, region=target.region, mode=target.mode, screenshot_policy=policy
    )


def _int_field(
    data: Mapping[str, Any],
    key: str,
    default: int,
    rule: Callable[[Any], str],
    problems: _Problems,
) -> int:
    value = data.get(key, default)
    problem = rule(value)
    if problem:
        problems.add(key, problem)
    return value if _whole(value) else default


def submission_limits(targets: list[TargetSpec], override: int | None) -> dict[str, int]:
    """Largest batch per platform: the platform's own submission limit unless overridden."""
    limits: dict[str, int] = {}
    for target in targets:
        if target.platform not in limits:
            limits[target.platform] = override or _platform_limit(target.platform)
    return limits


def _platform_limit(platform: str) -> int:
    try:
        return get_connector(platform).capabilities().submission_limit
    except UnknownPlatform:
        return int(settings.GEO_DEFAULT_SUBMISSION_LIMIT)


def parse_campaign_spec(
    data: Any, *, submission_limit: int | None = None, refuse_duplicates: bool = False
) -> CampaignSpec:
    """Validate a campaign file's content. Raises PlanError naming every problem.

    A question repeated (compared by `question_key`) is dropped and reported in the plan;
    with `refuse_duplicates` (saving a campaign: the console form, the API) it is a problem."""
    problems = _Problems()
    if not isinstance(data, Mapping):
        raise PlanError(["campaign: expected a JSON object"])
    if submission_limit is not None and submission_limit < 1:
        problems.add("submission_limit", f"must be at least 1, got {submission_limit}")
    tenant = _checked(inputs.slug, data.get("tenant"), "tenant", problems)
    name = _string(data.get("name"), "name", problems)
    brand = _entity(data.get("brand"), "brand", problems)
    competitors_raw = data.get("competitors") or []
    if not isinstance(competitors_raw, list):
        problems.add("competitors", "expected a list")
        competitors_raw = []
    competitors = [_entity(c, f"competitors[{i}]", problems) for i, c in enumerate(competitors_raw)]
    policy = str(data.get("screenshot_policy", ScreenshotPolicy.OPTIONAL))
    if policy not in ScreenshotPolicy.values:
        problems.add("screenshot_policy", f"{policy!r} is not one of {ScreenshotPolicy.values}")
    questions, duplicates = _questions(
        data.get("questions"), problems, refuse_duplicates=refuse_duplicates
    )
    targets = _targets(data.get("targets"), policy, problems)
    topics = _topics(data.get("topics"), questions, problems)
    repeats = _int_field(data, "repeats", 1, repeats_problem, problems)
    priority = _int_field(data, "priority", 0, priority_problem, problems)
    spec = CampaignSpec(
        tenant=tenant,
        name=name,
        brand=brand,
        competitors=competitors,
        questions=questions,
        targets=targets,
        repeats=repeats,
        screenshot_policy=policy,
        priority=priority,
        duplicates=duplicates,
        submission_limits=submission_limits(targets, submission_limit),
        topics=topics,
    )
    maximum = settings.GEO_MAX_PLAN_SAMPLES
    if spec.sample_count > maximum:
        problems.add(
            "plan",
            f"{len(questions)} questions x {len(targets)} targets x {repeats} repeats = "
            f"{spec.sample_count} samples, over the {maximum} limit",
        )
    if problems.items:
        raise PlanError(problems.items, problems.located)
    return spec


def batch_sizes(spec: CampaignSpec) -> list[tuple[str, int]]:
    """(platform, size) of each batch, in plan order: per platform, chunks within its limit."""
    per_platform: dict[str, int] = {}
    for target in spec.targets:
        per_platform[target.platform] = per_platform.get(target.platform, 0) + 1
    sizes: list[tuple[str, int]] = []
    for platform, target_count in per_platform.items():
        remaining = target_count * len(spec.questions) * spec.repeats
        limit = spec.submission_limits[platform]
        while remaining > 0:
            sizes.append((platform, min(limit, remaining)))
            remaining -= limit
    return sizes
