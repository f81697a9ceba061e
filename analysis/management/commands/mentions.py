"""``manage.py mentions CAMPAIGN.json ANSWER.txt [--analyser NAME]``: brand/competitor
mentions in one answer, in context.

Prints JSON (UTF-8, not ASCII-escaped)::

    {"analyser": {"name", "version"},
     "brand": {"name", "mentioned", "count", "first_position", "rank", "context", "matched",
               "sentiment", "recommended", "sentence", "unsure", "occurrences",
               "ambiguous_words"},
     "competitors": [{...same, in campaign order...}],
     "ambiguous": [{"start", "end", "text", "entities"}]}

`mentioned`/`count`/`rank` count only occurrences in a counted context (not `absence` or
`other_sense`); `matched` is every literal alias match; `context` is null when nothing
matched. `ambiguous_words` lists the entity's aliases treated as everyday words (marked in
the campaign's "ambiguous_words", or common words). Positions are character offsets into
ANSWER.txt as decoded (UTF-8, BOM removed). No database access (except an LLM judge's
platform call).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.analysers import ANALYSERS, UnknownAnalyser, get_analyser
from analysis.context import ambiguous_aliases
from analysis.mentions import Entity
from analysis.results import EntityAnalysis
from connectors import safejson


def _read_text(path_str: str, what: str) -> str:
    path = Path(path_str)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError as exc:
        raise CommandError(f"{what} file not found: {path}") from exc
    except IsADirectoryError as exc:
        raise CommandError(f"{what} path is a directory, not a file: {path}") from exc
    except UnicodeDecodeError as exc:
        raise CommandError(f"{what} file is not valid UTF-8: {path} ({exc.reason})") from exc
    except OSError as exc:
        raise CommandError(f"cannot read {what} file {path}: {exc.strerror or exc}") from exc


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CommandError(f"{where} must be a list of strings")
    return tuple(value)


def _entity(value: Any, where: str) -> Entity:
    if not isinstance(value, dict):
        raise CommandError(f"{where} must be an object with a 'name'")
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CommandError(f"{where}.name is missing or empty")
    return Entity(
        name=name,
        aliases=_string_list(value.get("aliases"), f"{where}.aliases"),
        domains=_string_list(value.get("domains"), f"{where}.domains"),
        ambiguous_words=_string_list(value.get("ambiguous_words"), f"{where}.ambiguous_words"),
    )


def load_campaign_entities(campaign: Any) -> tuple[Entity, list[Entity]]:
    """Brand and competitors from a campaign document; CommandError on bad shape."""
    if not isinstance(campaign, dict):
        raise CommandError("campaign JSON must be an object")
    if "brand" not in campaign:
        raise CommandError("campaign JSON has no 'brand'")
    brand = _entity(campaign["brand"], "brand")
    raw_competitors = campaign.get("competitors")
    if raw_competitors is None:
        raw_competitors = []
    if not isinstance(raw_competitors, list):
        raise CommandError("competitors must be a list")
    competitors = [_entity(c, f"competitors[{i}]") for i, c in enumerate(raw_competitors)]
    return brand, competitors


def _summary(item: EntityAnalysis, entity: Entity) -> dict[str, Any]:
    return {
        "name": item.name,
        "mentioned": item.counted,
        "count": item.count,
        "first_position": item.first_position,
        "rank": item.rank,
        "context": item.context,
        "matched": item.matched,
        "sentiment": item.sentiment,
        "recommended": item.recommended,
        "sentence": item.sentence,
        "unsure": item.unsure,
        "occurrences": [o.as_dict() for o in item.occurrences],
        "ambiguous_words": ambiguous_aliases(entity),
    }


class Command(BaseCommand):
    help = "Detect brand and competitor mentions of a campaign in one answer text."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", help="campaign JSON file (brand, competitors, ...)")
        parser.add_argument("answer", help="answer text file (UTF-8)")
        parser.add_argument(
            "--analyser", choices=ANALYSERS, default=None, help="default: GEO_ANALYSER or rules"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        campaign_text = _read_text(options["campaign"], "campaign")
        try:
            campaign = safejson.loads(campaign_text)
        except json.JSONDecodeError as exc:
            raise CommandError(
                f"campaign file {options['campaign']} is not valid JSON: "
                f"{exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from exc
        except safejson.JsonTooDeep as exc:
            raise CommandError(f"campaign file {options['campaign']}: {exc}") from None
        brand, competitors = load_campaign_entities(campaign)
        answer = _read_text(options["answer"], "answer")

        try:
            analyser = get_analyser(options["analyser"])
        except UnknownAnalyser as exc:
            raise CommandError(str(exc)) from exc
        entities = [brand, *competitors]
        result = analyser.analyse(answer, entities)
        summaries = [_summary(item, e) for item, e in zip(result.entities, entities, strict=True)]
        output = {
            "analyser": {"name": analyser.info.name, "version": analyser.info.version},
            "brand": summaries[0],
            "competitors": summaries[1:],
            "ambiguous": [span.as_dict() for span in result.ambiguous],
        }
        self.stdout.write(json.dumps(output, ensure_ascii=False, indent=2))
