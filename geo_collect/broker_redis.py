"""kombu's Redis transport, with one client for a channel's synchronous calls.

kombu builds a new `redis.Redis` for every synchronous call of a channel (`conn_or_acquire`
without a client): each acknowledgement, and the bookkeeping of every delivered message in the
`unacked` hash. A `redis.Redis` is cheap to use and dear to build (its table of response
callbacks): building them was about 7 % of a worker's CPU per collected sample (py-spy,
docs/capacity.md). redis-py's client is safe to share between threads (each command takes a
connection from the pool, and each `pipeline()` is a new object), so a channel keeps one per
connection pool and hands it out. The messages, their acknowledgement and the visibility
timeout are kombu's own, unchanged.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis


class Channel(redis.Channel):
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
