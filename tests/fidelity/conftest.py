"""One simulator per test module, reset and scripted per scenario (tests/fidelity/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connectors.simulator import SimulatorHandle, start_simulator


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    handle = start_simulator(seed=17)
    yield handle
    handle.stop()
