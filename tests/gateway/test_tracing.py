"""OpenTelemetry across REAL processes: `hedgerow gateway` and `hedgerow server` with
--otlp-endpoint export their spans by OTLP/gRPC to a collector stand-in in this process, and one
request's spans form one tree: the gateway's request span, its tokenize and chunk spans, the
server's call span under the chunk (W3C traceparent over gRPC metadata), and the call's queue
and step spans; the request id is on the request and call spans."""

import threading
import time
from concurrent import futures

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)

from tests.children import RealGateway, RealServer

pytestmark = pytest.mark.slow


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """What an OpenTelemetry collector receives: every span, with its service's name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[tuple[str, object]] = []

    def Export(self, request, context):
        with self.lock:
            for resource in request.resource_spans:
                service = next(a.value.string_value for a in resource.resource.attributes
                               if a.key == "service.name")
                for scope in resource.scope_spans:
                    self.spans.extend((service, span) for span in scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def collector():
    sink = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield sink, f"http://127.0.0.1:{port}"
    server.stop(None)


def attributes(span) -> dict:
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


def test_one_requests_spans_form_one_tree(collector, tmp_path, monkeypatch):
    sink, endpoint = collector
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export within 0.1 s, not 5 s
    server = RealServer(tmp_path / "server.log", "--otlp-endpoint", endpoint)
    gateway = None
    try:
        server.wait_serving()
        gateway = RealGateway(tmp_path / "gateway.log", [server.address],
                              "--otlp-endpoint", endpoint, "--workers", "1",
                              "--chunk-tokens", "16")
        gateway.wait_until(lambda: gateway.ready_replicas() == 1, "gateway")
        texts = [f"hedgerows shelter wrens and robins, line {i}" for i in range(3)]
        answer = httpx.post(gateway.url + "/v1/embeddings", json={"input": texts},
                            headers={"x-request-id": "traced-1"}, timeout=60)
        assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with sink.lock:
                steps = [s for service, s in sink.spans if s.name == "step"]
            if len(steps) >= 3:
                break
            time.sleep(0.1)
    finally:
        if gateway is not None:
            gateway.stop()
        server.stop()

    with sink.lock:
        spans = list(sink.spans)
    (root,) = [s for service, s in spans if service == "hedgerow-gateway"
               and s.name == "POST /v1/embeddings"]
    assert attributes(root)["hedgerow.request_id"] == "traced-1"
    assert attributes(root)["http.response.status_code"] == 200
    tree = [(service, s) for service, s in spans if s.trace_id == root.trace_id]
    children = {}
    for service, span in tree:
        children.setdefault(span.parent_span_id, []).append((service, span))
    below_root = children[root.span_id]
    assert sorted(s.name for _, s in below_root) == ["chunk Embed"] * 3 + ["tokenize"]
    for _, chunk in (c for c in below_root if c[1].name == "chunk Embed"):
        (served,) = children[chunk.span_id]  # the server's call, under the gateway's chunk
        assert served[0] == "hedgerow-server" and served[1].name == "server Embed"
        assert attributes(served[1])["hedgerow.request_id"] == "traced-1"
        inner = sorted(children[served[1].span_id], key=lambda c: c[1].start_time_unix_nano)
        assert [s.name for _, s in inner] == ["queue", "step"]
        queue, step = (s for _, s in inner)
        assert queue.end_time_unix_nano <= step.start_time_unix_nano + 1000
    # Every other gateway trace is a request of its own (the readiness polls); calls outside
    # a request (Info, health) are not traced.
    assert {s.name for service, s in spans if service == "hedgerow-gateway"
            and s.trace_id != root.trace_id} == {"GET /readyz"}
