"""Fixtures for the gateway's tests that need no real server.

`StandIn` stands in for the Hedgerow server (server/) in unit tests of routing, chunking and
error shapes: it implements the same `hedgerow.v1.Embedder` proto and the standard gRPC health
service on loopback, with trivial math instead of a model, so these tests need no weights and
no engine. The integration tests (test_integration.py) run real `hedgerow server` processes.

A stand-in embedding of a sequence is float32 [width]: (length, sum of ids, first id, last id,
0, ...), so a test can tell which sequence a row belongs to and check input order.
"""

import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
from fastapi.testclient import TestClient
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from hedgerow import settings
from hedgerow.gateway.main import build_app
from hedgerow.gateway.settings import GatewaySettings
from hedgerow.wire import embed_pb2, embed_pb2_grpc

WIDTH = 384
VOCAB = 30522


class StandInEmbedder(embed_pb2_grpc.EmbedderServicer):
    def __init__(self, owner: "StandIn") -> None:
        self.owner = owner

    def Embed(self, request, context):
        owner = self.owner
        with owner.lock:
            owner.calls += 1
            failure = owner.fail_next.pop(0) if owner.fail_next else None
        if failure is not None:
            context.abort(failure, f"stand-in told to fail with {failure.name}")
        if owner.delay:
            time.sleep(owner.delay)
        ids = np.frombuffer(request.input_ids, dtype="<i4")
        cu = np.frombuffer(request.cu_seqlens, dtype="<i4")
        rows = np.zeros((len(cu) - 1, WIDTH), dtype="<f4")
        for i in range(len(cu) - 1):
            seq = ids[cu[i]:cu[i + 1]]
            rows[i, :4] = (len(seq), seq.sum(), seq[0], seq[-1])
        if request.dimensions:
            rows = rows[:, :request.dimensions]
        with owner.lock:
            owner.tokens += len(ids)
            owner.chunks.append(len(cu) - 1)
        return embed_pb2.EmbedResponse(embeddings=rows.tobytes(), shape=list(rows.shape),
                                       dtype=embed_pb2.FLOAT32, prompt_tokens=len(ids))

    def Info(self, request, context):
        return embed_pb2.InfoResponse(
            model="stand-in", architecture="bert", dimensions=WIDTH, max_tokens=512,
            max_request_tokens=1_000_000, pooling="mean", normalize=True,
            templates={"query": "query: "}, version="test", vocab_size=VOCAB)


class StandIn:
    """A gRPC server on loopback speaking the Embedder proto with trivial math."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.tokens = 0
        self.chunks: list[int] = []
        self.fail_next: list[grpc.StatusCode] = []
        self.delay = 0.0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        embed_pb2_grpc.add_EmbedderServicer_to_server(StandInEmbedder(self), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.server.start()

    def stop(self) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace=None)


@pytest.fixture
def standins():
    servers = [StandIn(), StandIn()]
    yield servers
    for server in servers:
        server.stop()


def make_settings(**overrides) -> GatewaySettings:
    environ = {settings.env_name(k): ",".join(v) if isinstance(v, (tuple, list)) else str(v)
               for k, v in overrides.items()}
    return settings.load(GatewaySettings, None, environ)


def wait_ready(client: TestClient, replicas: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = client.get("/readyz")
        if answer.status_code == 200 and len(answer.json()["ready_replicas"]) >= replicas:
            return
        time.sleep(0.02)
    raise AssertionError(f"gateway not ready with {replicas} replicas: {answer.json()}")


@pytest.fixture
def gateway_factory(standins):
    """Build a gateway (TestClient, lifespan running) over the stand-ins with settings."""
    clients = []

    def make(servers=None, ready=None, **overrides) -> TestClient:
        servers = [s.address for s in standins] if servers is None else servers
        overrides.setdefault("health_interval", 0.05)
        app = build_app(make_settings(servers=servers, **overrides))
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        wait_ready(client, len(servers) if ready is None else ready)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
