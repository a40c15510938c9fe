"""Fixtures for the gateway's tests that need no real server.

`StandIn` stands in for the Hedgerow server (server/) in unit tests of routing, chunking and
error shapes: it implements the same `hedgerow.v1.Embedder` proto and the standard gRPC health
service on loopback, with trivial math instead of a model, so these tests need no weights and
no engine. The integration tests run real `hedgerow` processes (tests/children.py).

A stand-in embedding of a sequence is float32 [width]: (length, sum of ids, first id, last id,
marker, 0, ...), so a test can tell which sequence a row belongs to and check input order, and
(with a `marker` per stand-in) which stand-in embedded it. Each stand-in names its embedding
space (`space`, in Info and in every answer; `answer_space` makes its answers name another, as
a server restarted in a new space would). A stand-in
Score ranks documents by the cosine of those rows with the query's (float64, rounded to float32),
score descending then lower index, as the real server orders them.
"""

import asyncio
import socket
import threading
import time
from concurrent import futures

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from hedgerow import settings
from hedgerow.gateway.main import build_app, http_server
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.conftest import free_port

WIDTH = 384
VOCAB = 30522
STAND_IN_SPACE = "s1-00000000-00000000"


class StandInEmbedder(embed_pb2_grpc.EmbedderServicer):
    def __init__(self, owner: "StandIn") -> None:
        self.owner = owner

    def _begin(self, context) -> None:
        owner = self.owner
        with owner.lock:
            owner.calls += 1
            failure = owner.fail_next.pop(0) if owner.fail_next else None
        if failure is not None:
            context.abort(failure, f"stand-in told to fail with {failure.name}")
        if owner.delay:
            time.sleep(owner.delay)

    @staticmethod
    def _rows(request, marker: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        ids = np.frombuffer(request.input_ids, dtype="<i4")
        cu = np.frombuffer(request.cu_seqlens, dtype="<i4")
        rows = np.zeros((len(cu) - 1, WIDTH), dtype="<f4")
        for i in range(len(cu) - 1):
            seq = ids[cu[i]:cu[i + 1]]
            rows[i, :5] = (len(seq), seq.sum(), seq[0], seq[-1], marker)
        return ids, rows

    def Embed(self, request, context):
        owner = self.owner
        ids, rows = self._rows(request, self.owner.marker)
        with owner.lock:  # admission, as the server does it: past the bound, busy at once
            if owner.max_inflight_tokens and (
                    owner.in_flight_tokens + len(ids) > owner.max_inflight_tokens):
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "stand-in at its bound")
            owner.in_flight_tokens += len(ids)
            owner.peak_in_flight_tokens = max(owner.peak_in_flight_tokens, owner.in_flight_tokens)
        try:
            self._begin(context)
        finally:
            with owner.lock:
                owner.in_flight_tokens -= len(ids)
        sequences = len(rows)
        if request.dimensions:
            rows = rows[:, :request.dimensions]
        with owner.lock:
            owner.tokens += len(ids)
            owner.chunks.append(sequences)
        return embed_pb2.EmbedResponse(embeddings=rows.tobytes(), shape=list(rows.shape),
                                       dtype=embed_pb2.FLOAT32, prompt_tokens=len(ids),
                                       space=owner.answering_space)

    def Score(self, request, context):
        owner = self.owner
        self._begin(context)
        ids, rows = self._rows(request, self.owner.marker)
        rows = rows.astype(np.float64)
        query, docs = rows[0], rows[1:]
        scores = (docs @ query / np.linalg.norm(docs, axis=1) / np.linalg.norm(query))
        scores = scores.astype(np.float32)
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[:request.top_n]
        with owner.lock:
            owner.tokens += len(ids)
            owner.chunks.append(len(docs))
        return embed_pb2.ScoreResponse(indices=order, scores=[float(scores[i]) for i in order],
                                       prompt_tokens=len(ids), space=owner.answering_space)

    def Info(self, request, context):
        with self.owner.lock:
            fail = self.owner.info_failures > 0
            self.owner.info_failures -= fail
        if fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "stand-in told to fail Info")
        return embed_pb2.InfoResponse(
            model="stand-in", architecture="bert", dimensions=WIDTH, max_tokens=512,
            max_request_tokens=1_000_000, pooling="mean", normalize=True,
            templates={"query": "query: "}, version="test", vocab_size=VOCAB,
            max_inflight_tokens=self.owner.max_inflight_tokens, space=self.owner.space)


class StandIn:
    """A gRPC server on loopback speaking the Embedder proto with trivial math."""

    def __init__(self, health_servicer=None, port: int = 0) -> None:
        """`health_servicer` replaces the standard grpc.health.v1 servicer when given."""
        self.lock = threading.Lock()
        self.calls = 0
        self.tokens = 0
        self.chunks: list[int] = []
        self.fail_next: list[grpc.StatusCode] = []
        self.info_failures = 0  # how many Info calls to answer UNAVAILABLE before answering
        self.delay = 0.0
        self.max_inflight_tokens = 0  # the admission bound Info reports and Embed enforces
        self.space = STAND_IN_SPACE  # the fingerprint Info reports
        self.answer_space: str | None = None  # what answers report, when not `space`
        self.marker = 0.0  # column 4 of every row this stand-in computes
        self.in_flight_tokens = self.peak_in_flight_tokens = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        embed_pb2_grpc.add_EmbedderServicer_to_server(StandInEmbedder(self), self.server)
        self.health = health_servicer or health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.address = f"127.0.0.1:{self.port}"
        if health_servicer is None:
            self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.server.start()

    @property
    def answering_space(self) -> str:
        return self.space if self.answer_space is None else self.answer_space

    def stop(self, graceful: bool = True) -> None:
        """Stop serving; `graceful` first tells health watchers NOT_SERVING."""
        if graceful and isinstance(self.health, health.HealthServicer):
            self.health.enter_graceful_shutdown()
        self.server.stop(grace=None)


@pytest.fixture
def standins():
    servers = [StandIn(), StandIn()]
    yield servers
    # Not graceful: grpc_health's sync servicer sends NOT_SERVING under its lock and waits for
    # the send, while the server thread closing a departed gateway's Watch waits for that lock
    # (a deadlock seen at teardown under load). The real server uses the asyncio servicer.
    for server in servers:
        server.stop(graceful=False)


def make_settings(**overrides) -> GatewaySettings:
    environ = {settings.env_name(k): ",".join(v) if isinstance(v, (tuple, list)) else str(v)
               for k, v in overrides.items()}
    return settings.load(GatewaySettings, None, environ)


class LiveGateway:
    """The gateway for `config`, served by its real HTTP server (uvicorn under the gateway's
    limits) on a loopback port from a thread with its own event loop, as one worker of
    `hedgerow gateway` runs it; `client` is an httpx.Client for it, with the app reachable as
    `client.app`."""

    def __init__(self, config) -> None:
        self.app = build_app(config)
        self.port = free_port()
        self._server = http_server(config, self.app)
        sock = socket.socket()
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_until_complete, args=(self._server.serve(sockets=[sock]),),
            daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert self._thread.is_alive() and time.monotonic() < deadline, \
                "the gateway did not start"
            time.sleep(0.01)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        self.client.app = self.app

    def close(self) -> None:
        self.client.close()
        self._server.should_exit = True
        self._thread.join(30)


def wait_ready(client, replicas: int, timeout: float = 10.0, headers=None) -> None:
    """Until /readyz lists `replicas` ready servers (`headers`: the API key, when keys are set:
    without one it names none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = client.get("/readyz", headers=headers)
        if answer.status_code == 200 and len(answer.json()["ready_replicas"]) >= replicas:
            return
        time.sleep(0.02)
    raise AssertionError(f"gateway not ready with {replicas} replicas: {answer.json()}")


@pytest.fixture
def gateway_factory(standins):
    """Build a gateway (served, watchers running) over the stand-ins with settings; returns an
    httpx.Client for it."""
    gateways = []

    def make(servers=None, ready=None, **overrides) -> httpx.Client:
        servers = [s.address for s in standins] if servers is None else servers
        overrides.setdefault("health_interval", 0.05)
        live = LiveGateway(make_settings(servers=servers, **overrides))
        gateways.append(live)
        ready = len(servers) if ready is None else ready
        if ready:
            wait_ready(live.client, ready)
        return live.client

    yield make
    for live in gateways:
        live.close()
