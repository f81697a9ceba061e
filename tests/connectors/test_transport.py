"""Egress alternation through a real local forward proxy, and send-phase classification."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from connectors.adapters.openai_responses import OpenAIResponsesConnector
from connectors.base import ConnectorConfig, ErrorClass, UpstreamError
from connectors.transport import HttpTransport, choose_egress, egress_label, header_safe
from simulator import SimulatorHandle
from tests.services import QuietHandler, loopback_server

from .contract import sample

Factory = Callable[..., OpenAIResponsesConnector]


class _ForwardProxy(QuietHandler):
    """A plain-HTTP forward proxy: reads the absolute-URI request, replays it upstream."""

    protocol_version = "HTTP/1.1"
    forwarded: list[str]

    def do_POST(self) -> None:
        self._forward()

    def do_GET(self) -> None:
        self._forward()

    def _forward(self) -> None:
        target = urlsplit(self.path)
        self.forwarded.append(f"{self.command} {target.path}")
        body = self.read_body()
        upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        skip = {"proxy-connection", "connection", "keep-alive"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        upstream.request(self.command, target.path or "/", body=body or None, headers=headers)
        response = upstream.getresponse()
        payload = response.read()  # de-chunks; the proxy re-sends with a length
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in {"transfer-encoding", "content-length", "connection"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        upstream.close()


@pytest.fixture
def forward_proxy() -> Iterator[tuple[str, list[str]]]:
    forwarded: list[str] = []
    handler = type("Proxy", (_ForwardProxy,), {"forwarded": forwarded})
    with loopback_server(handler) as url:
        yield url, forwarded


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_choose_egress_alternates_by_attempt() -> None:
    paths = (None, "http://proxy:3128")
    assert [choose_egress(paths, n) for n in (1, 2, 3, 4)] == [None, paths[1], None, paths[1]]
    assert choose_egress((None,), 5) is None


def test_egress_label_hides_proxy_credentials() -> None:
    assert egress_label(None) == "direct"
    assert egress_label("http://user:pw@proxy.internal:3128") == "http://proxy.internal:3128"


def test_retries_alternate_direct_and_proxy(
    simulator: SimulatorHandle,
    openai_connector: Factory,
    forward_proxy: tuple[str, list[str]],
) -> None:
    proxy_url, forwarded = forward_proxy
    connector = openai_connector(egress_proxies=(None, proxy_url))

    first = connector.submit(sample("egress test"), attempt_no=1)
    assert first.egress == "direct"
    assert forwarded == []

    second = connector.submit(sample("egress test"), attempt_no=2)
    assert second.egress == proxy_url
    assert forwarded == ["POST /openai/v1/responses"]
    assert second.result is not None and second.result.collection_state == "completed"
    assert simulator.stats()["platforms"]["openai"]["requests"] == 2


def test_connection_refused_before_sending_is_unreachable() -> None:
    config = ConnectorConfig(
        platform="openai",
        base_url=f"http://127.0.0.1:{_closed_port()}/openai",
        api_key="sk-never-leak-this",
    )
    with pytest.raises(UpstreamError) as caught:
        OpenAIResponsesConnector(config).submit(sample("anyone there?"))
    error = caught.value
    assert error.error_class is ErrorClass.UNREACHABLE
    assert error.message.startswith("not sent")
    assert "sk-never-leak-this" not in str(error)


def test_an_unreachable_proxy_is_unreachable_and_records_its_egress(
    simulator: SimulatorHandle,
) -> None:
    proxy = f"http://127.0.0.1:{_closed_port()}"
    config = ConnectorConfig(
        platform="openai", base_url=simulator.url("openai"), api_key="k", egress_proxies=(proxy,)
    )
    with pytest.raises(UpstreamError) as caught:
        HttpTransport(config).request("POST", "/v1/responses", json_body={})
    assert caught.value.error_class is ErrorClass.UNREACHABLE
    assert caught.value.egress == proxy


def test_api_key_never_appears_in_errors_or_raw(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    secret = "sk-test-secret-123"
    simulator.script({"match": "leak", "fault": "server_error"})
    with pytest.raises(UpstreamError) as caught:
        openai_connector().submit(sample("leak check"))
    assert secret not in str(caught.value)
    assert secret.encode() not in (caught.value.raw or b"")
    result = openai_connector().submit(sample("leak check")).result
    assert result is not None and secret.encode() not in result.raw
    assert secret not in repr(openai_connector().config)


def test_environment_proxies_are_ignored(
    simulator: SimulatorHandle, openai_connector: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("NO_PROXY", "")
    outcome = openai_connector().submit(sample("direct means direct"))
    assert outcome.egress == "direct"
    assert outcome.result is not None and outcome.result.collection_state == "completed"


def test_header_safe_keeps_plain_keys_and_digests_others() -> None:
    assert header_safe("run-1/sample-2/attempt-1") == "run-1/sample-2/attempt-1"
    hashed = header_safe("样本-1")
    assert hashed.startswith("sha256-") and hashed.isascii()
    assert header_safe("样本-1") == hashed
