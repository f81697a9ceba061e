"""`python manage.py simulator --port 8765 [--seed 7] [--profile FILE] [--world FILE]
[--campaign FILE ...]`.

Runs the platform simulator in the foreground; point connectors at it with
GEO_UPSTREAM_BASE_URL=http://127.0.0.1:8765. `--campaign` makes the campaign files' brands and
competitors the entities its answers are about (instead of the built-in Acme Cloud, Globex and
Initech); `POST /_sim/entities` adds more while it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from simulator import make_server
from simulator.content import entities_of_campaign
from simulator.platforms import served_platforms


def _load_json(path: str | None) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8")) if path else None


class Command(BaseCommand):
    help = "Run the protocol-faithful platform simulator in the foreground."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--profile", help="JSON fault profile (see simulator/faults.py)")
        parser.add_argument("--world", help="JSON list of brands {name, aliases, domains}")
        parser.add_argument(
            "--campaign",
            action="append",
            default=[],
            help="a campaign file whose brand and competitors the answers are about (repeatable)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        server = make_server(
            host=options["host"],
            port=options["port"],
            seed=options["seed"],
            world=_load_json(options["world"]),
            profile=_load_json(options["profile"]),
        )
        for number, path in enumerate(options["campaign"]):
            entities = entities_of_campaign(_load_json(path))
            server.sim.register_entities(entities, replace=number == 0)
        names = ", ".join(brand.name for brand in server.sim.world.brands)
        host, port = server.server_address[:2]
        self.stdout.write(f"simulator on http://{host!s}:{port} (seed {options['seed']})")
        self.stdout.write(f"  answers are about: {names}")
        for platform in served_platforms():
            self.stdout.write(f"  {platform}: http://{host!s}:{port}/{platform}")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.sim.stopping.set()
            server.server_close()
