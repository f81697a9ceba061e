"""The simulator itself: determinism, control API over HTTP, screenshots."""

from __future__ import annotations

import requests

from simulator import SimulatorHandle, start_simulator
from simulator.png import png_size, screenshot_png


def _ask(base_url: str, question: str) -> dict:
    response = requests.post(
        f"{base_url}/openai/v1/responses",
        json={"model": "m", "input": question, "tools": [{"type": "web_search"}]},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    return response.json()


def test_same_seed_same_answers_and_retries_get_new_draws() -> None:
    with start_simulator(seed=11) as one, start_simulator(seed=11) as two:
        first = [_ask(one.base_url, "q")["output"][-1]["content"][0]["text"] for _ in range(3)]
        second = [_ask(two.base_url, "q")["output"][-1]["content"][0]["text"] for _ in range(3)]
    assert first == second
    assert len(set(first)) > 1  # call 2 of a question is a different draw from call 1


def test_control_api_over_http(simulator: SimulatorHandle) -> None:
    base = simulator.base_url
    assert requests.get(f"{base}/_sim/health", timeout=5).json() == {"ok": True}
    config = {"seed": 5, "profile": {"rates": {"server_error": 1.0}}}
    assert requests.post(f"{base}/_sim/config", json=config, timeout=5).ok
    response = requests.post(
        f"{base}/openai/v1/responses",
        json={"model": "m", "input": "x"},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    assert response.status_code == 500

    script = {"faults": [{"match": "x", "fault": "rate_limit", "times": 1}]}
    assert requests.post(f"{base}/_sim/script", json=script, timeout=5).json()["scripts"] == 1
    stats = requests.get(f"{base}/_sim/stats", timeout=5).json()
    assert stats["platforms"]["openai"]["paths"] == {"POST /v1/responses": 1}

    bad = requests.post(f"{base}/_sim/script", json={"faults": [{"fault": "nope"}]}, timeout=5)
    assert bad.status_code == 400
    assert requests.post(f"{base}/_sim/reset", timeout=5).ok
    assert requests.get(f"{base}/_sim/stats", timeout=5).json()["platforms"] == {}


def test_unknown_platform_is_404(simulator: SimulatorHandle) -> None:
    assert requests.get(f"{simulator.base_url}/nowhere/v1/x", timeout=5).status_code == 404


def test_screenshots_are_valid_pngs_at_device_sizes() -> None:
    assert png_size(screenshot_png("mobile")) == (390, 844)
    assert png_size(screenshot_png("desktop")) == (1280, 800)
