"""The console tests' worlds: the two-tenant world (tests/world.py), shared by a module's
tests, and the simulator and local file storage of the evidence tests for tests that collect
runs of their own."""

from __future__ import annotations

from tests import world
from tests.evidence import conftest as evidence_fixtures

simulator = evidence_fixtures.simulator
local_storage = evidence_fixtures.local_storage
two_tenants = world.two_tenants
