"""Every platform, declared once: its adapter, the simulator module that fakes it, its default
model and prices, its queue and what kind of platform it is.

Everything else derives from `PLATFORMS`: the settings defaults (`GEO_PLATFORM_MODELS`,
`GEO_MODEL_PRICES`), the connector registry (connectors/registry.py), the default price list
(billing), the worker queues (`worker_queues`, `manage.py worker_queues`) and the simulator's
routes. The copies that must stay hand-written (Procfile, deploy/systemd/worker-*.env, the
README's worker commands) are checked against it by tests/ops/test_queue_copies.py.

Plain data, no Django and no imports of the adapters: geo_collect/settings.py reads it, and
the simulator module is named by string, so production code never imports the simulator.
Adding a platform: one `Platform(...)` below, its adapter module and its simulator module
(docs/platforms.md, "Adding a platform").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# How a platform answers. "direct": its own model API, the answer streamed back by the submit
# call. "provider": a collection service that takes tasks, answers later (poll or callback).
Delivery = Literal["direct", "provider"]

# The queues every deployment has besides the platforms': evidence (provider evidence,
# screenshots), analysis, and Celery's default queue (the run-finished event that settles
# billing). pipeline.dispatch.queue_for names the first two by the step's group.
EVIDENCE_QUEUE = "evidence"
ANALYSIS_QUEUE = "analysis"
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class TokenPrice:
    """What one million tokens of a model cost us, in minor units of `currency`."""

    currency: str
    input: int
    output: int

    def as_setting(self) -> dict[str, Any]:
        """The shape of one `GEO_MODEL_PRICES` entry (billing/costs.py)."""
        return {"currency": self.currency, "input": self.input, "output": self.output}


@dataclass(frozen=True)
class Platform:
    key: str
    adapter: str  # "module:Class" of its connector, imported on first use
    simulator: str  # "module:Class" of its simulated protocol; only the simulator imports it
    default_model: str  # overridable with GEO_<KEY>_MODEL; never an alias map in code
    # Default price per sample, USD cents, by price component (base, deep_thinking, screenshot).
    sample_prices: Mapping[str, int]
    delivery: Delivery
    batch: bool = False  # submits many questions in one call (Connector.submit_batch)
    # What the default model's tokens cost us (GEO_MODEL_PRICES); None: the platform reports
    # its own cost (a provider) or is not priced per token.
    token_price: TokenPrice | None = None
    # The collection vendors that can serve this platform, vendor key -> "module:Class" of
    # that vendor's connector for it; the deployment picks one with GEO_<KEY>_VENDOR. A
    # consumer surface (chatgpt_web, google_ai_overview, ...) has no API of its own: by
    # default the first vendor serves it (`adapter` is the first's). A model API with its own
    # adapter (openai, ...) may list vendors that resell it (DataForSEO's LLM Responses): its
    # own adapter stays the default, a vendor serves it only when named.
    vendors: Mapping[str, str] = field(default_factory=dict)

    @property
    def queue(self) -> str:
        return platform_queue(self.key)

    @property
    def own_api(self) -> bool:
        """Whether the platform has an API of its own (its own adapter and simulator), as
        opposed to a consumer surface only collection vendors reach."""
        return bool(self.simulator)

    @property
    def default_vendor(self) -> str:
        """The vendor serving the platform when GEO_<KEY>_VENDOR is unset; empty: its own
        API."""
        if self.own_api or not self.vendors:
            return ""
        return next(iter(self.vendors))


@dataclass(frozen=True)
class Vendor:
    """A collection vendor: one API (one host, one account) serving several surfaces. The
    simulator serves its protocol under `/<vendor key>/` (the vendor's real paths), and a
    platform it serves is configured with GEO_<VENDOR>_* (API_KEY, BASE_URL) unless the
    platform's own GEO_<PLATFORM>_* says otherwise (connectors/registry.py)."""

    key: str
    simulator: str  # "module:Class" of its simulated protocol; only the simulator imports it


VENDORS: dict[str, Vendor] = {
    vendor.key: vendor
    for vendor in (
        Vendor(key="dataforseo", simulator="simulator.platforms.dataforseo:DataForSEOProtocol"),
        Vendor(key="serpapi", simulator="simulator.platforms.serpapi:SerpApiProtocol"),
        Vendor(key="brightdata", simulator="simulator.platforms.brightdata:BrightDataProtocol"),
    )
}


def _surface(key: str, vendors: Mapping[str, str], *, price: tuple[int, int, int]) -> Platform:
    """A consumer surface served by collection vendors (`Platform.vendors`)."""
    base, deep_thinking, screenshot = price
    return Platform(
        key=key,
        adapter=next(iter(vendors.values()), ""),
        simulator="",  # served under /<vendor>/ by the vendor's protocol (VENDORS)
        default_model=key,
        sample_prices={"base": base, "deep_thinking": deep_thinking, "screenshot": screenshot},
        delivery="provider",
        batch=True,
        vendors=dict(vendors),
    )


_DATAFORSEO = "connectors.adapters.dataforseo"
_SERPAPI = "connectors.adapters.serpapi"
_BRIGHTDATA = "connectors.adapters.brightdata"


def platform_queue(key: str) -> str:
    """The Celery queue of a platform's upstream steps (submit, verify, poll)."""
    return f"platform.{key}"


def _direct(
    key: str,
    module: str,
    name: str,
    *,
    model: str,
    price: tuple[int, int, int],
    tokens: TokenPrice,
    vendors: Mapping[str, str] | None = None,
) -> Platform:
    """A direct model API: adapter and simulator modules of the same name (the convention).
    `vendors`: collection vendors that can serve it instead, when the deployment names one."""
    base, deep_thinking, screenshot = price
    return Platform(
        key=key,
        adapter=f"connectors.adapters.{module}:{name}Connector",
        simulator=f"simulator.platforms.{module}:{name}Protocol",
        default_model=model,
        sample_prices={"base": base, "deep_thinking": deep_thinking, "screenshot": screenshot},
        delivery="direct",
        token_price=tokens,
        vendors=dict(vendors or {}),
    )


def _usd(input: int, output: int) -> TokenPrice:
    return TokenPrice(currency="USD", input=input, output=output)


def _cny(input: int, output: int) -> TokenPrice:
    return TokenPrice(currency="CNY", input=input, output=output)


# Token prices: the vendors' list prices when this table was written. Sample prices: direct
# model APIs are cheap per question; the collector drives a consumer UI through a provider that
# charges us per task (the simulator charges 20-60 cents).
_DECLARED: tuple[Platform, ...] = (
    _direct("openai", "openai_responses", "OpenAIResponses", model="gpt-4.1-mini",
            price=(5, 3, 10), tokens=_usd(40, 160),
            vendors={"dataforseo": f"{_DATAFORSEO}:DataForSEOChatGPTResponses"}),
    _direct("openai_chat", "openai_chat", "OpenAIChat", model="gpt-4o-mini-search-preview",
            price=(4, 3, 10), tokens=_usd(15, 60)),
    _direct("anthropic", "anthropic", "Anthropic", model="claude-sonnet-4-5",
            price=(6, 4, 10), tokens=_usd(300, 1500),
            vendors={"dataforseo": f"{_DATAFORSEO}:DataForSEOClaudeResponses"}),
    _direct("gemini", "gemini", "Gemini", model="gemini-2.5-flash",
            price=(4, 3, 10), tokens=_usd(30, 250),
            vendors={"dataforseo": f"{_DATAFORSEO}:DataForSEOGeminiResponses"}),
    _direct("perplexity", "perplexity", "Perplexity", model="sonar",
            price=(5, 3, 10), tokens=_usd(100, 100),
            vendors={"dataforseo": f"{_DATAFORSEO}:DataForSEOPerplexityResponses"}),
    _direct("deepseek", "deepseek", "DeepSeek", model="deepseek-chat",
            price=(2, 2, 10), tokens=_usd(27, 110)),
    _direct("kimi", "kimi", "Kimi", model="kimi-k2-turbo-preview",
            price=(2, 2, 10), tokens=_cny(800, 5800)),
    _direct("doubao", "doubao", "Doubao", model="doubao-seed-1-6",
            price=(2, 2, 10), tokens=_cny(80, 800)),
    _direct("qwen", "qwen", "Qwen", model="qwen-plus",
            price=(2, 2, 10), tokens=_cny(80, 200)),
    _direct("ollama", "ollama", "Ollama", model="llama3.2",
            price=(1, 1, 10), tokens=_usd(0, 0)),
    _direct("grok", "grok", "Grok", model="grok-4-1-fast-reasoning",
            price=(5, 3, 10), tokens=_usd(20, 50)),
    Platform(
        key="collector",
        adapter="connectors.adapters.collector:CollectorConnector",
        simulator="simulator.platforms.collector:CollectorProtocol",
        default_model="consumer-ui",
        sample_prices={"base": 80, "deep_thinking": 20, "screenshot": 10},
        delivery="provider",
        batch=True,
    ),
    # Consumer surfaces. Prices: the vendors charge a few tenths of a cent to a few cents per
    # task (their pricing pages); a sample is priced like the collector's consumer UI tasks.
    _surface("chatgpt_web", {"dataforseo": f"{_DATAFORSEO}:DataForSEOChatGPTScraper",
                             "brightdata": f"{_BRIGHTDATA}:BrightDataChatGPT"},
             price=(60, 20, 10)),
    _surface("google_ai_overview", {"dataforseo": f"{_DATAFORSEO}:DataForSEOAIOverview",
                                    "serpapi": f"{_SERPAPI}:SerpApiAIOverview"},
             price=(40, 20, 10)),
    _surface("google_ai_mode", {"dataforseo": f"{_DATAFORSEO}:DataForSEOAIMode",
                                "serpapi": f"{_SERPAPI}:SerpApiAIMode",
                                "brightdata": f"{_BRIGHTDATA}:BrightDataAIMode"},
             price=(40, 20, 10)),
    _surface("copilot_web", {"brightdata": f"{_BRIGHTDATA}:BrightDataCopilot"},
             price=(60, 20, 10)),
    _surface("gemini_web", {"dataforseo": f"{_DATAFORSEO}:DataForSEOGeminiScraper",
                            "brightdata": f"{_BRIGHTDATA}:BrightDataGemini"},
             price=(60, 20, 10)),
    _surface("perplexity_web", {"brightdata": f"{_BRIGHTDATA}:BrightDataPerplexity"},
             price=(60, 20, 10)),
)  # fmt: skip

# key -> declaration, in declaration order. Tests add a throw-away platform here (and take it
# out again); everything below reads it when called, never a copy made at import.
PLATFORMS: dict[str, Platform] = {platform.key: platform for platform in _DECLARED}


def vendor_keys() -> list[str]:
    """Every vendor key, sorted (the simulator serves each under `/<key>/`)."""
    return sorted(VENDORS)


def default_models() -> dict[str, str]:
    """`settings.GEO_PLATFORM_MODELS`: platform key -> the model asked by default."""
    return {key: platform.default_model for key, platform in PLATFORMS.items()}


def default_token_prices() -> dict[str, dict[str, Any]]:
    """`settings.GEO_MODEL_PRICES` unless overridden: model -> its token price."""
    return {
        platform.default_model: platform.token_price.as_setting()
        for platform in PLATFORMS.values()
        if platform.token_price is not None
    }


def default_sample_prices() -> dict[str, dict[str, int]]:
    """The shipped price list (billing.services.ensure_default_price_version): platform key ->
    {component: USD cents per sample}."""
    return {key: dict(platform.sample_prices) for key, platform in PLATFORMS.items()}


def worker_groups() -> dict[str, tuple[str, ...]]:
    """The deployment's worker groups and the queues each consumes (Procfile,
    deploy/systemd/worker-<group>.env): the direct APIs together, the providers with the
    default queue, evidence and analysis on their own."""
    by_delivery: dict[str, list[str]] = {"direct": [], "provider": []}
    for platform in PLATFORMS.values():
        by_delivery[platform.delivery].append(platform.queue)
    return {
        "direct": tuple(by_delivery["direct"]),
        "provider": (*by_delivery["provider"], DEFAULT_QUEUE),
        "evidence": (EVIDENCE_QUEUE,),
        "analysis": (ANALYSIS_QUEUE,),
    }


def worker_queues(group: str | None = None) -> tuple[str, ...]:
    """The queues a worker of `group` consumes; without a group every queue the deployment
    publishes to (each must be consumed by some worker, or its work waits forever)."""
    if group is not None:
        return worker_groups()[group]
    platforms = sorted(platform_queue(key) for key in PLATFORMS)
    return (*platforms, EVIDENCE_QUEUE, ANALYSIS_QUEUE, DEFAULT_QUEUE)
