"""The worker's broker channel builds one Redis client for its synchronous calls
(geo_collect/broker_redis.py), not one per acknowledgement; over a real Redis."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from geo_collect.broker_redis import Channel, Transport
from geo_collect.celery import app


def test_the_app_uses_the_transport_that_shares_a_client_when_redis_is_the_broker() -> None:
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, Transport)


def test_a_channel_hands_out_one_client_for_its_synchronous_calls_until_its_pool_changes() -> None:
    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel
        assert isinstance(channel, Channel)
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            assert first.ping()
        with channel.QoS(channel, 1).pipe_or_acquire() as pipe:  # kombu's ack path
            assert pipe.ping().execute() == [True]
        _forget_pool(channel)  # as after a reconnection: a new pool, so a new client
        with channel.conn_or_acquire() as third:
            assert third is not first
            assert third.connection_pool is channel.pool


def _forget_pool(channel: Any) -> None:
    channel._pool = None
