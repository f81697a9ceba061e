"""A batch submit whose answer is cut in transit (status and headers arrived, then the
connection dropped mid-body): the provider may have created the tasks, so each task's
acceptance is unknown and is verified by its key, never failed as an unparsable answer
(connectors/transport.py `submit_answer_cut`; seen in `make faults`, platforms_down)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from connectors.adapters.collector import CollectorConnector
from connectors.adapters.dataforseo import DataForSEOAIMode
from connectors.base import ConnectorConfig, ErrorClass, UpstreamError
from tests.services import QuietHandler, loopback_server

from .contract import sample


class _CutAnswer(QuietHandler):
    """Takes any POST, says 200 and a body of 400 bytes, sends 20 of them and hangs up."""

    def do_POST(self) -> None:
        self.read_body()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "400")
        self.end_headers()
        self.wfile.write(b'{"tasks": [{"client_')
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def cutting_provider() -> Iterator[str]:
    with loopback_server(_CutAnswer) as url:
        yield url


def _collector(url: str) -> Any:
    return CollectorConnector(
        ConnectorConfig(platform="collector", base_url=url, api_key="col-test-key",
                        timeout_seconds=5.0)
    )  # fmt: skip


def _dataforseo(url: str) -> Any:
    return DataForSEOAIMode(
        ConnectorConfig(platform="google_ai_mode", base_url=url, api_key="login:pw",
                        timeout_seconds=5.0)
    )  # fmt: skip


@pytest.mark.parametrize("build", [_collector, _dataforseo], ids=["collector", "dataforseo"])
def test_a_batch_answer_cut_in_transit_leaves_acceptance_unknown(
    cutting_provider: str, build: Any
) -> None:
    connector = build(cutting_provider)
    requests = [sample("best crm", sample_id=1), sample("best erp", sample_id=2)]

    with pytest.raises(UpstreamError) as caught:
        connector.submit_batch(requests)

    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert "answer cut" in caught.value.message
