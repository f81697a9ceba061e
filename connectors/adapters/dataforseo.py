"""DataForSEO: a collection vendor serving consumer surfaces through documented APIs
(docs.dataforseo.com/v3; the official client `dataforseo-client` is the oracle in
tests/fidelity/test_dataforseo_client.py).

One host (`https://api.dataforseo.com`), HTTP Basic auth (`login:password` as the API key:
GEO_DATAFORSEO_API_KEY). Every POST body is a JSON array of tasks; every answer is the same
envelope: {"version", "status_code", "status_message", "time", "cost" (USD, float),
"tasks_count", "tasks_error", "tasks": [{"id", "status_code", "status_message", "time", "cost",
"result_count", "path", "data" (the task as posted, with its `tag`), "result"}]}. HTTP is 200
unless 401 / 402 / 404 / 500; the outcome is in `status_code`: 20000 Ok., 20100 Task Created.,
40601 Task Handed., 40602 Task In Queue. (not ready yet), 40401 Task Not Found., 40403 Results
Expired., 40006 more than 100 tasks, 40100 unauthorized, 40200 Payment Required., 40201
account blocked, 40202 rate limit per minute exceeded, 40203 cost limit exceeded, 40501 Invalid
Field, 40101 / 40102 the search engine failed / had no results, 5xxxx the vendor's own errors.

Surfaces and the endpoints each uses (`prefix` below; Standard method unless
GEO_<PLATFORM>_EXTRA={"method": "live"}):
    chatgpt_web         /v3/ai_optimization/chat_gpt/llm_scraper   (ChatGPT search, scraped)
    gemini_web          /v3/ai_optimization/gemini/llm_scraper     (the Gemini app, scraped)
    google_ai_mode      /v3/serp/google/ai_mode                    (the `ai_overview` item)
    google_ai_overview  /v3/serp/google/organic                    (the `ai_overview` item,
                                                                     load_async_ai_overview)
    {prefix}/task_post            POST up to 100 tasks -> each task's id (20100) and its cost
    {prefix}/tasks_ready          GET completed tasks not yet collected: {id, tag, ...}
    {prefix}/task_get/advanced/ID GET the task's result (40602 / 40601 while not ready)
    {prefix}/live/advanced        POST one task, answered in the call (the `live` method)
    /v3/serp/id_list              POST {datetime_from, datetime_to, include_metadata}: every
                                  SERP task posted in the window, with its cost and its tag

The account is charged when a task is posted (task_post's `cost`); results are free to fetch,
so the cost each response states is carried on the submit outcome and recorded on the attempt
(pipeline/submission.py); a task found again by its tag after a crash has its cost from the
same id_list entry (`find_again`, SERP only). The `tag` is the attempt's idempotency key:
`lookup` finds a task again by it (id_list for SERP tasks; tasks_ready for the LLM scrapers,
where a task still queued is "not known yet" and the lookup is tried again, never answered
"not accepted").
DataForSEO documents no cancel: `cancellable` is False (a cancelled run asks nothing of it).

The LLM Responses API serves the model APIs themselves (platforms openai, anthropic, gemini,
perplexity) when GEO_<PLATFORM>_VENDOR=dataforseo; their own adapters are the default. It has
the Live method only (Perplexity documents no other; the rest are asked the same way): one
task per call, answered in it, so these connectors are synchronous like the direct adapters.
    openai      /v3/ai_optimization/chat_gpt/llm_responses/live
    anthropic   /v3/ai_optimization/claude/llm_responses/live
    gemini      /v3/ai_optimization/gemini/llm_responses/live
    perplexity  /v3/ai_optimization/perplexity/llm_responses/live
A task is {user_prompt, model_name (the platform's configured model), web_search (ChatGPT,
Claude, Gemini: the target's mode; Perplexity's Sonar models always search and take no such
field), web_search_country_iso_code (ChatGPT, Claude, Perplexity, when searching), tag}; its
result {model_name, input_tokens, output_tokens, web_search, money_spent, items[], fan_out_queries}
where the answer is the `message` items' `sections[].text` and what it cites their
`annotations[]` (`direct_url` where given: Gemini's `url` is a Vertex AI redirect). No found
sources are separated; `fan_out_queries` are the searches. The task's `cost` (which includes
the model's `money_spent`) is the attempt's cost.

What the engine searched and read, as each result documents it (the official client's models):
    ChatGPT scraper  `sources` (what the answer cites) are its citations; `search_results`
                     ("all web search outputs the model retrieved ... including unused
                     entries") that no source is are found, not cited; `fan_out_queries` are
                     the searches it ran.
    Gemini scraper   `sources` only: citations, nothing found, no searches.
    Google SERP      a reference on an element of the `ai_overview` (`items[].references`:
    (AI Mode, AI     "used to generate the element") is cited; one only in the overview's own
     Overview)       `references` list ("additional references ... may have been used") is
                     found, not cited. An overview whose elements carry no references cites
                     its whole list (all the vendor says was used). No searches are documented.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    Connector,
    ConnectorConfig,
    ErrorClass,
    FoundTask,
    NormalizedResult,
    PollOutcome,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from ..citations import CitationList, found_sources, search_queries
from ..direct import DEVICES, REGIONS, failed
from ..errors import classify_http_error, error_dict, json_body
from ..transport import HttpExchange, HttpTransport, submit_answer_cut

SUBMISSION_LIMIT = 100
OK = 20000
TASK_CREATED = 20100
NOT_READY = {40601: "running", 40602: "queued"}
GONE = frozenset({40400, 40401, 40403})
ID_LIST_PATH = "/v3/serp/id_list"
ID_LIST_WINDOW = timedelta(days=2)
ID_LIST_PAGES = 5
ID_LIST_LIMIT = 1000
NO_AI_OVERVIEW = "NO_AI_OVERVIEW"
# The key under which `Answer.cited` carries a source's (start, end) in the answer text, where
# the vendor states one (the LLM Responses annotations); not a vendor field.
SPAN = "_span"
PARAGRAPH = "\n\n"  # between the sections of an LLM Responses answer

# Region -> DataForSEO `location_code` (Google's geo target ids, the vendor's location list).
LOCATION_CODES: dict[str, int] = {
    "us": 2840,
    "gb": 2826,
    "ca": 2124,
    "au": 2036,
    "in": 2356,
    "sg": 2702,
    "ie": 2372,
    "de": 2276,
    "fr": 2250,
    "es": 2724,
    "it": 2380,
    "nl": 2528,
    "br": 2076,
    "mx": 2484,
    "jp": 2392,
}
# The language a target is asked in when it names none.
REGION_LANGUAGES: dict[str, str] = {
    "us": "en",
    "gb": "en",
    "ca": "en",
    "au": "en",
    "in": "en",
    "sg": "en",
    "ie": "en",
    "de": "de",
    "fr": "fr",
    "es": "es",
    "it": "it",
    "nl": "nl",
    "br": "pt",
    "mx": "es",
    "jp": "ja",
}
LANGUAGES = frozenset(REGION_LANGUAGES.values())


def _classify_code(code: int) -> ErrorClass:
    if code in (40100, 40200, 40201, 40203):
        return ErrorClass.AUTH
    if code == 40202:
        return ErrorClass.RATE_LIMITED
    if code >= 50000:
        return ErrorClass.TRANSIENT
    if code in GONE:
        return ErrorClass.LOST
    if code in (40101, 40102):
        return ErrorClass.UPSTREAM_FAILED
    return ErrorClass.INVALID


def usd_cents(cost: Any) -> int | None:
    """A stated USD cost (a float of dollars) in cents, rounded up so a cost is never
    under-recorded (billing/costs.py does the same for tokens); None when none is stated."""
    if isinstance(cost, bool) or not isinstance(cost, int | float | str):
        return None
    try:
        dollars = Decimal(str(cost))
    except InvalidOperation:
        return None
    if not dollars.is_finite() or dollars <= 0:
        return None
    return math.ceil(dollars * 100)


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def first_task(payload: Any) -> dict[str, Any]:
    """The envelope's first task ({} when there is none)."""
    tasks = _as_list(_as_dict(payload).get("tasks"))
    return _as_dict(tasks[0]) if tasks else {}


def first_result(payload: Any) -> dict[str, Any]:
    results = _as_list(first_task(payload).get("result"))
    return _as_dict(results[0]) if results else {}


class DataForSEOConnector(Connector):
    """What every DataForSEO surface shares; a subclass names its endpoint and its answer."""

    platform: ClassVar[str] = "dataforseo"
    default_base_url: ClassVar[str] = "https://api.dataforseo.com"
    prefix: ClassVar[str] = ""
    live_path: ClassVar[str] = "/live/advanced"  # after `prefix`: the Live method's endpoint
    serp: ClassVar[bool] = False  # a SERP API task: id_list finds it, devices apply
    devices: ClassVar[frozenset[str]] = frozenset({"desktop"})
    modes: ClassVar[frozenset[str]] = frozenset({"web_search"})

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self.transport = HttpTransport(config)
        self.platform = config.platform  # type: ignore[misc]  # one class per surface

    @property
    def live(self) -> bool:
        return str(self.config.extra.get("method", "")).lower() == "live"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            platform=self.config.platform,
            devices=self.devices,
            regions=frozenset(LOCATION_CODES),
            modes=self.modes,
            screenshots=False,
            submission_limit=1 if self.live else SUBMISSION_LIMIT,
            asynchronous=not self.live,
            supports_lookup=not self.live,
            cancellable=False,  # no endpoint stops a posted task
            languages=LANGUAGES,
        )

    # --- the wire --------------------------------------------------------------------------
    def _call(
        self, method: str, path: str, *, body: Any = None, attempt_no: int = 1
    ) -> HttpExchange:
        token = base64.b64encode(self.config.api_key.encode()).decode()
        headers = {"Authorization": f"Basic {token}", "Accept": "application/json"}
        return self.transport.request(
            method, path, attempt_no=attempt_no, json_body=body, headers=headers
        )

    @staticmethod
    def _envelope(exchange: HttpExchange) -> dict[str, Any]:
        """The answer's envelope; raises the classified error of a refused call."""
        payload = json_body(exchange.body)
        if exchange.status_code >= 400 or not isinstance(payload, dict):
            if isinstance(payload, dict) and isinstance(payload.get("status_code"), int):
                raise _code_error(payload, exchange)
            if exchange.status_code >= 400:
                raise classify_http_error(
                    exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
                )
            cut = f" (cut: {exchange.interrupted})" if exchange.interrupted else ""
            raise exchange.error(
                ErrorClass.PARSE_FAILED, f"dataforseo answered with a non-JSON body{cut}"
            )
        if payload.get("status_code") != OK:
            raise _code_error(payload, exchange)
        return payload

    # --- submit ----------------------------------------------------------------------------
    def task_spec(self, request: SampleRequest) -> dict[str, Any]:
        """One task as DataForSEO takes it (the surface adds its own fields)."""
        return {
            "keyword": request.question,
            "location_code": LOCATION_CODES.get(request.region, LOCATION_CODES["us"]),
            "language_code": request.language or REGION_LANGUAGES.get(request.region, "en"),
            "tag": request.idempotency_key[:255],
        }

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        if self.live:
            return self._submit_live(request, attempt_no=attempt_no)
        [outcome] = self.submit_batch([request], attempt_no=attempt_no)
        if isinstance(outcome, UpstreamError):
            raise outcome
        return outcome

    def _submit_live(self, request: SampleRequest, *, attempt_no: int) -> SubmitOutcome:
        exchange = self._call(
            "POST",
            f"{self.prefix}{self.live_path}",
            body=[self.task_spec(request)],
            attempt_no=attempt_no,
        )
        payload = self._envelope(exchange)
        refused = _live_refusal(first_task(payload), exchange)
        if refused is not None:
            raise refused
        result = self.parse(
            exchange.body, content_type=exchange.content_type, sample_id=request.sample_id
        )
        result.status_code = exchange.status_code
        task_id = result.upstream_id or request.idempotency_key
        # The charge the call states goes on the attempt, as task_post's does (booked once).
        return SubmitOutcome(
            upstream_id=task_id,
            result=result,
            egress=exchange.egress,
            cost=result.cost,
            cost_currency=result.cost_currency,
        )

    def submit_batch(
        self,
        requests: list[SampleRequest],
        *,
        attempt_no: int = 1,
        idempotency_key: str | None = None,
    ) -> list[SubmitOutcome | UpstreamError]:
        """Post up to 100 tasks in one call; one outcome per request, in order, matched by
        the tag each task carries back. A task the answer does not mention is
        ACCEPTANCE_UNKNOWN (recovery finds it by its tag)."""
        if not requests:
            return []
        if self.live:
            return super().submit_batch(requests, attempt_no=attempt_no)
        if len(requests) > SUBMISSION_LIMIT:
            raise UpstreamError(
                ErrorClass.INVALID, f"batch of {len(requests)} exceeds limit {SUBMISSION_LIMIT}"
            )
        body = [self.task_spec(r) for r in requests]
        exchange = self._call("POST", f"{self.prefix}/task_post", body=body, attempt_no=attempt_no)
        cut = submit_answer_cut(exchange)
        if cut is not None:
            raise cut
        payload = self._envelope(exchange)
        by_tag: dict[str, dict[str, Any]] = {}
        for task in _as_list(payload.get("tasks")):
            tag = _as_dict(_as_dict(task).get("data")).get("tag")
            if isinstance(tag, str):
                by_tag.setdefault(tag, task)
        return [self._posted(by_tag.get(spec["tag"]), exchange) for spec in body]

    @staticmethod
    def _posted(
        task: dict[str, Any] | None, exchange: HttpExchange
    ) -> SubmitOutcome | UpstreamError:
        if task is None:
            return UpstreamError(
                ErrorClass.ACCEPTANCE_UNKNOWN,
                "task_post answer lacks this task's tag",
                status_code=exchange.status_code,
                egress=exchange.egress,
            )
        code = task.get("status_code")
        if code == TASK_CREATED and task.get("id"):
            return SubmitOutcome(
                upstream_id=str(task["id"]),
                egress=exchange.egress,
                cost=usd_cents(task.get("cost")),
                cost_currency="USD" if usd_cents(task.get("cost")) is not None else None,
            )
        code = code if isinstance(code, int) else 0
        return UpstreamError(
            _classify_code(code),
            f"{code}: {task.get('status_message') or 'task refused'}",
            status_code=exchange.status_code,
            egress=exchange.egress,
        )

    # --- after acceptance ------------------------------------------------------------------
    def _task_get(self, upstream_id: str) -> tuple[HttpExchange, dict[str, Any]]:
        exchange = self._call("GET", f"{self.prefix}/task_get/advanced/{upstream_id}")
        return exchange, self._envelope(exchange)

    def poll(self, upstream_id: str) -> PollOutcome:
        try:
            _, payload = self._task_get(upstream_id)
        except UpstreamError as error:
            raise error.after_acceptance() from None
        task = first_task(payload)
        code = task.get("status_code")
        message = str(task.get("status_message") or "") or None
        if code == OK:
            return PollOutcome(state="completed")
        if code in NOT_READY:
            return PollOutcome(state=NOT_READY[code], message=message)
        if code in GONE or not task:
            return PollOutcome(state="lost", message=message or "dataforseo has no such task")
        if isinstance(code, int) and _classify_code(code) in (
            ErrorClass.TRANSIENT,
            ErrorClass.RATE_LIMITED,
        ):
            raise UpstreamError(ErrorClass.POLL_FAILED, f"{code}: {message}")
        # The task itself failed (40101 search engine error, 40102 no results, ...): its
        # answer is fetched and kept as what the vendor said.
        return PollOutcome(state="completed", message=message)

    def fetch_evidence(self, upstream_id: str, *, sample_id: int | None = None) -> NormalizedResult:
        try:
            exchange, _ = self._task_get(upstream_id)
        except UpstreamError as error:
            if error.error_class is ErrorClass.LOST:
                raise
            raise error.after_acceptance() from None
        result = self.parse(exchange.body, content_type=exchange.content_type, sample_id=sample_id)
        result.status_code = exchange.status_code
        result.upstream_id = result.upstream_id or upstream_id
        return result

    def lookup(self, idempotency_key: str) -> str | None:
        found = self.find_again(idempotency_key)
        return found.upstream_id if found else None

    def find_again(self, idempotency_key: str) -> FoundTask | None:
        """The task posted with this tag: for SERP tasks from id_list, which states each
        task's cost too (one pass for both); for the LLM scrapers from tasks_ready, which
        states none."""
        tag = idempotency_key[:255]
        if self.serp:
            for entry in self._id_list():
                metadata = _as_dict(entry.get("metadata"))
                if metadata.get("tag") == tag and self.prefix in str(entry.get("url") or ""):
                    cents = usd_cents(entry.get("cost"))
                    return FoundTask(
                        str(entry["id"]), (cents, "USD") if cents is not None else None
                    )
            return None
        payload = self._envelope(self._call("GET", f"{self.prefix}/tasks_ready"))
        for task in _as_list(payload.get("tasks")):
            for ready in _as_list(_as_dict(task).get("result")):
                if _as_dict(ready).get("tag") == tag and ready.get("id"):
                    return FoundTask(str(ready["id"]))
        # tasks_ready lists finished tasks only: one still queued is not there yet.
        raise UpstreamError(
            ErrorClass.TRANSIENT, "no ready task has this tag yet (queued, or never accepted)"
        )

    def _id_list(self) -> Iterable[dict[str, Any]]:
        now = datetime.now(UTC)
        for page in range(ID_LIST_PAGES):
            body = [
                {
                    "datetime_from": _dataforseo_time(now - ID_LIST_WINDOW),
                    "datetime_to": _dataforseo_time(now),
                    "limit": ID_LIST_LIMIT,
                    "offset": page * ID_LIST_LIMIT,
                    "sort": "desc",
                    "include_metadata": True,
                }
            ]
            entries = _as_list(
                first_task(self._envelope(self._call("POST", ID_LIST_PATH, body=body))).get(
                    "result"
                )
            )
            yield from (_as_dict(entry) for entry in entries)
            if len(entries) < ID_LIST_LIMIT:
                return

    # --- reading an answer -----------------------------------------------------------------
    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        payload = json_body(raw)
        mime = content_type or "application/json"
        task = first_task(payload)
        if not isinstance(payload, dict) or not task:
            return failed(
                raw,
                mime,
                sample_id,
                error_dict(ErrorClass.PARSE_FAILED, "not a DataForSEO task answer"),
            )
        task_id = str(task["id"]) if task.get("id") else None
        code = task.get("status_code")
        if code != OK:
            message = f"{code}: {task.get('status_message') or 'task failed'}"
            result = failed(
                raw, mime, sample_id, error_dict(ErrorClass.UPSTREAM_FAILED, message, code=code)
            )
            result.upstream_id = task_id
            return result
        answer = cls.answer_of(first_result(payload))
        citations = CitationList(len(answer.text))
        for source in answer.cited:
            if source.get("url"):
                start, end = source.get(SPAN) or (None, None)
                citations.add(str(source["url"]), title=_title(source), start=start, end=end)
        consulted = [(str(s.get("url") or ""), _title(s)) for s in answer.consulted]
        result = NormalizedResult.answer(
            raw,
            mime,
            sample_id,
            task_id,
            answer.text,
            citations=citations.items,
            warnings=answer.warnings,
            search_queries=search_queries(answer.searches),
            found=found_sources(citations.items, consulted),
        )
        cents = usd_cents(task.get("cost"))
        if cents is not None:  # a live call states its charge; task_get states 0
            result.cost, result.cost_currency = cents, "USD"
        return result

    @classmethod
    def answer_of(cls, result: dict[str, Any]) -> Answer:
        """What one result says: its text, the sources it cites and those it consulted."""
        raise NotImplementedError


@dataclass(frozen=True)
class Answer:
    """One result as read: the answer's text, the sources it cites, the sources the engine
    consulted (those not cited become `found`), the searches it ran, and warnings."""

    text: str
    cited: list[dict[str, Any]] = field(default_factory=list)
    consulted: list[dict[str, Any]] = field(default_factory=list)
    searches: list[object] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _title(source: dict[str, Any]) -> str | None:
    title = source.get("title") or source.get("source") or source.get("source_name")
    return str(title) if title else None


def _dataforseo_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S +00:00")


def _live_refusal(task: dict[str, Any], exchange: HttpExchange) -> UpstreamError | None:
    """The error of a live task refused inside an accepted call (40501 Invalid Field, 40202
    the per-minute limit, ...), classified as task_post's refusals are; None for a task that
    ran (20000) or that ran and failed (40101 / 40102: kept as the vendor's failed answer)."""
    code = task.get("status_code")
    if not task or code == OK:
        return None
    code = code if isinstance(code, int) else 0
    error_class = _classify_code(code)
    if error_class is ErrorClass.UPSTREAM_FAILED:
        return None
    return exchange.error(error_class, f"{code}: {task.get('status_message') or 'task refused'}")


def _code_error(payload: dict[str, Any], exchange: HttpExchange) -> UpstreamError:
    code = payload.get("status_code")
    code = code if isinstance(code, int) else 0
    error_class = _classify_code(code)
    if error_class is ErrorClass.UPSTREAM_FAILED:
        error_class = ErrorClass.TRANSIENT
    return exchange.error(error_class, f"{code}: {payload.get('status_message') or 'refused'}")


class _LLMScraper(DataForSEOConnector):
    """The AI Optimization LLM Scraper: the consumer app's answer, scraped."""

    modes = frozenset({"web_search", "no_search"})

    def task_spec(self, request: SampleRequest) -> dict[str, Any]:
        return super().task_spec(request) | {"force_web_search": request.mode == "web_search"}

    @classmethod
    def answer_of(cls, result: dict[str, Any]) -> Answer:
        text = str(result.get("markdown") or "")
        if not text:
            text = "\n\n".join(
                str(item.get("markdown") or "")
                for item in map(_as_dict, _as_list(result.get("items")))
                if item.get("type", "").endswith("_text") and item.get("markdown")
            )
        return Answer(
            text,
            cited=[_as_dict(s) for s in _as_list(result.get("sources"))],
            # ChatGPT's (the Gemini scraper documents neither): every result its searches
            # retrieved, used or not, and the searches themselves.
            consulted=[_as_dict(r) for r in _as_list(result.get("search_results"))],
            searches=_as_list(result.get("fan_out_queries")),
        )


class DataForSEOChatGPTScraper(_LLMScraper):
    prefix = "/v3/ai_optimization/chat_gpt/llm_scraper"


class DataForSEOGeminiScraper(_LLMScraper):
    prefix = "/v3/ai_optimization/gemini/llm_scraper"


class _GoogleSERP(DataForSEOConnector):
    """A Google SERP task whose answer is its `ai_overview` item."""

    serp = True
    devices = frozenset({"desktop", "mobile"})

    def task_spec(self, request: SampleRequest) -> dict[str, Any]:
        return super().task_spec(request) | {"device": request.device}

    @classmethod
    def answer_of(cls, result: dict[str, Any]) -> Answer:
        overviews = [
            item
            for item in map(_as_dict, _as_list(result.get("items")))
            if item.get("type") == "ai_overview"
        ]
        if not overviews:  # Google showed no AI answer for this query: that is the answer
            return Answer("", warnings=[NO_AI_OVERVIEW])
        texts: list[str] = []
        cited: list[dict[str, Any]] = []
        consulted: list[dict[str, Any]] = []
        for overview in overviews:
            texts.append(str(overview.get("markdown") or _element_text(overview)))
            listed = [_as_dict(r) for r in _as_list(overview.get("references"))]
            used = [
                _as_dict(r)
                for element in map(_as_dict, _as_list(overview.get("items")))
                for r in _as_list(element.get("references"))
            ]
            # The elements' references are what each piece of the answer rests on; the
            # overview's list adds what may have been used. Without the former, the list is
            # all the vendor says was used: cited.
            cited.extend(used or listed)
            consulted.extend(listed if used else [])
        return Answer("\n\n".join(t for t in texts if t), cited=cited, consulted=consulted)


def _element_text(overview: dict[str, Any]) -> str:
    return "\n\n".join(
        str(element.get("text") or "")
        for element in map(_as_dict, _as_list(overview.get("items")))
        if element.get("text")
    )


class DataForSEOAIMode(_GoogleSERP):
    prefix = "/v3/serp/google/ai_mode"


class DataForSEOAIOverview(_GoogleSERP):
    prefix = "/v3/serp/google/organic"

    def task_spec(self, request: SampleRequest) -> dict[str, Any]:
        # The overview Google loads after the page is fetched is waited for (its docs'
        # `load_async_ai_overview`); without it an asynchronous overview comes back empty.
        return super().task_spec(request) | {"load_async_ai_overview": True}


class _LLMResponses(DataForSEOConnector):
    """The AI Optimization LLM Responses API: a model API's answer, asked through DataForSEO
    (Live only), serving a platform that also has its own adapter."""

    live_path = "/live"
    # Whether the engine's request documents `web_search` (Perplexity's does not: its Sonar
    # models always search) and `web_search_country_iso_code` (Gemini's does not).
    web_search_field: ClassVar[bool] = True
    country_field: ClassVar[bool] = True
    regions: ClassVar[frozenset[str]] = REGIONS

    @property
    def live(self) -> bool:
        return True  # the only method these endpoints share

    def capabilities(self) -> Capabilities:
        # What the platform's own adapter offers a target (devices, regions), since a target
        # names the platform, not the vendor; no language (the model APIs take none).
        modes = {"web_search", "no_search"} if self.web_search_field else {"web_search"}
        return Capabilities(
            platform=self.config.platform,
            devices=DEVICES,
            regions=self.regions,
            modes=frozenset(modes),
            screenshots=False,
            submission_limit=1,
            asynchronous=False,
            supports_lookup=False,
            cancellable=False,
        )

    def task_spec(self, request: SampleRequest) -> dict[str, Any]:
        searching = request.mode == "web_search"
        spec: dict[str, Any] = {
            "user_prompt": request.question,
            "model_name": request.model or self.config.model or "",
            "tag": request.idempotency_key[:255],
        }
        if self.web_search_field:
            spec["web_search"] = searching
        if searching and self.country_field:
            spec["web_search_country_iso_code"] = request.region.upper()
        return spec

    @classmethod
    def answer_of(cls, result: dict[str, Any]) -> Answer:
        texts: list[str] = []
        cited: list[dict[str, Any]] = []
        at = 0  # where the section being read starts in the joined answer
        for item in map(_as_dict, _as_list(result.get("items"))):
            if item.get("type") != "message":  # `reasoning`: the model's thinking, not its answer
                continue
            for section in map(_as_dict, _as_list(item.get("sections"))):
                text = str(section.get("text") or "")
                if texts and text:
                    at += len(PARAGRAPH)
                for annotation in map(_as_dict, _as_list(section.get("annotations"))):
                    url = annotation.get("direct_url") or annotation.get("url")
                    start, end = annotation.get("start_index"), annotation.get("end_index")
                    span = None
                    if isinstance(start, int) and isinstance(end, int):  # within the section
                        span = (at + start, at + end)
                    cited.append({"url": url, "title": annotation.get("title"), SPAN: span})
                if text:
                    texts.append(text)
                    at += len(text)
        return Answer(
            PARAGRAPH.join(texts), cited=cited, searches=_as_list(result.get("fan_out_queries"))
        )


class DataForSEOChatGPTResponses(_LLMResponses):
    prefix = "/v3/ai_optimization/chat_gpt/llm_responses"


class DataForSEOClaudeResponses(_LLMResponses):
    prefix = "/v3/ai_optimization/claude/llm_responses"


class DataForSEOGeminiResponses(_LLMResponses):
    prefix = "/v3/ai_optimization/gemini/llm_responses"
    # No location is documented for Gemini's search, as for its own API (GeminiConnector):
    # the only honest region is "global", so a gemini target runs through either.
    country_field = False
    regions = frozenset({"global"})


class DataForSEOPerplexityResponses(_LLMResponses):
    prefix = "/v3/ai_optimization/perplexity/llm_responses"
    web_search_field = False
