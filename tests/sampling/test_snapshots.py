"""A run's frozen JSON read into `RunConfig` / `Quote` and written back unchanged."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pipeline.launch import launch_run
from sampling.models import Run
from sampling.services import save_campaign
from sampling.snapshots import (
    EntitySnapshot,
    ProviderQuote,
    Quote,
    QuoteLine,
    RunConfig,
    SnapshotError,
)
from tests.conftest import make_campaign_data, spec_with_tenant

TARGETS = [
    {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "deep_thinking"},
]

# Both written by the code before these types (sampling.services._config_snapshot and
# billing.services.quote_groups + pipeline.launch's provider quotes), key for key.
CONFIG_AS_WRITTEN = {
    "snapshot_version": 1,
    "tenant": "acme",
    "campaign_id": 7,
    "campaign_name": "plan",
    "brand": {"name": "Acme", "aliases": ["ACME Corp"], "domains": ["acme.com"]},
    "competitors": [{"name": "Globex", "aliases": [], "domains": ["globex.com"]}],
    "questions": [
        {"revision_id": 11, "question_id": 3, "revision_no": 2, "text": "Which vendor is best?"}
    ],
    "targets": [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
    "models": {"openai": "gpt-test", "ollama": None},
    "repeats": 2,
    "screenshot_policy": "none",
    "priority": 5,
    "submission_limits": {"openai": 100},
    "duplicates_dropped": [{"row": 4, "duplicate_of": 1, "text": "Which vendor is best?"}],
}
QUOTE_AS_WRITTEN = {
    "quote_version": 1,
    "price_version": "default-2026-01",
    "price_version_id": 1,
    "currency": "USD",
    "unit_prices": {"openai": {"base": 5, "deep_thinking": 3, "screenshot": 10}},
    "screenshot_policy": "none",
    "lines": [
        {
            "target": "openai|desktop|us|deep_thinking",
            "platform": "openai",
            "deep_thinking": True,
            "screenshot": False,
            "samples": 2,
            "unit_price": 8,
            "amount": 16,
        }
    ],
    "samples": 2,
    "estimated_max": 16,
    "rules": "each sample's unit_price is held at launch; ...",
    "provider_quotes": {
        "collector": {"quote_id": "q-1", "currency": "USD", "total": 80, "tasks": 2},
        "other": {"unavailable": "timeout: no answer"},
    },
}


def _launched(**options: Any) -> Run:
    data = make_campaign_data(questions=2, targets=TARGETS, repeats=1)
    data["competitors"] = [{"name": "Globex", "domains": ["globex.com"]}]
    campaign = save_campaign(spec=spec_with_tenant(data, funded=True))
    run = launch_run(campaign=campaign, **options)
    return Run.objects.get(pk=run.pk)  # the JSON as stored, not the writer's objects


def test_a_snapshot_as_written_before_the_types_reads_and_writes_back_unchanged() -> None:
    config = RunConfig.from_json(copy.deepcopy(CONFIG_AS_WRITTEN))
    quote = Quote.from_json(copy.deepcopy(QUOTE_AS_WRITTEN))

    assert config.to_json() == CONFIG_AS_WRITTEN
    assert quote.to_json() == QUOTE_AS_WRITTEN
    assert (config.brand.domains, config.model_for("ollama"), config.model_for("gemini")) == (
        ("acme.com",),
        None,
        None,
    )
    assert quote.line_for("openai|desktop|us|deep_thinking") == QuoteLine(
        target="openai|desktop|us|deep_thinking",
        platform="openai",
        deep_thinking=True,
        screenshot=False,
        samples=2,
        unit_price=8,
        amount=16,
    )
    assert quote.provider_quotes is not None
    assert quote.provider_quotes["other"].unavailable == "timeout: no answer"


@pytest.mark.django_db
def test_snapshots_a_launch_writes_keep_the_shape_and_round_trip() -> None:
    provider = ProviderQuote(quote_id="q-9", currency="USD", total=40, tasks=2)
    run = _launched(provider_quotes={"collector": provider})

    config, quote = RunConfig.of(run), Quote.of(run)

    assert quote is not None
    assert config.to_json() == run.config_snapshot
    assert quote.to_json() == run.quote_snapshot
    assert set(run.config_snapshot) == set(CONFIG_AS_WRITTEN)
    assert set(run.quote_snapshot) == set(QUOTE_AS_WRITTEN)
    assert config.questions is not None and len(config.questions) == 2
    assert [c.name for c in config.competitors] == ["Globex"]
    assert quote.provider_quotes == {"collector": provider}
    assert quote.holds_money and quote.estimated_max == sum(line.amount for line in quote.lines)


@pytest.mark.django_db
def test_a_launch_without_provider_quotes_stores_no_provider_key() -> None:
    run = _launched(provider_quotes={})

    quote = Quote.of(run)

    assert quote is not None and quote.provider_quotes is None
    assert "provider_quotes" not in run.quote_snapshot
    assert quote.to_json() == run.quote_snapshot


def test_an_old_snapshot_reads_with_the_defaults_its_readers_assumed() -> None:
    # What runs launched before models, limits and duplicates were frozen hold (and what the
    # bench's status fixture wrote): the tenant, the brand and the competitors.
    old = {"tenant": "acme", "brand": {"name": "Acme"}, "competitors": [{"name": "Globex"}]}

    config = RunConfig.from_json(old)

    assert config.brand == EntitySnapshot(name="Acme")
    assert config.entity_names == ["Acme", "Globex"]
    assert config.model_for("openai") is None  # the connector's configured model
    assert not config.wants_screenshots  # billing's reading: no screenshot component
    assert (config.repeats, config.priority, config.campaign_name) == (1, 0, "")
    assert config.questions is None and config.targets == ()


def test_a_snapshot_read_without_its_questions_keeps_them_out_when_written() -> None:
    # pipeline/execution.py's frozen run: the snapshot minus its question list.
    without = {k: v for k, v in CONFIG_AS_WRITTEN.items() if k != "questions"}

    config = RunConfig.from_json(without)

    assert config.questions is None
    assert config.to_json() == without


def test_an_old_quote_without_currency_holds_nothing() -> None:
    quote = Quote.from_json({"lines": [], "estimated_max": None})

    assert (quote.currency, quote.estimated_max, quote.holds_money) == ("", 0, False)
    assert quote.provider_quotes is None


def test_a_snapshot_without_a_tenant_or_brand_is_refused() -> None:
    with pytest.raises(SnapshotError, match="tenant"):
        RunConfig.from_json({"brand": {"name": "Acme"}})
    with pytest.raises(SnapshotError, match="brand"):
        RunConfig.from_json({"tenant": "acme"})


def test_a_value_of_the_wrong_type_is_refused_with_where_it_is() -> None:
    broken = {**CONFIG_AS_WRITTEN, "submission_limits": {"openai": "100"}}

    with pytest.raises(SnapshotError, match=r"limits\.openai"):
        RunConfig.from_json(broken)


@pytest.mark.django_db
def test_a_run_without_a_quote_has_none() -> None:
    run = _launched(provider_quotes={})
    for empty in (None, {}):
        run.quote_snapshot = empty
        assert Quote.of(run) is None


@pytest.mark.django_db
def test_the_parse_is_reused_until_the_snapshot_is_replaced() -> None:
    run = _launched(provider_quotes={})
    first = RunConfig.of(run)

    assert RunConfig.of(run) is first  # a step reads it for every sample of the run
    run.config_snapshot = {**run.config_snapshot, "repeats": 9}
    assert RunConfig.of(run).repeats == 9
    assert RunConfig.of(Run.objects.get(pk=run.pk)).repeats == 1  # read again: parsed again
