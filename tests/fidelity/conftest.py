"""One simulator per test module, reset and scripted per scenario (tests/fidelity/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from simulator import SimulatorHandle, start_simulator


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    handle = start_simulator(seed=17)
    yield handle
    handle.stop()


SDK_WARNINGS = ("UserWarning", "DeprecationWarning", "RuntimeWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A warning from an SDK (an unknown event, a deprecated field) is a disagreement too."""
    for item in items:
        if "tests/fidelity/" in str(item.path).replace("\\", "/"):
            for category in SDK_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(f"error::{category}"))
