"""Which analyser: the rule analyser by default, or an LLM judge (`GEO_ANALYSER`)."""

from __future__ import annotations

import os

from .context import RuleAnalyser
from .results import Analyser

ANALYSERS = ("rules", "llm_judge")


class UnknownAnalyser(LookupError):
    pass


def default_analyser_name() -> str:
    return os.environ.get("GEO_ANALYSER", "rules")


def get_analyser(name: str | None = None) -> Analyser:
    name = name or default_analyser_name()
    if name == "rules":
        return RuleAnalyser()
    if name == "llm_judge":
        from .judge import LLMJudge

        return LLMJudge.from_environment()
    raise UnknownAnalyser(f"unknown analyser {name!r} (known: {', '.join(ANALYSERS)})")
