"""Runs collected from the simulator, in process, for report tests."""

from __future__ import annotations

from typing import Any

from sampling.models import Run
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import simulator_fixture

# The simulated world speaks of the campaign's own brand and competitors.
WORLD = {
    "brands": [
        {"name": "Acme", "aliases": ["艾克米"], "domains": ["acme.com", "docs.acme.com"],
         "mention_rate": 0.7},
        {"name": "Globex", "aliases": ["环球"], "domains": ["globex.com"], "mention_rate": 0.5},
        {"name": "Initech", "aliases": [], "domains": ["initech.com"], "mention_rate": 0.3},
    ],
    "neutral_domains": ["en.wikipedia.org", "www.g2.com", "news.bbc.co.uk"],
}  # fmt: skip
TARGETS = [
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "perplexity", "device": "desktop", "region": "us", "mode": "web_search"},
]


simulator = simulator_fixture(seed=11, world=WORLD)


def collected_run(
    *,
    questions: int = 3,
    repeats: int = 2,
    targets: list[dict[str, str]] | None = None,
    name: str = "report",
    drive: bool = True,
    more_competitors: list[dict[str, Any]] | None = None,
    renamed: dict[str, str] | None = None,
) -> Run:
    """A launched run (driven to its end in this process unless `drive=False`); `renamed`
    gives the brand or competitors other names, keeping their aliases."""
    data = make_campaign_data(
        questions=questions, targets=targets or TARGETS, repeats=repeats, name=name
    )
    data["competitors"] += more_competitors or []
    for entity in [data["brand"], *data["competitors"]]:
        new = (renamed or {}).get(entity["name"])
        if new is not None:
            entity["aliases"] = [entity["name"], *entity["aliases"]]
            entity["name"] = new
    # Reports read answers, not pictures: skip photographing every direct-API answer.
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    if drive:
        drive_in_process(run.pk)
    return run
