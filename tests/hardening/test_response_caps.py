"""Hostile upstream bodies: an endless stream and a gzip bomb, from a real local server.

The connector must stop at the configured decoded-size cap, keep the prefix, end the answer
as interrupted (`truncated` with the reason) and hold only about the cap in memory. Memory is
measured with tracemalloc around the call (every Python allocation, all threads).
"""

from __future__ import annotations

import os
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from connectors.adapters.openai_chat import OpenAIChatConnector
from connectors.base import ConnectorConfig, SampleRequest, SubmitOutcome
from connectors.transport import BoundedDecoder
from tests.services import QuietHandler, loopback_server

CAP = 8 * 1024 * 1024
BOMB_DECODED = 256 * 1024 * 1024  # 32x the cap
FRAME = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"na" * 512 + b'"}}]}\n\n'


def _gzip_bomb() -> bytes:
    """A Chat Completions JSON body of BOMB_DECODED bytes, gzip-compressed (~250 KB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(b'{"id":"x","choices":[{"message":{"content":"')]
    block = b"a" * (1024 * 1024)
    parts += [packer.compress(block) for _ in range(BOMB_DECODED // len(block))]
    parts.append(packer.compress(b'"},"finish_reason":"stop"}]}') + packer.flush())
    return b"".join(parts)


class _Hostile(QuietHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes
    bomb = b""

    def do_POST(self) -> None:
        self.read_body()
        self.send_response(200)
        if self.path.startswith("/endless"):
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self._stream_forever()
        else:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(self.bomb)))
            self.end_headers()
            self.wfile.write(self.bomb)

    def _stream_forever(self) -> None:
        try:
            while True:
                self.wfile.write(FRAME)
        except OSError:
            return  # the client hung up: what a cap must make it do


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[str]:
    _Hostile.bomb = _gzip_bomb()
    with loopback_server(_Hostile) as url:
        yield url


def _connector(base_url: str, *, streaming: bool) -> OpenAIChatConnector:
    return OpenAIChatConnector(
        ConnectorConfig(
            platform="openai_chat",
            base_url=base_url,
            api_key="sk-hostile-test",
            model="gpt-test",
            timeout_seconds=10,
            extra={"chat_path": "/chat", "stream": streaming},
            max_response_bytes=CAP,
        )
    )


def _request() -> SampleRequest:
    return SampleRequest(
        sample_id=7,
        idempotency_key="hostile-1",
        question="Which CRM is best?",
        device="desktop",
        region="us",
        mode="no_search",
    )


def _measured(call: Callable[[], SubmitOutcome]) -> tuple[SubmitOutcome, int]:
    tracemalloc.start()
    try:
        outcome = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return outcome, peak


def _assert_interrupted_at_cap(outcome: SubmitOutcome, peak: int) -> None:
    result = outcome.result
    assert result is not None
    assert result.collection_state == "truncated"
    assert result.error is not None
    assert result.error["class"] == "truncated"
    assert f"over the {CAP}-byte cap" in result.error["message"]
    assert len(result.raw) == CAP  # the prefix is kept, exactly up to the cap
    # Bounded: a few copies of the capped body (bytes, its text, parsed frames), never the
    # whole decoded body (256 MiB for the bomb; unbounded for the stream).
    assert peak < 8 * CAP, f"peak {peak / 2**20:.1f} MiB"
    print(f"tracemalloc peak {peak / 2**20:.1f} MiB for a {CAP // 2**20} MiB cap")


def test_an_endless_stream_is_cut_at_the_cap(hostile_server: str) -> None:
    connector = _connector(f"{hostile_server}/endless", streaming=True)
    outcome, peak = _measured(lambda: connector.submit(_request()))
    _assert_interrupted_at_cap(outcome, peak)
    assert outcome.result is not None and outcome.result.raw.startswith(FRAME)


def test_a_gzip_bomb_is_inflated_only_up_to_the_cap(hostile_server: str) -> None:
    assert len(_Hostile.bomb) < BOMB_DECODED // 500  # it really is a bomb
    connector = _connector(f"{hostile_server}/bomb", streaming=False)
    outcome, peak = _measured(lambda: connector.submit(_request()))
    _assert_interrupted_at_cap(outcome, peak)
    assert outcome.result is not None and outcome.result.raw.startswith(b'{"id":"x"')


@pytest.mark.parametrize("encoding", ["gzip", "deflate", ""])
def test_the_bounded_decoder_never_returns_more_than_room(encoding: str) -> None:
    data = b"z" * 100_000
    packed: dict[str, Any] = {
        "gzip": lambda: zlib.compress(data, wbits=16 + zlib.MAX_WBITS),
        "deflate": lambda: zlib.compress(data),
        "": lambda: data,
    }
    decoded, over = BoundedDecoder(encoding).decode(packed[encoding](), room=1000)
    assert (len(decoded), over) == (1000, True)
    decoded, over = BoundedDecoder(encoding).decode(packed[encoding](), room=100_000)
    assert (decoded, over) == (data, False)


SAMPLE_CAP = 2 * 1024 * 1024


@pytest.mark.django_db
def test_a_sample_fed_an_endless_stream_ends_with_the_reason(
    hostile_server: str, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The worker's own code path (claim, submit, archive, retry) in this process: every
    attempt stops at the cap, and the sample fails for good saying why."""
    from geo_collect.settings import platform_settings
    from sampling.models import Attempt, Sample
    from tests.conftest import launch_funded, make_campaign_data
    from tests.inprocess import drive_in_process

    monkeypatch.setenv("GEO_OPENAI_CHAT_BASE_URL", f"{hostile_server}/endless")
    monkeypatch.setenv("GEO_OPENAI_CHAT_EXTRA", '{"chat_path": "/chat"}')
    monkeypatch.setenv("GEO_OPENAI_CHAT_MAX_RESPONSE_BYTES", str(SAMPLE_CAP))
    settings.GEO_PLATFORMS = platform_settings(os.environ)  # as settings.py reads them
    settings.GEO_MAX_SUBMIT_ATTEMPTS = 2
    target = {"platform": "openai_chat", "device": "desktop", "region": "us", "mode": "web_search"}
    data = make_campaign_data(questions=1, targets=[target], repeats=1)
    data["screenshot_policy"] = "none"
    run = launch_funded(data)

    tracemalloc.start()
    try:
        drive_in_process(run.pk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    sample = Sample.objects.get(run=run)
    assert sample.collection_state == "failed"
    assert sample.failure_reason.startswith("truncated: stream cut: response body over the")
    attempts = Attempt.objects.filter(sample=sample)
    assert attempts.count() >= 1
    assert all("-byte cap" in a.error_message for a in attempts)
    assert peak < 12 * SAMPLE_CAP, f"peak {peak / 2**20:.1f} MiB"
    print(f"sample run: tracemalloc peak {peak / 2**20:.1f} MiB, cap {SAMPLE_CAP // 2**20} MiB")


@pytest.mark.django_db
def test_each_retry_of_a_gzip_bomb_stores_the_capped_body_once(
    hostile_server: str, monkeypatch: pytest.MonkeyPatch, settings: Any, tmp_path: Any
) -> None:
    """Every attempt reads the same first SAMPLE_CAP bytes; the evidence store keeps them once
    and each later revision names the one that holds them (issue 28, point 8)."""
    from evidence.models import Capture, EvidenceObject
    from evidence.services import RAW_SAME_AS_REVISION
    from geo_collect.settings import platform_settings
    from sampling.models import Sample
    from tests.conftest import launch_funded, make_campaign_data
    from tests.inprocess import drive_in_process

    media = tmp_path / "media"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(media)},
        },
    }
    monkeypatch.setenv("GEO_OPENAI_CHAT_BASE_URL", f"{hostile_server}/bomb")
    monkeypatch.setenv("GEO_OPENAI_CHAT_EXTRA", '{"chat_path": "/chat", "stream": false}')
    monkeypatch.setenv("GEO_OPENAI_CHAT_MAX_RESPONSE_BYTES", str(SAMPLE_CAP))
    settings.GEO_PLATFORMS = platform_settings(os.environ)
    settings.GEO_MAX_SUBMIT_ATTEMPTS = 3
    target = {"platform": "openai_chat", "device": "desktop", "region": "us", "mode": "web_search"}
    data = make_campaign_data(questions=1, targets=[target], repeats=1)
    data["screenshot_policy"] = "none"
    drive_in_process(launch_funded(data).pk)

    sample = Sample.objects.get()
    assert sample.collection_state == "failed"
    captures = list(Capture.objects.filter(sample=sample).order_by("revision"))
    assert len(captures) == 3  # one per attempt, each a revision
    raws = EvidenceObject.objects.filter(capture__sample=sample, kind="raw")
    assert [(o.revision, o.size) for o in raws] == [(captures[0].revision, SAMPLE_CAP)]
    for later in captures[1:]:
        assert f"{RAW_SAME_AS_REVISION}{captures[0].revision}" in later.warnings
    stored = [p for p in media.rglob("*") if p.is_file() and p.stat().st_size >= SAMPLE_CAP]
    assert len(stored) == 1, stored
