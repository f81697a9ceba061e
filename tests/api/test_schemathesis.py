"""schemathesis over the whole API, every check, as each role of the two-tenant world: no
5xx, and no answer (status, content type, headers, body) the schema does not describe.

In process (the WSGI application, the test's database connection and the shared world's
transaction), bounded: a few examples per operation and no deadline, so the whole module
stays well under two minutes on two cores. The examples are derandomized: CI reruns the
same cases, and a failure names the case to replay.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from api.auth import new_token
from tests.api.conftest import clear_throttle_counts
from tests.world import World

pytestmark = pytest.mark.django_db

ROLES = ("operator", "analyst", "finance")
TURNS = itertools.cycle(ROLES)

# A request the schema allows may still be refused for what it says: a tenant that is not the
# caller's, a campaign whose plan has problems, a statement that is not UTF-8 CSV (400), funds
# short (402). Every other check keeps schemathesis's own expectations.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "3xx", 400, 401, 402, 403, 404, 409, 429]
            }
        }
    }
)
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler(), config=CONFIG)


@pytest.fixture(scope="module")
def in_the_test_transaction() -> Iterator[None]:
    """The WSGI handler closes "old" connections around each request, which would end the
    world's transaction; Django's test client does the same as this."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def role_tokens(two_tenants: World, in_the_test_transaction: None) -> dict[str, str]:
    alpha, _ = two_tenants
    return {role: new_token(user=alpha.users[role]) for role in ROLES}


@schema.parametrize()
@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_as_its_schema_says_for_every_role(
    case: Any, role_tokens: dict[str, str]
) -> None:
    # The roles take turns, case by case: each operation is tried as every role over its
    # cases, in a third of the time of every case as every role.
    role = next(TURNS)
    clear_throttle_counts()
    case.call_and_validate(headers={"Authorization": f"Bearer {role_tokens[role]}"})
