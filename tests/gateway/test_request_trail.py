"""One request followed across REAL processes: `hedgerow gateway` in front of a `hedgerow server`
(the packaged model on CPU, --log-level debug). The client's X-Request-Id is echoed, written in
the gateway's access log and in the server's per-request line; the timing headers come from
the server's Timing."""

import re
import time

import grpc
import httpx
import numpy as np
import pytest

from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.children import RealGateway, RealServer

pytestmark = pytest.mark.slow

TIMINGS = ("x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    directory = tmp_path_factory.mktemp("trail")
    server = RealServer(directory / "server.log", "--log-level", "debug")
    server.wait_serving()
    gateway = RealGateway(directory / "gateway.log", [server.address],
                          "--chunk-tokens", "16")
    gateway.wait_until(lambda: gateway.ready_replicas() == 1, "gateway")
    yield server, gateway
    assert gateway.stop() == 0, gateway.log_text()
    assert server.stop() == 0, server.log_text()


def wait_for(child, pattern: str) -> str:
    """The first line of `child`'s log matching `pattern` (logs are flushed asynchronously)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in child.log_text().splitlines():
            if re.search(pattern, line):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no line matching {pattern!r}:\n{child.log_text()}")


def test_one_request_id_in_both_logs(stack):
    server, gateway = stack
    answer = httpx.post(gateway.url + "/v1/embeddings", json={"input": "hedgerows at dusk"},
                        headers={"x-request-id": "trail-7f3a", "user-agent": "trail-test/2"},
                        timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-request-id"] == "trail-7f3a"
    access = wait_for(gateway, r"event=access request_id=trail-7f3a ")
    assert "route=/v1/embeddings status=200 tokens=" in access
    assert "client=127.0.0.1 user_agent=trail-test/2" in access
    done = wait_for(server, r"event=request.done request_id=trail-7f3a ")
    assert "method=Embed sequences=1" in done and "queue_ms=" in done


def test_a_made_id_reaches_the_server_too(stack):
    server, gateway = stack
    answer = httpx.post(gateway.url + "/embed", json={"inputs": "no id of my own"}, timeout=60)
    rid = answer.headers["x-request-id"]
    assert re.fullmatch("[0-9a-f]{32}", rid)
    wait_for(server, rf"event=request.done request_id={rid} ")
    wait_for(gateway, rf"event=access request_id={rid} method=POST route=/embed status=200")


def test_timing_headers_on_a_chunked_request(stack):
    _, gateway = stack
    texts = [f"sentence number {i} about hedgerows and their birds" for i in range(12)]
    answer = httpx.post(gateway.url + "/v1/embeddings", json={"input": texts}, timeout=60)
    assert answer.status_code == 200
    total, tokenization, queue, inference = (int(answer.headers[name]) for name in TIMINGS)
    assert min(total, tokenization, queue, inference) >= 0
    assert total >= tokenization and total >= queue + inference


def test_the_server_reports_where_the_time_went(stack):
    server, _ = stack
    with grpc.insecure_channel(server.address) as channel:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        ids = np.array([101, 7592, 2088, 102], dtype="<i4").tobytes()
        cu = np.array([0, 4], dtype="<i4").tobytes()
        response = stub.Embed(embed_pb2.EmbedRequest(input_ids=ids, cu_seqlens=cu), timeout=30)
        scored = stub.Score(embed_pb2.ScoreRequest(
            input_ids=ids + ids, cu_seqlens=np.array([0, 4, 8], dtype="<i4").tobytes(),
            top_n=1), timeout=30)
    # A step of the real model takes far more than a microsecond.
    assert response.timing.inference_us > 0 and scored.timing.inference_us > 0
