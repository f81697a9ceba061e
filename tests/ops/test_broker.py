"""The embedded broker (geo_collect/broker.py): a reader never sees a half-written message,
one message goes to exactly one consumer, and an undecodable file is set aside instead of
killing the worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection

from geo_collect.broker import ALIAS


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for sub in ("out", "control"):
        (tmp_path / sub).mkdir()
    return tmp_path


@pytest.fixture
def connect(folder: Path) -> Iterator[object]:
    opened: list[Connection] = []

    def make() -> Connection:
        conn = Connection(
            f"{ALIAS}://localhost",
            transport_options={
                "data_folder_in": str(folder / "out"),
                "data_folder_out": str(folder / "out"),
                "control_folder": str(folder / "control"),
            },
        )
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.release()


def test_a_message_being_written_is_invisible_until_complete(folder: Path, connect) -> None:  # type: ignore[no-untyped-def]
    queue = connect().SimpleQueue("q1")
    (folder / "tmp").mkdir(exist_ok=True)
    (folder / "tmp" / "1_x.q1.msg").write_bytes(b'{"body": "half')  # a writer mid-write
    queue.put({"n": 1})
    assert queue.get(timeout=3).payload == {"n": 1}
    with pytest.raises(queue.Empty):
        queue.get(timeout=0.2)
    assert not list((folder / "out").iterdir())


def test_an_undecodable_message_is_set_aside_and_the_next_one_delivered(folder, connect) -> None:  # type: ignore[no-untyped-def]
    queue = connect().SimpleQueue("q2")
    (folder / "out" / "0_broken.q2.msg").write_bytes(b"")  # e.g. left by kombu's own transport
    queue.put({"n": 2})
    assert queue.get(timeout=3).payload == {"n": 2}
    assert [p.name for p in (folder / "bad").iterdir()] == ["0_broken.q2.msg"]


def test_each_message_reaches_exactly_one_of_several_consumers(connect) -> None:  # type: ignore[no-untyped-def]
    producer = connect().SimpleQueue("q3")
    for n in range(200):
        producer.put({"n": n})
    received: list[int] = []
    lock = threading.Lock()

    def consume() -> None:
        queue = connect().SimpleQueue("q3")
        while True:
            try:
                message = queue.get(timeout=3)
            except queue.Empty:
                return
            message.ack()
            with lock:
                received.append(message.payload["n"])

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(received) == list(range(200))
