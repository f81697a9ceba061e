"""The rule kinds on counts alone (alerts/rules.py): what fires, what does not, and when an
open condition still holds."""

from __future__ import annotations

from alerts.rules import ALL, Counts, RunFigures, evaluate, still_holds


def figures(run: str, rates: dict[str, tuple[int, int]], **fields: object) -> RunFigures:
    """Brand counts per platform (mentioned, valid); ALL is their sum."""
    counts = [
        Counts(p, "Brand", True, planned=n, valid=n, mentioned=m) for p, (m, n) in rates.items()
    ]
    m_all = sum(m for m, _ in rates.values())
    n_all = sum(n for _, n in rates.values())
    counts.append(Counts(ALL, "Brand", True, planned=n_all, valid=n_all, mentioned=m_all))
    return RunFigures(run_id=run, counts=counts, **fields)  # type: ignore[arg-type]


def test_a_large_visibility_drop_fires_with_its_figures() -> None:
    before = figures("r1", {"openai": (40, 50), "gemini": (40, 50)})
    after = figures("r2", {"openai": (10, 50), "gemini": (41, 50)})
    found = evaluate("visibility_drop", {}, after, [before])
    keys = {f.condition_key for f in found}
    assert "visibility_drop:openai" in keys and "visibility_drop:gemini" not in keys
    openai = next(f for f in found if f.condition_key == "visibility_drop:openai")
    d = openai.details
    assert (d["before"]["hits"], d["before"]["n"]) == (40, 50)
    assert (d["after"]["hits"], d["after"]["n"]) == (10, 50)
    assert d["before"]["low"] < 0.8 < d["before"]["high"]
    assert d["q_value"] >= d["p_value"] and d["q_value"] < 0.05
    assert d["direction"] == "down" and round(d["effect"], 2) == -0.6


def test_sampling_noise_at_small_n_does_not_fire() -> None:
    # 40 % -> 20 % on 10 answers: a change that small n produces by chance alone.
    before = figures("r1", {"openai": (4, 10)})
    after = figures("r2", {"openai": (2, 10)})
    assert evaluate("visibility_drop", {}, after, [before]) == []


def test_a_rise_never_fires_a_drop_rule() -> None:
    before = figures("r1", {"openai": (10, 50)})
    after = figures("r2", {"openai": (45, 50)})
    assert evaluate("visibility_drop", {}, after, [before]) == []


def test_without_a_comparable_run_the_trend_rules_find_nothing() -> None:
    assert evaluate("visibility_drop", {}, figures("r1", {"openai": (0, 50)}), []) == []


def test_the_baseline_pools_the_history_it_is_given() -> None:
    history = [figures(f"h{i}", {"openai": (35, 50)}) for i in range(7)]
    after = figures("r8", {"openai": (20, 50)})
    found = evaluate("visibility_drop", {}, after, history)
    assert found and found[0].details["before"]["n"] == 350
    assert found[0].details["before"]["runs"] == [f"h{i}" for i in range(7)]


def test_an_open_drop_holds_while_low_and_not_once_recovered() -> None:
    before = figures("r1", {"openai": (40, 50)})
    low = figures("r2", {"openai": (10, 50)})
    (found,) = [
        f for f in evaluate("visibility_drop", {}, low, [before]) if "openai" in f.condition_key
    ]
    again_low = figures("r3", {"openai": (11, 50)})
    recovered = figures("r4", {"openai": (39, 50)})
    kwargs = {"condition_key": found.condition_key, "details": found.details}
    assert still_holds("visibility_drop", {}, latest=again_low, **kwargs)  # type: ignore[arg-type]
    assert not still_holds("visibility_drop", {}, latest=recovered, **kwargs)  # type: ignore[arg-type]


def test_a_competitor_named_far_more_often_than_the_brand_is_ahead() -> None:
    counts = [
        Counts("openai", "Brand", True, valid=60, mentioned=10),
        Counts("openai", "Rival", False, valid=60, mentioned=45),
        Counts("openai", "Other", False, valid=60, mentioned=12),
        Counts(ALL, "Brand", True, valid=60, mentioned=10),
        Counts(ALL, "Rival", False, valid=60, mentioned=45),
        Counts(ALL, "Other", False, valid=60, mentioned=12),
    ]
    found = evaluate("competitor_ahead", {}, RunFigures("r1", counts), [])
    # one platform: its cell is the overall one, not tested twice
    assert {f.condition_key for f in found} == {"competitor_ahead:openai:Rival"}


def test_a_platform_far_below_the_others_is_a_gap() -> None:
    latest = figures("r1", {"openai": (5, 60), "gemini": (45, 60), "perplexity": (44, 60)})
    found = evaluate("platform_gap", {}, latest, [])
    assert [f.condition_key for f in found] == ["platform_gap:openai"]


def test_negative_sentiment_rise_and_citation_drop() -> None:
    def run(name: str, negative: int, own: int) -> RunFigures:
        fields = {"valid": 80, "mentioned": 80, "negative": negative, "citations": 100}
        rows = [Counts(p, "B", True, own_citations=own, **fields) for p in ("openai", ALL)]
        return RunFigures(name, rows)

    assert evaluate("negative_sentiment", {}, run("b", 5, 50), [run("a", 30, 50)]) == []
    assert evaluate("negative_sentiment", {}, run("b", 40, 50), [run("a", 5, 50)])
    assert evaluate("citation_drop", {}, run("b", 5, 10), [run("a", 5, 60)])


def test_a_failed_or_partly_failed_run() -> None:
    assert (
        evaluate(
            "run_failed", {}, RunFigures("r", planned=10, failed=0, outcome="all_succeeded"), []
        )
        == []
    )
    (partly,) = evaluate(
        "run_failed", {}, RunFigures("r", planned=10, failed=3, outcome="partially_succeeded"), []
    )
    assert partly.summary.startswith("run partly failed")
    tolerant = {"max_failed_share": 0.5}
    assert (
        evaluate(
            "run_failed",
            tolerant,
            RunFigures("r", planned=10, failed=3, outcome="partially_succeeded"),
            [],
        )
        == []
    )
    assert evaluate(
        "run_failed", tolerant, RunFigures("r", planned=10, failed=10, outcome="all_failed"), []
    )


def test_evidence_missing_fires_only_when_its_interval_is_above_the_threshold() -> None:
    # 2 of 10 missing: 20 %, but the interval reaches far below 10 %.
    assert (
        evaluate("evidence_missing", {}, RunFigures("r", evidence_n=10, evidence_missing=2), [])
        == []
    )
    assert evaluate(
        "evidence_missing", {}, RunFigures("r", evidence_n=200, evidence_missing=60), []
    )
