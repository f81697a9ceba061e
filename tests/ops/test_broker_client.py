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


def _deliver(channel: Any, queue: str, task: str) -> Any:
    """Publish one message for `task` on `queue` and take it as a consumer that acknowledges
    late (kombu's basic_get without no_ack, as Celery's `acks_late`)."""
    from kombu import Exchange, Producer, Queue

    bound = Queue(queue, Exchange(queue), routing_key=queue, channel=channel)
    bound.declare()
    bound.purge()
    Producer(channel).publish({"id": 1}, exchange=queue, routing_key=queue, headers={"task": task})
    message = bound.get(no_ack=False)
    assert message is not None
    return message


def _unacked_tags(channel: Any) -> set[str]:
    with channel.conn_or_acquire() as client:
        return {tag.decode() for tag in client.hkeys(channel.unacked_key)}


def test_a_step_message_leaves_no_copy_in_the_broker_and_is_acknowledged_in_memory() -> None:
    with app.connection_for_write() as conn:
        channel: Any = conn.channel()
        step = _deliver(channel, "test.broker.steps", "pipeline.execute_step")
        assert step.delivery_tag not in _unacked_tags(channel)  # the lease owns redelivery
        step.ack()
        assert step.delivery_tag not in channel.qos._untracked
        channel.close()


def test_any_other_message_keeps_the_brokers_copy_until_it_is_acknowledged() -> None:
    with app.connection_for_write() as conn:
        channel: Any = conn.channel()
        event = _deliver(channel, "test.broker.events", "pipeline.run_finished")
        assert event.delivery_tag in _unacked_tags(channel)
        event.ack()
        assert event.delivery_tag not in _unacked_tags(channel)
        channel.close()


def test_a_step_message_held_at_shutdown_is_put_back_on_its_queue() -> None:
    with app.connection_for_write() as conn:
        channel: Any = conn.channel()
        _deliver(channel, "test.broker.shutdown", "pipeline.execute_step")
        channel.qos.restore_unacked()
        with channel.conn_or_acquire() as client:
            assert client.llen("test.broker.shutdown") == 1
            client.delete("test.broker.shutdown")
        channel.close()


def test_a_rejected_step_message_asked_back_goes_back_on_its_queue() -> None:
    with app.connection_for_write() as conn:
        channel: Any = conn.channel()
        step = _deliver(channel, "test.broker.rejected", "pipeline.execute_step")
        step.reject(requeue=True)
        with channel.conn_or_acquire() as client:
            assert client.llen("test.broker.rejected") == 1
            client.delete("test.broker.rejected")
        assert not channel.qos._untracked
        channel.close()
