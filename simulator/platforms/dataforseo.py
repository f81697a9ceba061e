"""DataForSEO's v3 API as connectors/adapters/dataforseo.py reads it (docs.dataforseo.com/v3;
the official `dataforseo-client` parses every shape here in tests/fidelity).

Served under `/dataforseo/`: one host for every surface, as the real one. The endpoint names
the surface: `/v3/ai_optimization/chat_gpt/llm_scraper/...` answers as `chatgpt_web`,
`.../gemini/llm_scraper/...` as `gemini_web`, `/v3/serp/google/ai_mode/...` as
`google_ai_mode`, `/v3/serp/google/organic/...` as `google_ai_overview` (the draws, the answer
log and the faults scripted `platform` are under the surface's name).

The envelope, status codes and charges follow the docs: HTTP 200 with `status_code` 20000
unless the credentials are refused (401, 40100) or the vendor fails (500, 50000); the per
minute rate limit is `status_code` 40202 on a 200; a task is charged when posted (its `cost`,
USD) and its results are free (task_get states 0). Tasks are never deduplicated by `tag` (as
the vendor: posting again is a second, charged task). A task's result is deferred: the first
`deferred_looks` looks at it (task_get, or a tasks_ready listing) answer 40602 "Task In Queue."
/ leave it unlisted. Task faults drawn when a task is posted: `task_rejected` (40501 inside an
accepted call), `task_failed` (the task ends 40101), `lose` (40401 afterwards); HTTP faults
apply to a whole call; `hang` on task_post creates the tasks and never answers.

The LLM Responses API (`/v3/ai_optimization/{chat_gpt,claude,gemini,perplexity}/llm_responses
/live`) answers as the model platform it resells (`openai`, `anthropic`, `gemini`,
`perplexity`: draws, answer log and scripted faults under that name), Live only: one task
{user_prompt, model_name, web_search, ...} per call, its result `items[]` of type `message`
whose `sections[].text` is the answer and `annotations[]` its sources (only when it searched:
`null` otherwise, as documented), `fan_out_queries`, token counts, `money_spent` (the model's
token cost) and the task's `cost` (a per-task fee plus `money_spent`). Task faults
`task_rejected` (40501) and `task_failed` (40101) apply.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from ..content import SimAnswer
from ..faults import HTTP_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse

VERSION = "0.1.20261201"
LIMIT = 100
TASK_FAULTS = frozenset({"task_rejected", "task_failed", "lose"})
# endpoint prefix (after /v3/) -> (surface, api, se, se_type, model)
SURFACES: dict[str, tuple[str, str, str, str, str | None]] = {
    "ai_optimization/chat_gpt/llm_scraper": (
        "chatgpt_web",
        "ai_optimization",
        "chat_gpt",
        "llm_scraper",
        "gpt-4o",
    ),
    "ai_optimization/gemini/llm_scraper": (
        "gemini_web",
        "ai_optimization",
        "gemini",
        "llm_scraper",
        "gemini-2.5-flash",
    ),
    "serp/google/ai_mode": ("google_ai_mode", "serp", "google", "ai_mode", None),
    "serp/google/organic": ("google_ai_overview", "serp", "google", "organic", None),
}
# LLM Responses endpoint prefix (after /v3/) -> (platform, api, se, function, searches always)
LLM_RESPONSES: dict[str, tuple[str, str, str, str, bool]] = {
    "ai_optimization/chat_gpt/llm_responses": (
        "openai", "ai_optimization", "chat_gpt", "llm_responses", False),
    "ai_optimization/claude/llm_responses": (
        "anthropic", "ai_optimization", "claude", "llm_responses", False),
    "ai_optimization/gemini/llm_responses": (
        "gemini", "ai_optimization", "gemini", "llm_responses", False),
    # "Perplexity uses web_search in all sonar-family models by default" (its request has no
    # web_search field).
    "ai_optimization/perplexity/llm_responses": (
        "perplexity", "ai_optimization", "perplexity", "llm_responses", True),
}  # fmt: skip
PROMPT_LIMIT = 500  # "you can specify up to 500 characters in the user_prompt field"
# USD: a simulated per-task fee, and what the resold model's tokens cost per million.
LLM_RESPONSES_FEE = 0.0006
LLM_TOKEN_PRICES = (0.4, 1.6)
LOCATIONS = frozenset(
    {2840, 2826, 2124, 2036, 2356, 2702, 2372, 2276, 2250, 2724, 2380, 2528, 2076, 2484, 2392}
)
LANGUAGES = frozenset({"en", "de", "fr", "es", "it", "nl", "pt", "ja"})
# USD per task posted (the vendor's pricing pages: standard queue, normal priority).
PRICES = {"llm_scraper": 0.0012, "ai_mode": 0.0012, "organic": 0.0006, "async_ai_overview": 0.002}
LIVE_FACTOR = 3.3  # the Live method's price over the standard queue's


@dataclass
class _Task:
    task_id: str
    prefix: str
    surface: str
    spec: dict[str, Any]
    answer: SimAnswer
    fault: str | None
    cost: float
    posted_at: datetime
    looks: int = 0
    collected: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def envelope(
    tasks: list[dict[str, Any]],
    *,
    status_code: int = 20000,
    status_message: str = "Ok.",
    cost: float | None = None,
) -> dict[str, Any]:
    errors = sum(1 for t in tasks if t.get("status_code", 20000) >= 40000)
    return {
        "version": VERSION,
        "status_code": status_code,
        "status_message": status_message,
        "time": "0.0421 sec.",
        "cost": round(sum(t.get("cost", 0) for t in tasks) if cost is None else cost, 6),
        "tasks_count": len(tasks),
        "tasks_error": errors,
        "tasks": tasks,
    }


def _refusal(http: int, code: int, message: str) -> SimResponse:
    return SimResponse.json(http, envelope([], status_code=code, status_message=message, cost=0))


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S +00:00")


def _domain(url: str) -> str:
    return urlsplit(url).hostname or ""


class DataForSEOProtocol(PlatformProtocol):
    name = "dataforseo"
    faults = HTTP_FAULTS

    def __init__(self, sim: Any) -> None:
        super().__init__(sim)
        self.reset()

    def reset(self) -> None:
        self.tasks: dict[str, _Task] = {}
        self.serial = 0

    @property
    def settings(self) -> dict[str, Any]:
        found: dict[str, Any] = self.sim.platform_profile(self.name).get("dataforseo", {})
        return found

    # --- routing -----------------------------------------------------------------------
    def handle(self, request: SimRequest) -> SimResponse:
        if not _login(request.headers.get("authorization", "")):
            return _refusal(401, 40100, "You are not authorized to access this resource.")
        parts = [p for p in request.path.split("/") if p]
        if parts[:1] != ["v3"]:
            return _refusal(404, 40400, "Not Found.")
        path = "/".join(parts[1:])
        if request.method == "POST" and path == "serp/id_list":
            return self.id_list(request)
        for prefix, engine in LLM_RESPONSES.items():
            if request.method == "POST" and path == f"{prefix}/live":
                return self.llm_responses_live(request, prefix, engine)
        for prefix, surface in SURFACES.items():
            if not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1 :].split("/")
            match (request.method, *rest):
                case ("POST", "task_post"):
                    return self.task_post(request, prefix, surface)
                case ("POST", "live", "advanced"):
                    return self.live(request, prefix, surface)
                case ("GET", "tasks_ready"):
                    return self.tasks_ready(prefix, surface)
                case ("GET", "task_get", "advanced", task_id):
                    return self.task_get(prefix, surface, task_id)
        return _refusal(404, 40400, "Not Found.")

    def _fault(self, surface: tuple[Any, ...], text: str) -> tuple[Draw, SimResponse | None]:
        draw = self.sim.draw(surface[0], text, HTTP_FAULTS)
        if draw.fault == "hang":
            return draw, None
        return draw, self.http_fault(draw)

    # The vendor's own shapes of the shared faults.
    def rate_limited(self, draw: Draw) -> SimResponse:
        return _refusal(200, 40202, "The rate-limit per minute has been exceeded.")

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        if overloaded:
            return _refusal(200, 50303, "Update in progress. Please try after a few minutes.")
        return _refusal(500, 50000, "Internal Error.")

    def auth_error(self, draw: Draw) -> SimResponse:
        return _refusal(402, 40200, "Payment Required.")

    # --- endpoints ---------------------------------------------------------------------
    def _specs(self, request: SimRequest) -> list[Any] | None:
        body = request.json()
        return body if isinstance(body, list) and body else None

    def task_post(self, request: SimRequest, prefix: str, surface: tuple[Any, ...]) -> SimResponse:
        specs = self._specs(request)
        if specs is None:
            return _refusal(200, 40501, "Invalid Field: the POST array must hold tasks.")
        keywords = "\n".join(str(s.get("keyword", "")) for s in specs if isinstance(s, dict))
        draw, failure = self._fault(surface, "task_post\n" + keywords)
        if failure is not None:
            return self._respond(failure, {}, draw)
        with self.sim.lock:
            tasks = [
                self._post_one(spec, prefix, surface, position)
                for position, spec in enumerate(specs)
            ]
        if draw.fault == "hang":  # created and charged, but the answer never arrives
            return SimResponse(200, hang_seconds=float(draw.profile["hang_seconds"]))
        return self._respond(SimResponse.json(200, envelope(tasks)), {}, draw)

    def _post_one(
        self, spec: Any, prefix: str, surface: tuple[Any, ...], position: int
    ) -> dict[str, Any]:
        path = ["v3", *prefix.split("/"), "task_post"]
        task_id = self._next_id()
        base = {
            "id": task_id,
            "time": "0.0055 sec.",
            "result_count": 0,
            "path": path,
            "result": None,
        }
        if position >= LIMIT:
            return base | {
                "status_code": 40006,
                "cost": 0,
                "data": spec,
                "status_message": "You can set no more than 100 tasks at a time.",
            }
        problem = _invalid_field(spec)
        if problem:
            return base | {
                "status_code": 40501,
                "cost": 0,
                "data": spec,
                "status_message": f"Invalid Field: '{problem}'.",
            }
        keyword = str(spec["keyword"])
        task_draw = self.sim.draw(surface[0], keyword, TASK_FAULTS)
        data = self._data(spec, surface, "task_post")
        if task_draw.fault == "task_rejected":
            return base | {
                "status_code": 40501,
                "cost": 0,
                "data": data,
                "status_message": "Invalid Field: 'keyword'.",
            }
        answer = self.sim.answer_for(keyword, task_draw)
        cost = self._price(surface, spec)
        self.tasks[task_id] = _Task(
            task_id=task_id,
            prefix=prefix,
            surface=surface[0],
            spec=dict(spec),
            answer=answer,
            fault=task_draw.fault,
            cost=cost,
            posted_at=datetime.now(UTC),
        )
        self.sim.record_answer(
            surface[0],
            keyword,
            task_draw,
            answer,
            upstream_id=task_id,
            request_id=None,
            tag=spec.get("tag"),
        )
        return base | {
            "status_code": 20100,
            "status_message": "Task Created.",
            "cost": cost,
            "data": data,
        }

    def live(self, request: SimRequest, prefix: str, surface: tuple[Any, ...]) -> SimResponse:
        specs = self._specs(request)
        if specs is None or len(specs) != 1:
            return _refusal(200, 40000, "You can set only one task at a time.")
        spec = specs[0]
        draw, failure = self._fault(surface, "live\n" + str(_dict(spec).get("keyword", "")))
        if failure is not None or draw.fault == "hang":
            return self._respond(failure or SimResponse(200, hang_seconds=30.0), {}, draw)
        path = ["v3", *prefix.split("/"), "live", "advanced"]
        problem = _invalid_field(spec)
        if problem:
            task = {
                "id": self._next_id(),
                "status_code": 40501,
                "cost": 0,
                "path": path,
                "status_message": f"Invalid Field: '{problem}'.",
                "data": spec,
                "time": "0.01 sec.",
                "result_count": 0,
                "result": None,
            }
            return SimResponse.json(200, envelope([task]))
        keyword = str(spec["keyword"])
        task_draw = self.sim.draw(surface[0], keyword, TASK_FAULTS)
        answer = self.sim.answer_for(keyword, task_draw)
        task_id = self._next_id()
        cost = round(self._price(surface, spec) * LIVE_FACTOR, 6)
        stored = _Task(
            task_id,
            prefix,
            surface[0],
            dict(spec),
            answer,
            None,
            cost,
            datetime.now(UTC),
            looks=99,
            collected=True,
        )
        self.sim.record_answer(
            surface[0],
            keyword,
            task_draw,
            answer,
            upstream_id=task_id,
            request_id=None,
            tag=spec.get("tag"),
        )
        task = self._finished(stored, path, "live") | {"cost": cost}
        return self._respond(SimResponse.json(200, envelope([task])), {}, draw)

    def llm_responses_live(
        self, request: SimRequest, prefix: str, engine: tuple[Any, ...]
    ) -> SimResponse:
        specs = self._specs(request)
        if specs is None or len(specs) != 1:
            return _refusal(200, 40000, "You can set only one task at a time.")
        spec = _dict(specs[0])
        prompt = str(spec.get("user_prompt", ""))
        draw, failure = self._fault(engine, "llm_responses\n" + prompt)
        if failure is not None or draw.fault == "hang":
            return self._respond(failure or SimResponse(200, hang_seconds=30.0), {}, draw)
        base = {
            "id": self._next_id(),
            "time": "4.2117 sec.",
            "path": ["v3", *prefix.split("/"), "live"],
            "data": {"api": engine[1], "function": engine[3], "se": engine[2], **spec},
        }
        task_draw = self.sim.draw(engine[0], prompt, TASK_FAULTS)
        rejected = "user_prompt" if task_draw.fault == "task_rejected" else None
        problem = _invalid_prompt(spec) or rejected
        if problem:
            refused = {"status_code": 40501, "status_message": f"Invalid Field: '{problem}'."}
            task = base | refused | {"cost": 0, "result_count": 0, "result": None}
            return SimResponse.json(200, envelope([task]))
        if task_draw.fault == "task_failed":
            failed = {"status_code": 40101, "status_message": "Internal SE Server Error."}
            task = base | failed | {"cost": 0, "result_count": 0, "result": None}
            return SimResponse.json(200, envelope([task]))
        answer = self.sim.answer_for(prompt, task_draw)
        searched = bool(engine[4] or spec.get("web_search"))
        result = _llm_response(answer, spec, engine, searched)
        cost = round(LLM_RESPONSES_FEE + result["money_spent"], 6)
        self.sim.record_answer(
            engine[0], prompt, task_draw, answer, upstream_id=base["id"], request_id=None,
            tag=spec.get("tag"),
        )  # fmt: skip
        task = base | {
            "status_code": 20000,
            "status_message": "Ok.",
            "cost": cost,
            "result_count": 1,
            "result": [result],
        }
        return self._respond(SimResponse.json(200, envelope([task])), {}, draw)

    def tasks_ready(self, prefix: str, surface: tuple[Any, ...]) -> SimResponse:
        ready: list[dict[str, Any]] = []
        deferred = int(self.settings.get("deferred_looks", 1))
        with self.sim.lock:
            for task in self.tasks.values():
                if task.prefix != prefix or task.collected or task.fault == "lose":
                    continue
                task.looks += 1  # a listing is a look: time passes for every pending task
                if task.looks <= deferred:
                    continue
                base = f"/v3/{prefix}/task_get"
                ready.append(
                    {
                        "id": task.task_id,
                        "se": surface[2],
                        "function": surface[3],
                        "date_posted": _time(task.posted_at),
                        "tag": task.spec.get("tag"),
                        "endpoint_advanced": f"{base}/advanced/{task.task_id}",
                        "endpoint_html": f"{base}/html/{task.task_id}",
                    }
                )
        path = ["v3", *prefix.split("/"), "tasks_ready"]
        listing = {
            "id": self._next_id(),
            "status_code": 20000,
            "status_message": "Ok.",
            "time": "0.1 sec.",
            "cost": 0,
            "result_count": len(ready),
            "path": path,
            "data": {"api": surface[1], "function": "tasks_ready", "se": surface[2]},
            "result": ready,
        }
        return SimResponse.json(200, envelope([listing]))

    def task_get(self, prefix: str, surface: tuple[Any, ...], task_id: str) -> SimResponse:
        path = ["v3", *prefix.split("/"), "task_get", "advanced", task_id]
        draw, failure = self._fault(surface, "task_get\n" + task_id)
        if failure is not None:
            return self._respond(failure, {}, draw)
        deferred = int(self.settings.get("deferred_looks", 1))
        with self.sim.lock:
            task = self.tasks.get(task_id)
            if task is None or task.prefix != prefix or task.fault == "lose":
                missing = {
                    "id": task_id,
                    "status_code": 40401,
                    "status_message": "Task Not Found.",
                    "time": "0.01 sec.",
                    "cost": 0,
                    "result_count": 0,
                    "path": path,
                    "data": None,
                    "result": None,
                }
                return SimResponse.json(200, envelope([missing]))
            task.looks += 1
            if task.looks <= deferred:
                queued = {
                    "id": task_id,
                    "status_code": 40602,
                    "status_message": "Task In Queue.",
                    "time": "0.01 sec.",
                    "cost": 0,
                    "result_count": 0,
                    "path": path,
                    "data": self._data(task.spec, surface, "advanced"),
                    "result": None,
                }
                return SimResponse.json(200, envelope([queued]))
            task.collected = True
            found = self._finished(task, path, "advanced")
        return self._respond(SimResponse.json(200, envelope([found])), {}, draw)

    def id_list(self, request: SimRequest) -> SimResponse:
        specs = self._specs(request)
        spec = _dict(specs[0]) if specs else {}
        limit = int(spec.get("limit") or 1000)
        offset = int(spec.get("offset") or 0)
        with self.sim.lock:
            serp = [t for t in self.tasks.values() if t.prefix.startswith("serp/")]
        serp.sort(key=lambda t: t.posted_at, reverse=spec.get("sort", "desc") == "desc")
        rows = [
            {
                "id": t.task_id,
                "url": f"https://api.dataforseo.com/v3/{t.prefix}/task_post",
                "datetime_posted": _time(t.posted_at),
                "datetime_done": _time(t.posted_at),
                "status": "Ok.",
                "cost": t.cost,
                "metadata": dict(t.spec) if spec.get("include_metadata") else None,
            }
            for t in serp[offset : offset + limit]
        ]
        listing = {
            "id": self._next_id(),
            "status_code": 20000,
            "status_message": "Ok.",
            "time": "0.2 sec.",
            "cost": 0,
            "result_count": len(rows),
            "path": ["v3", "serp", "id_list"],
            "data": {"api": "serp", "function": "id_list", **spec},
            "result": rows,
        }
        return SimResponse.json(200, envelope([listing]))

    # --- shapes ------------------------------------------------------------------------
    def _next_id(self) -> str:
        self.serial += 1
        stamp = datetime.now(UTC).strftime("%m%d%H%M")
        return f"{stamp}-{self.serial % 10000:04d}-0139-0000-{self.serial:012x}"

    @staticmethod
    def _data(spec: dict[str, Any], surface: tuple[Any, ...], function: str) -> dict[str, Any]:
        return {
            "api": surface[1],
            "function": function,
            "se": surface[2],
            "se_type": surface[3],
            **spec,
        }

    @staticmethod
    def _price(surface: tuple[Any, ...], spec: dict[str, Any]) -> float:
        price = PRICES[surface[3]]
        if surface[3] == "organic" and spec.get("load_async_ai_overview"):
            price += PRICES["async_ai_overview"]
        return round(price, 6)

    def _finished(self, task: _Task, path: list[str], function: str) -> dict[str, Any]:
        surface = next(s for p, s in SURFACES.items() if p == task.prefix)
        base = {
            "id": task.task_id,
            "time": "0.0903 sec.",
            "cost": 0,
            "path": path,
            "data": self._data(task.spec, surface, function),
        }
        if task.fault == "task_failed":
            return base | {
                "status_code": 40101,
                "status_message": "Internal SE Server Error.",
                "result_count": 0,
                "result": None,
            }
        result = (
            _scraper_result(task, surface)
            if surface[3] == "llm_scraper"
            else _serp_result(task, surface)
        )
        return base | {
            "status_code": 20000,
            "status_message": "Ok.",
            "result_count": 1,
            "result": [result],
        }


def _login(header: str) -> str:
    """The login of HTTP Basic credentials; empty when there are none, or when the login
    starts with `invalid` (the credentials the simulator refuses)."""
    if not header.lower().startswith("basic "):
        return ""
    try:
        login = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")[0]
    except (ValueError, UnicodeDecodeError):
        return ""
    return "" if login.startswith("invalid") else login


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _invalid_field(spec: Any) -> str | None:
    """The first field DataForSEO would refuse (40501 "Invalid Field"), or None."""
    if not isinstance(spec, dict):
        return "task"
    if not isinstance(spec.get("keyword"), str) or not spec["keyword"].strip():
        return "keyword"
    if spec.get("location_code") not in LOCATIONS and not spec.get("location_name"):
        return "location_code"
    if spec.get("language_code") not in LANGUAGES and not spec.get("language_name"):
        return "language_code"
    if "device" in spec and spec["device"] not in ("desktop", "mobile"):
        return "device"
    return None


def _invalid_prompt(spec: dict[str, Any]) -> str | None:
    """The first LLM Responses field DataForSEO would refuse, or None."""
    prompt = spec.get("user_prompt")
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > PROMPT_LIMIT:
        return "user_prompt"
    if not isinstance(spec.get("model_name"), str) or not spec["model_name"].strip():
        return "model_name"
    return None


def _llm_response(
    answer: SimAnswer, spec: dict[str, Any], engine: tuple[Any, ...], searched: bool
) -> dict[str, Any]:
    """One LLM Responses result: the answer as one `message` item of one text section."""
    prompt = str(spec["user_prompt"])
    annotations: list[dict[str, Any]] | None = None
    if searched:
        annotations = []
        for number, citation in enumerate(answer.citations, start=1):
            annotation: dict[str, Any] = {
                "title": citation.title,
                "url": citation.url,
                "start_index": citation.start,
                "end_index": citation.end,
            }
            if engine[2] == "gemini":  # a Vertex AI redirect, the original in `direct_url`
                annotation["url"] = (
                    f"https://vertexaisearch.cloud.google.com/grounding-api-redirect/{number:04d}"
                )
                annotation["direct_url"] = citation.url
            annotations.append(annotation)
    input_tokens, output_tokens = len(prompt) // 4 + 8, len(answer.text) // 4 + 1
    money = (input_tokens * LLM_TOKEN_PRICES[0] + output_tokens * LLM_TOKEN_PRICES[1]) / 1e6
    return {
        "model_name": spec["model_name"],
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "reasoning_tokens": 0,
        "web_search": searched,
        "money_spent": round(money, 6),
        "datetime": _time(datetime.now(UTC)),
        "items": [
            {
                "type": "message",
                "sections": [{"type": "text", "text": answer.text, "annotations": annotations}],
            }
        ],
        "fan_out_queries": fan_out(prompt) if searched else None,
    }


def fan_out(keyword: str) -> list[str]:
    """The searches a simulated engine runs for a question (deterministic)."""
    base = keyword.rstrip("?").strip()
    return [base, f"{base} reviews", f"{base} comparison 2026"]


def _sources(answer: SimAnswer, kind: str) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for citation in answer.citations:
        seen.setdefault(
            citation.url,
            {
                "type": kind,
                "title": citation.title,
                "snippet": citation.cited_text,
                "domain": _domain(citation.url),
                "url": citation.url,
                "thumbnail": None,
                "source_name": _domain(citation.url),
                "publication_date": None,
                "markdown": citation.cited_text,
            },
        )
    return list(seen.values())


def _scraper_result(task: _Task, surface: tuple[Any, ...]) -> dict[str, Any]:
    keyword = str(task.spec["keyword"])
    sources = _sources(task.answer, f"{surface[2]}_source")
    text_type = "chat_gpt_text" if surface[2] == "chat_gpt" else "gemini_text"
    item: dict[str, Any] = {
        "type": text_type,
        "rank_group": 1,
        "rank_absolute": 1,
        "markdown": task.answer.text,
    }
    result: dict[str, Any] = {
        "keyword": keyword,
        "location_code": task.spec.get("location_code"),
        "language_code": task.spec.get("language_code"),
        "model": surface[4],
        "datetime": _time(task.posted_at),
        "markdown": task.answer.text,
        "sources": sources,
        "se_results_count": 0,
        "item_types": [text_type],
        "items_count": 1,
        "items": [item],
    }
    if surface[2] == "chat_gpt":
        item |= {"sources": sources, "brand_entities": None}
        # Read but not cited: every source, and one result the answer did not use.
        read = [
            {
                "type": "chat_gpt_search_result",
                "url": s["url"],
                "domain": s["domain"],
                "title": s["title"],
                "description": s["snippet"],
                "breadcrumb": None,
            }
            for s in sources
        ]
        read.append(
            {
                "type": "chat_gpt_search_result",
                "url": "https://forum.example.org/t/1",
                "domain": "forum.example.org",
                "title": "A forum thread",
                "description": "Read, not cited.",
                "breadcrumb": None,
            }
        )
        result |= {
            "check_url": "https://chatgpt.com/?q=" + keyword.replace(" ", "+"),
            "search_results": read if task.spec.get("force_web_search") else [],
            "fan_out_queries": fan_out(keyword) if task.spec.get("force_web_search") else [],
            "brand_entities": None,
        }
    return result


def _serp_result(task: _Task, surface: tuple[Any, ...]) -> dict[str, Any]:
    keyword = str(task.spec["keyword"])
    references = [
        {
            "type": "ai_overview_reference",
            "position": "right",
            "source": s["source_name"],
            "domain": s["domain"],
            "url": s["url"],
            "title": s["title"],
            "text": s["snippet"],
        }
        for s in _sources(task.answer, "ai_overview_reference")
    ]
    # The element rests on the answer's citations (its `references`: "used to generate the
    # element"); the overview's list adds one that "may have been used" and is cited nowhere.
    listed = [
        *references,
        {
            "type": "ai_overview_reference",
            "position": "right",
            "source": "forum.example.org",
            "domain": "forum.example.org",
            "url": "https://forum.example.org/t/2",
            "title": "A forum thread",
            "text": "Listed, not cited.",
        },
    ]
    element = {
        "type": "ai_overview_element",
        "position": "left",
        "title": None,
        "text": task.answer.text,
        "markdown": task.answer.text,
        "links": None,
        "images": None,
        "references": references or None,
    }
    overview: dict[str, Any] = {
        "type": "ai_overview",
        "rank_group": 1,
        "rank_absolute": 1,
        "position": "left",
        "xpath": "/html[1]/body[1]/div[3]",
        "markdown": task.answer.text,
        "items": [element],
        "references": listed,
        "rectangle": None,
    }
    items: list[dict[str, Any]] = [overview]
    if surface[3] == "organic":
        overview |= {
            "page": 1,
            "asynchronous_ai_overview": bool(task.spec.get("load_async_ai_overview")),
        }
        items.append(
            {
                "type": "organic",
                "rank_group": 1,
                "rank_absolute": 2,
                "page": 1,
                "position": "left",
                "xpath": "/html[1]/body[1]/div[4]",
                "domain": "www.example.com",
                "title": "An organic result",
                "url": "https://www.example.com/",
                "description": "Organic listing.",
            }
        )
    else:
        overview["page"] = 1
    return {
        "keyword": keyword,
        "type": surface[3],
        "se_domain": "google.com",
        "location_code": task.spec.get("location_code"),
        "language_code": task.spec.get("language_code"),
        "check_url": "https://www.google.com/search?q=" + keyword.replace(" ", "+"),
        "datetime": _time(task.posted_at),
        "spell": None,
        "refinement_chips": None,
        "item_types": sorted({i["type"] for i in items}),
        "se_results_count": 1000,
        "pages_count": 1,
        "items_count": len(items),
        "items": items,
    }
