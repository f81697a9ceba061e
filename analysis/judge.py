"""The LLM judge: a chat platform, reached through the project's connectors, labels each
entity the literal matcher found. Positions, counts and ranks stay literal; the judge gives
context, sentiment, recommendation and the supporting sentence.

The prompt is fixed and versioned (`PROMPT_VERSION`); every result records it as the
analyser version, with the platform (`llm_judge`, `judge-v1+openai_chat`). A reply that is
not the JSON asked for, or a failed call, leaves the literal matches in review with the
reason: never a guess. Configuration: `GEO_ANALYSIS_JUDGE_PLATFORM` (default `openai_chat`);
the platform's own settings (base URL, key, model) as for sampling (connectors/registry.py).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from connectors.base import Connector, SampleRequest, UpstreamError
from connectors.registry import get_connector

from .mentions import Entity, find_mentions
from .results import (
    CONTEXTS,
    COUNTED,
    LISTED,
    SENTIMENTS,
    AnalyserInfo,
    AnswerAnalysis,
    EntityAnalysis,
    Occurrence,
    with_ranks,
)

PROMPT_VERSION = "judge-v1"
PROMPT = """[geo-analysis-judge {version}]
You are labelling how an AI assistant's answer mentions brands. For each entity below that
the answer mentions by name or alias, give:
- context: one of recommended, listed, compared, negative, absence, other_sense
  (absence: the answer only says it has no information about it or does not know it;
   other_sense: the name is an everyday word used in that sense, e.g. apple the fruit);
- sentiment: positive, neutral or negative;
- recommended: true or false;
- sentence: the sentence of the answer that supports your label, copied exactly.
Reply with JSON only: {{"entities": [{{"name", "context", "sentiment", "recommended",
"sentence"}}]}}.
ENTITIES: {entities}
<<<ANSWER
{answer}
ANSWER>>>
"""
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class JudgeReplyError(ValueError):
    pass


class LLMJudge:
    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self.info = AnalyserInfo(
            name="llm_judge",
            version=f"{PROMPT_VERSION}+{connector.platform}",
            deterministic=False,
        )

    @classmethod
    def from_environment(cls) -> LLMJudge:
        return cls(get_connector(os.environ.get("GEO_ANALYSIS_JUDGE_PLATFORM", "openai_chat")))

    def prompt(self, text: str, entities: Sequence[Entity]) -> str:
        listed = [{"name": e.name, "aliases": list(e.aliases)} for e in entities]
        return PROMPT.format(
            version=PROMPT_VERSION,
            entities=json.dumps(listed, ensure_ascii=False),
            answer=text,
        )

    def analyse(self, text: str, entities: Sequence[Entity]) -> AnswerAnalysis:
        found = find_mentions(text, entities)
        literal = [
            EntityAnalysis(
                name=m.name,
                context=LISTED if m.spans else None,
                occurrences=tuple(Occurrence(s, e, LISTED) for s, e in m.spans),
                count=m.count,
                first_position=m.first_position,
            )
            for m in found.entities
        ]
        if not any(m.spans for m in found.entities):
            return AnswerAnalysis(entities=with_ranks(literal), ambiguous=tuple(found.ambiguous))
        try:
            labels = parse_reply(self._ask(self.prompt(text, entities)))
        except (UpstreamError, JudgeReplyError) as exc:
            unsure = tuple(
                replace(e, unsure="the judge gave no usable label") if e.context else e
                for e in literal
            )
            return AnswerAnalysis(
                entities=with_ranks(unsure),
                ambiguous=tuple(found.ambiguous),
                failure=f"LLM judge ({self.info.version}): {exc}",
            )
        judged = [_apply(entity, labels.get(entity.name)) for entity in literal]
        return AnswerAnalysis(entities=with_ranks(judged), ambiguous=tuple(found.ambiguous))

    def _ask(self, prompt: str) -> str:
        caps = self.connector.capabilities()
        if caps.asynchronous:
            raise JudgeReplyError(f"{caps.platform} is asynchronous; the judge needs a direct API")
        outcome = self.connector.submit(
            SampleRequest(
                sample_id=0,
                idempotency_key=f"judge-{uuid.uuid4()}",
                question=prompt,
                device=sorted(caps.devices)[0],
                region=sorted(caps.regions)[0],
                mode=sorted(caps.modes)[0],
            )
        )
        if outcome.result is None or outcome.result.collection_state != "completed":
            raise JudgeReplyError("the judge's answer was not completed")
        return outcome.result.answer_text


def parse_reply(reply: str) -> dict[str, dict[str, Any]]:
    """entity name -> label, from the judge's JSON (fenced or bare); JudgeReplyError if the
    reply is not what the prompt asked for."""
    fenced = _FENCE.search(reply)
    try:
        data = json.loads(fenced.group(1) if fenced else reply)
    except json.JSONDecodeError as exc:
        raise JudgeReplyError(f"reply is not JSON ({exc.msg})") from None
    items = data.get("entities") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise JudgeReplyError("reply has no 'entities' list")
    labels = {}
    for item in items:
        if not isinstance(item, dict) or item.get("context") not in CONTEXTS:
            raise JudgeReplyError(f"bad label {item!r}")
        if item.get("sentiment") not in SENTIMENTS:
            raise JudgeReplyError(f"bad sentiment in {item!r}")
        labels[str(item.get("name"))] = item
    return labels


def _apply(entity: EntityAnalysis, label: dict[str, Any] | None) -> EntityAnalysis:
    if entity.context is None:
        return entity
    if label is None:
        return replace(entity, unsure="the judge did not label this entity")
    context = label["context"]
    counted = context in COUNTED
    return replace(
        entity,
        context=context,
        sentiment=label["sentiment"] if counted else "neutral",
        recommended=bool(label.get("recommended")) and counted,
        sentence=str(label.get("sentence", ""))[:1000],
        count=entity.count if counted else 0,
        first_position=entity.first_position if counted else None,
        occurrences=tuple(replace(o, context=context) for o in entity.occurrences),
    )
