"""kombu's Redis transport, with one client for a channel's synchronous calls, and no broker
copy of a step message.

kombu builds a new `redis.Redis` for every synchronous call of a channel (`conn_or_acquire`
without a client): each acknowledgement, and the bookkeeping of every delivered message in the
`unacked` hash. A `redis.Redis` is cheap to use and dear to build (its table of response
callbacks): building them was about 7 % of a worker's CPU per collected sample (py-spy,
docs/capacity.md). redis-py's client is safe to share between threads (each command takes a
connection from the pool, and each `pipeline()` is a new object), so a channel keeps one per
connection pool and hands it out.

A step message (`STEP_TASKS`: a sample id and a claim's token) is not copied into the
`unacked` hash when it is delivered, nor removed from it when acknowledged: two round trips to
Redis per sample for a redelivery the sample's lease already provides. The lease lives in
PostgreSQL; a worker that dies holding it lets it lapse, the dispatcher's sweep makes the
sample claimable again, and a new claim sends a new message under a new token
(docs/decisions.md, "No broker copy of a step message"). A step message a worker holds when it
shuts down cleanly, or rejects with requeue, is put back from memory, as kombu does from the
hash. Every other message (outbox events, webhooks, upstream cancellations) keeps kombu's
acknowledgement and visibility timeout unchanged.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis, virtual

# The messages whose redelivery the sample's lease provides (pipeline/tasks.py).
STEP_TASKS = frozenset(
    {"pipeline.execute_step", "pipeline.execute_steps", "pipeline.execute_submit_batch"}
)


def _is_step_message(message: Any) -> bool:
    headers = message.headers or {}
    return headers.get("task") in STEP_TASKS


class QoS(redis.QoS):
    """kombu's ack emulation for every message but a step message, which is tracked in this
    process only. Acknowledgements come from the pool's threads: set operations on `_untracked`
    are atomic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._untracked: set[str] = set()

    def append(self, message: Any, delivery_tag: str) -> None:
        if _is_step_message(message):
            self._untracked.add(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
            return
        super().append(message, delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        if delivery_tag in self._untracked:
            self._untracked.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
            return
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if delivery_tag in self._untracked:
            if requeue:
                delivered: Any = self._delivered
                self._put_back([delivered[delivery_tag]], leftmost=True)
            self._untracked.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
            return
        super().reject(delivery_tag, requeue=requeue)

    def restore_unacked(self, client: Any = None) -> None:
        """At shutdown: the step messages held from memory, the others from the hash."""
        qos: Any = self  # kombu's types leave out its internals
        qos._flush()
        delivered = qos._delivered
        held = [delivered.pop(tag) for tag in list(self._untracked) if tag in delivered]
        self._untracked.clear()
        if held:
            self._put_back(held, client=client)
        super().restore_unacked(client)

    def _put_back(self, messages: list[Any], *, leftmost: bool = False, client: Any = None) -> None:
        channel: Any = self.channel
        with channel.conn_or_acquire(client) as connected:
            pipe = connected.pipeline()
            for message in messages:
                info = message.delivery_info
                channel._do_restore_message(
                    message._raw, info["exchange"], info["routing_key"], pipe, leftmost
                )
            pipe.execute()


class Channel(redis.Channel):
    QoS = QoS
    _shared: tuple[Any, Any] | None = None  # (the pool, its client)

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool
        shared = self._shared
        if shared is None or shared[0] is not pool:  # a new pool after a reconnection
            shared = self._shared = (pool, super()._create_client())  # type: ignore[misc]
        return shared[1]


class Transport(redis.Transport):
    Channel = Channel
