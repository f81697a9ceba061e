"""python manage.py reparse --platform NAME FILE | --sample ID

Prints the normalized result (the field names of connectors/base.py `NormalizedResult`) of a
raw response exactly as it was received: a JSON body or an SSE / NDJSON transcript. With
--sample, re-derives a stored sample's result from its archived raw response and stores it as a
new revision. The command lives in evidence because --sample reads stored evidence; connectors
knows no Django app of this project.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from connectors.base import NormalizedResult
from connectors.registry import UnknownPlatform, adapter_class
from evidence.services import reparse_sample
from sampling.models import Sample


def printable(result: NormalizedResult) -> dict[str, Any]:
    """The normalized result without the raw bytes (shown by digest and size instead) and
    without captured_at, which for a re-parse would be the time of the re-parse."""
    data = result.as_dict()
    raw = data.pop("raw")
    data.pop("captured_at")
    data["raw_sha256"] = hashlib.sha256(result.raw).hexdigest()
    data["raw_size"] = len(raw.encode())
    return data


class Command(BaseCommand):
    help = "Re-derive the normalized result from a captured raw response."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", nargs="?", type=Path)
        parser.add_argument("--platform")
        parser.add_argument("--sample", type=int)
        parser.add_argument("--content-type", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["sample"] is not None:
            data = self._reparse_sample(options["sample"])
        elif options["platform"] and options["file"]:
            data = self._reparse_file(options["platform"], options["file"], options["content_type"])
        else:
            raise CommandError("give --platform NAME FILE, or --sample ID")
        self.stdout.write(json.dumps(data, ensure_ascii=False, indent=2))

    def _reparse_file(self, platform: str, path: Path, content_type: str) -> dict[str, Any]:
        try:
            parser = adapter_class(platform)
        except UnknownPlatform as error:
            raise CommandError(str(error.args[0])) from None
        try:
            raw = path.read_bytes()
        except OSError as error:
            raise CommandError(f"{path}: {error.strerror}") from None
        return printable(parser.parse(raw, content_type=content_type))

    def _reparse_sample(self, sample_id: int) -> dict[str, Any]:
        try:
            capture, result = reparse_sample(sample_id=sample_id)
        except Sample.DoesNotExist:
            raise CommandError(f"no sample with id {sample_id}") from None
        except LookupError as error:
            raise CommandError(str(error)) from None
        return {"sample_id": sample_id, "revision": capture.revision, **printable(result)}
