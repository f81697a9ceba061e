"""``manage.py mentions CAMPAIGN.json ANSWER.txt``: brand/competitor mentions in one answer.

Prints JSON (UTF-8, not ASCII-escaped)::

    {"brand": {"name", "mentioned", "count", "first_position", "rank"},
     "competitors": [{...same, in campaign order...}],
     "ambiguous": [{"start", "end", "text", "entities"}]}

Positions are character offsets into ANSWER.txt as decoded (UTF-8, BOM removed).
No database access.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.mentions import Entity, EntityMentions, find_mentions
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


def _summary(item: EntityMentions) -> dict[str, Any]:
    return {
        "name": item.name,
        "mentioned": item.mentioned,
        "count": item.count,
        "first_position": item.first_position,
        "rank": item.rank,
    }


class Command(BaseCommand):
    help = "Detect brand and competitor mentions of a campaign in one answer text."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign", help="campaign JSON file (brand, competitors, ...)")
        parser.add_argument("answer", help="answer text file (UTF-8)")

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

        result = find_mentions(answer, [brand, *competitors])
        output = {
            "brand": _summary(result.entities[0]),
            "competitors": [_summary(item) for item in result.entities[1:]],
            "ambiguous": [span.as_dict() for span in result.ambiguous],
        }
        self.stdout.write(json.dumps(output, ensure_ascii=False, indent=2))
