"""Two tenants with collected runs and one user per role (tests/world.py), and
API clients that authenticate with a token, as an integration would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache
from rest_framework.test import APIClient

from api.auth import new_token
from tests import world
from tests.evidence import conftest as evidence_fixtures
from tests.world import TenantWorld

simulator = evidence_fixtures.simulator
local_storage = evidence_fixtures.local_storage
two_tenants = world.two_tenants
moto_endpoint = evidence_fixtures.moto_endpoint
bucket = evidence_fixtures.bucket
s3_default_storage = evidence_fixtures.s3_default_storage


@pytest.fixture(autouse=True)
def fresh_throttle_counts() -> None:
    clear_throttle_counts()


def clear_throttle_counts() -> None:
    """The throttle's windows only: with Redis the cache shares its database with the broker,
    which a flush would empty under a running worker."""
    if isinstance(cache, RedisCache):
        client = cache._cache.get_client()
        for key in client.scan_iter(match="*:throttle_*"):
            client.delete(key)
    else:
        cache.clear()


def token_client(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {new_token(user=user)}")
    return client


@pytest.fixture
def client_for(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> Callable[[str, int], APIClient]:
    """client_for("operator") -> a token client of tenant alpha's operator; index 1: bravo."""

    def make(role: str, world: int = 0) -> APIClient:
        return token_client(two_tenants[world].users[role])

    return make
