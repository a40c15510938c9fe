"""Routing: least-loaded choice, chunks spread over replicas, retries, input order.

The gRPC servers here are the in-test StandIn (see conftest.py), which stands in for the
Hedgerow server with the same proto and trivial math; test_integration.py repeats the
important cases against real `hedgerow server` processes.
"""

import asyncio
import time
import types

import grpc
import numpy as np
import pytest

from hedgerow.gateway.errors import DeadlineError
from hedgerow.gateway.admission import Throughput
from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.gateway import router as routing
from hedgerow.gateway.router import Router, least_loaded
from tests.gateway.conftest import wait_ready

MODEL = "all-MiniLM-L6-v2"


def replica(name, tokens=0, ready=True, last=0, bound=0, space="", failures=0, failed_at=0.0):
    return types.SimpleNamespace(name=name, in_flight_tokens=tokens, ready=ready,
                                 last_chosen=last, removed=False, busy_until=0.0,
                                 failures=failures, failed_at=failed_at,
                                 info=types.SimpleNamespace(max_inflight_tokens=bound,
                                                            space=space),
                                 throughput=Throughput())


def test_least_loaded_picks_fewest_in_flight_tokens_among_ready():
    a, b, c = replica("a", 900), replica("b", 100), replica("c", 0, ready=False)
    assert least_loaded([a, b, c]) is b
    assert least_loaded([a, b, c], exclude=[b]) is a
    assert least_loaded([c]) is None
    assert least_loaded([a], exclude=[a]) is None


def test_a_replica_that_just_failed_comes_after_every_other_with_room():
    """Failing fast, it holds the fewest tokens: least-loaded alone would send it everything."""
    now = time.monotonic()
    failing, busy = replica("failing", 0, failures=1, failed_at=now), replica("busy", 500)
    assert least_loaded([failing, busy]) is busy
    assert least_loaded([failing, busy], exclude=[busy]) is failing  # still used when alone
    failing.failed_at = now - routing.FAILED_RECENTLY_S - 1  # a while ago: equal terms again
    assert least_loaded([failing, busy]) is failing
    failing.failed_at, failing.failures = now, 0  # answered well since
    assert least_loaded([failing, busy]) is failing


def test_only_replicas_with_room_under_their_bound_are_chosen():
    a, b = replica("a", 900, bound=1000), replica("b", 50, bound=100)
    assert least_loaded([a, b], tokens=60) is a       # b would pass its bound
    assert least_loaded([a, b], tokens=200) is None   # neither has room: wait
    idle = replica("c", 0, bound=100)
    assert least_loaded([idle], tokens=500) is idle   # an idle replica always takes a chunk
    assert least_loaded([replica("d", 10**9)], tokens=10**9) is not None  # 0: no bound


def test_ties_go_to_the_replica_chosen_longest_ago():
    a, b = replica("a", 0, last=7), replica("b", 0, last=3)
    assert least_loaded([a, b]) is b


def token_sums(client, texts):
    answer = client.post("/tokenize", json={"input": texts})
    return [sum(item["tokens"]) for item in answer.json()["data"]]


def test_a_large_request_is_split_over_both_replicas_in_input_order(standins, gateway_factory):
    client = gateway_factory(chunk_tokens=256)
    texts = [f"document number {i} " + "word " * (i % 17) for i in range(300)]
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": texts})
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert [item["index"] for item in data] == list(range(300))
    # column 1 of a stand-in embedding is the sum of the sequence's ids: order is kept
    assert [item["embedding"][1] for item in data] == token_sums(client, texts)
    first, second = standins
    assert len(first.chunks) >= 2 and len(second.chunks) >= 2
    assert sum(first.chunks) + sum(second.chunks) == 300
    assert first.tokens + second.tokens == answer.json()["usage"]["prompt_tokens"]


def test_a_request_past_the_servers_admission_bounds_is_paced_not_refused(standins,
                                                                            gateway_factory):
    """Chunks wait for room under each server's Info bound instead of being sent at once and
    turned away as busy (which no retry could fix)."""
    for server in standins:
        server.max_inflight_tokens, server.delay = 200, 0.02
    client = gateway_factory(chunk_tokens=64)
    texts = [f"text {i} " + "word " * 20 for i in range(120)]  # about 3,000 tokens
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": texts})
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    assert [item["embedding"][1] for item in data] == token_sums(client, texts)
    for server in standins:
        assert 0 < server.peak_in_flight_tokens <= 200
    assert "hedgerow_gateway_retries_total{" not in client.get("/metrics").text


@pytest.mark.parametrize("code", [grpc.StatusCode.RESOURCE_EXHAUSTED,
                                  # A server that stopped before it answered (the gateway's own
                                  # cancellations never reach it as a status).
                                  grpc.StatusCode.CANCELLED,
                                  # Replica-side failures: its engine failed, a bug.
                                  grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN],
                         ids=lambda code: code.name)
def test_a_failed_chunk_is_retried_once_on_another_replica(standins, gateway_factory, code):
    client = gateway_factory()
    first, second = standins
    first.fail_next = [code]
    for _ in range(2):  # equal replicas take turns, so one of these lands on `first` first
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "retry me"})
        assert answer.status_code == 200, answer.text
    assert first.calls + second.calls == 3  # one failure, retried once
    assert second.calls >= 1  # the retry never goes back to the replica that failed
    retried = f'hedgerow_gateway_retries_total{{code="{code.name}"}} 1.0'
    assert retried in client.get("/metrics").text


def test_a_requests_own_error_is_not_retried(standins, gateway_factory):
    client = gateway_factory()
    for server in standins:
        server.fail_next = [grpc.StatusCode.INVALID_ARGUMENT]
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "bad"})
    assert answer.status_code == 400
    assert sum(server.calls for server in standins) == 1


def test_an_internal_error_on_every_replica_is_a_502_after_one_retry(standins, gateway_factory):
    client = gateway_factory()
    for server in standins:
        server.fail_next = [grpc.StatusCode.INTERNAL]
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "x"})
    assert answer.status_code == 502
    assert [server.calls for server in standins] == [1, 1]


def test_a_replica_failing_in_a_row_is_ejected_until_its_health_and_info_return(
        standins, gateway_factory, monkeypatch):
    # Failures on equal terms right away, so each request tries `first` first, in turns.
    monkeypatch.setattr(routing, "FAILED_RECENTLY_S", 0.0)
    client = gateway_factory(eject_after_failures=3)
    first, second = standins
    first.fail_next = [grpc.StatusCode.INTERNAL] * 100
    first.info_failures = 10 ** 6  # back only once its Info answers again
    for _ in range(6):
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "eject me"})
        assert answer.status_code == 200, answer.text
    assert first.calls == 3  # the third failure in a row ejected it
    assert client.get("/readyz").json()["ready_replicas"] == [second.address]
    first.fail_next, first.info_failures = [], 0
    wait_ready(client, 2)  # health SERVING all along: back once Info answers


def test_ejection_never_takes_the_last_ready_replica(standins, gateway_factory):
    first = standins[0]
    client = gateway_factory(servers=[first.address], eject_after_failures=1)
    first.fail_next = [grpc.StatusCode.INTERNAL] * 3
    for _ in range(3):
        assert client.post("/v1/embeddings",
                           json={"model": MODEL, "input": "x"}).status_code == 502
    assert client.get("/readyz").json()["ready_replicas"] == [first.address]


def test_busy_answers_pause_the_replica_and_the_chunk_waits_instead_of_failing(
        standins, gateway_factory):
    """RESOURCE_EXHAUSTED means the server holds more than this gateway counts (other
    gateways, or calls just cancelled that it is still finishing): a pause, then room again."""
    client = gateway_factory()
    for server in standins:
        server.fail_next = [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "busy"})
    assert answer.status_code == 200, answer.text
    retried = 'hedgerow_gateway_retries_total{code="RESOURCE_EXHAUSTED"}'
    assert retried in client.get("/metrics").text


def test_overloaded_past_every_pause_is_429_with_retry_after(standins, gateway_factory):
    client = gateway_factory()
    for server in standins:
        server.fail_next = [grpc.StatusCode.RESOURCE_EXHAUSTED] * 5
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "busy"})
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["type"] == "overloaded_error"
    assert sum(server.calls for server in standins) == 5  # four pauses, then the answer


def test_a_dead_replica_leaves_traffic_and_requests_still_succeed(standins, gateway_factory):
    client = gateway_factory(chunk_tokens=32)
    first, second = standins
    first.stop()
    for _ in range(5):
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": ["a b c"] * 40})
        assert answer.status_code == 200, answer.text
    assert client.get("/readyz").json()["ready_replicas"] == [second.address]


def test_no_ready_replica_is_503_with_retry_after(standins, gateway_factory):
    client = gateway_factory(servers=[standins[0].address])
    standins[0].health.set("", 2)  # NOT_SERVING
    for _ in range(200):
        if client.get("/readyz").status_code == 503:
            break
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "anyone?"})
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "no_ready_replica"
    assert client.get("/healthz").status_code == 200


def test_a_server_rejection_is_a_400_not_a_500(standins, gateway_factory):
    client = gateway_factory(servers=[standins[0].address])
    standins[0].fail_next = [grpc.StatusCode.INVALID_ARGUMENT]
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "x"})
    assert answer.status_code == 400
    assert "rejected" in answer.json()["error"]["message"]


def test_the_clients_deadline_becomes_the_grpc_deadline(standins, gateway_factory):
    client = gateway_factory(servers=[standins[0].address])
    standins[0].delay = 0.5
    for header in ("X-Request-Timeout", "X-Stainless-Read-Timeout"):  # ours, OpenAI client's
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "slow"},
                             headers={header: "0.05"})
        assert answer.status_code == 504
        assert answer.json()["error"]["code"] == "deadline_exceeded"


def test_dimensions_and_base64_reach_the_response(standins, gateway_factory):
    client = gateway_factory(allow_truncated_dimensions=True)
    answer = client.post("/v1/embeddings", json={
        "model": MODEL, "input": ["one", "two"], "dimensions": 8, "encoding_format": "base64"})
    assert answer.status_code == 200
    import base64
    rows = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in answer.json()["data"]]
    assert [row.shape for row in rows] == [(8,), (8,)]
    assert rows[0][0] == 3  # [CLS] one [SEP]


def test_replicas_can_come_from_dns(standins, gateway_factory):
    # localhost resolves to 127.0.0.1 (and maybe ::1, where nothing listens: it stays unready)
    client = gateway_factory(servers=(), service_dns=f"localhost:{standins[0].port}", ready=1,
                             dns_interval=0.1)
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "via dns"})
    assert answer.status_code == 200, answer.text
    assert f"127.0.0.1:{standins[0].port}" in client.get("/readyz").json()["ready_replicas"]


def test_dns_changes_add_and_remove_replicas():
    import asyncio

    from hedgerow.gateway.replicas import ReplicaSet

    from hedgerow.gateway.metrics import GatewayMetrics

    metrics = GatewayMetrics()

    async def scenario():
        replicas = ReplicaSet(servers=(), service_dns="localhost:1", on_info=lambda r, i: None,
                              on_removed=metrics.forget_replica)
        replicas._update({"10.0.0.1:50051", "10.0.0.2:50051"})
        first = set(replicas.replicas)
        for address in first:
            metrics.in_flight_tokens.labels(address).set(7)
            metrics.chunks.labels(address, "OK").inc()
            metrics.chunks.labels(address, "UNAVAILABLE").inc()
        replicas._update({"10.0.0.2:50051", "10.0.0.3:50051"})
        second = set(replicas.replicas)
        await replicas.close()
        return first, second

    first, second = asyncio.run(scenario())
    assert first == {"10.0.0.1:50051", "10.0.0.2:50051"}
    assert second == {"10.0.0.2:50051", "10.0.0.3:50051"}
    # The departed replica's series are gone; the staying one's are kept.
    exported = metrics.render().decode()
    assert 'replica="10.0.0.1:50051"' not in exported
    assert 'hedgerow_gateway_replica_in_flight_tokens{replica="10.0.0.2:50051"} 7.0' in exported


def test_server_templates_apply_to_input_type(standins, gateway_factory):
    client = gateway_factory()  # the stand-in's Info carries {"query": "query: "}
    plain = client.post("/tokenize", json={"input": "query: hedges"}).json()
    templated = client.post("/tokenize", json={"input": "hedges", "input_type": "query"}).json()
    assert templated["data"][0]["tokens"] == plain["data"][0]["tokens"]
    document = client.post("/tokenize", json={"input": "hedges", "input_type": "document"}).json()
    assert document["data"][0]["count"] < templated["data"][0]["count"]  # no document template
    flagged = gateway_factory(query_template="search: ")
    answer = flagged.post("/tokenize", json={"input": "hedges", "input_type": "query"}).json()
    assert answer["data"][0]["tokens"] == flagged.post(
        "/tokenize", json={"input": "search: hedges"}).json()["data"][0]["tokens"]
    # An empty template switches the server's off (the operator writes "" for that).
    off = gateway_factory(query_template="")
    answer = off.post("/tokenize", json={"input": "hedges", "input_type": "query"}).json()
    assert answer["data"][0]["tokens"] == document["data"][0]["tokens"]


def test_truncate_cuts_long_inputs_instead_of_refusing(standins, gateway_factory):
    client = gateway_factory(truncate=True, accept_token_ids=True)
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "word " * 600})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["prompt_tokens"] == 512  # the stand-in's Info max_tokens
    ids = client.post("/v1/embeddings", json={"model": MODEL, "input": [7] * 600}).json()
    assert ids["usage"]["prompt_tokens"] == 512


def test_a_server_without_health_watch_is_polled(gateway_factory):
    """A server implementing only Check (not Watch) is still found ready, by polling."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    import tests.gateway.conftest as helpers

    class CheckOnly(health_pb2_grpc.HealthServicer):  # Watch answers UNIMPLEMENTED
        def Check(self, request, context):
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    server = helpers.StandIn(health_servicer=CheckOnly())
    try:
        client = gateway_factory(servers=[server.address])
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "polled"})
        assert answer.status_code == 200, answer.text
    finally:
        server.stop()


def test_a_server_whose_info_failed_once_joins_traffic_when_it_answers(gateway_factory):
    """Watch sends only changes: a failed Info must be asked again, not wait for a change."""
    import tests.gateway.conftest as helpers

    server = helpers.StandIn()
    server.info_failures = 2
    try:
        client = gateway_factory(servers=[server.address])
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "late info"})
        assert answer.status_code == 200, answer.text
        assert server.info_failures == 0
    finally:
        server.stop(graceful=False)


def test_a_server_that_starts_after_the_gateway_joins_traffic(gateway_factory):
    import tests.gateway.conftest as helpers

    port = helpers.free_port()
    client = gateway_factory(servers=[f"127.0.0.1:{port}"], ready=0)
    assert client.post("/v1/embeddings", json={"model": MODEL, "input": "x"}).status_code == 503
    late = helpers.StandIn(port=port)
    try:
        helpers.wait_ready(client, 1)
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": "late"})
        assert answer.status_code == 200, answer.text
    finally:
        late.stop(graceful=False)


def test_a_large_tokenization_does_not_stall_a_small_request(standins, gateway_factory):
    """The big request's tokenization is held mid-way in its thread; a small request still
    completes, so the event loop was never blocked by it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    client = gateway_factory()
    tokenizer = client.app.state.service.tokenizer
    entered, release = threading.Event(), threading.Event()
    original = tokenizer.encode_sync

    def held(texts, *args):
        if len(texts) > 10:
            entered.set()
            assert release.wait(30)
        return original(texts, *args)

    tokenizer.encode_sync = held
    with ThreadPoolExecutor(1) as pool:
        big = pool.submit(client.post, "/v1/embeddings",
                          json={"model": MODEL, "input": ["a long document " * 20] * 200})
        try:
            assert entered.wait(30)
            small = client.post("/v1/embeddings", json={"model": MODEL, "input": "small"})
            assert small.status_code == 200
            assert not big.done()
        finally:
            release.set()
        assert big.result(60).status_code == 200


class _SlowEmbedder:
    def __init__(self, metrics=None, forget=None):
        self.metrics, self.forget, self.replica = metrics, forget, None

    async def Embed(self, request, timeout, metadata=None):
        if self.forget:  # discovery drops the replica mid-call, as ReplicaSet does
            self.replica.removed = True
            self.metrics.forget_replica(self.forget)
        await asyncio.sleep(0.02)
        return "ok"


def _one_replica(bound, embedder):
    rep = replica("a", bound=bound)
    rep.address, rep.embedder = "10.0.0.9:50051", embedder
    return rep, types.SimpleNamespace(ready=lambda: [rep])


def test_a_large_chunk_is_not_overtaken_forever_by_small_ones():
    """Waiting chunks are served first come, first served: a 95-token chunk under a bound of
    100 got room only when in-flight fell to 5, which four clients of 10-token chunks never
    let happen."""
    rep, source = _one_replica(100, _SlowEmbedder())
    chunk = types.SimpleNamespace(size=1)

    async def main():
        router = Router(source, GatewayMetrics())
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        async def small_client():
            while not done.is_set():
                await router._send("Embed", None, chunk, 10, loop.time() + 30)

        smalls = [asyncio.create_task(small_client()) for _ in range(4)]
        await asyncio.sleep(0.05)
        try:
            return await router._send("Embed", None, chunk, 95, loop.time() + 10)
        finally:
            done.set()
            await asyncio.gather(*smalls)

    assert asyncio.run(main()) == "ok"
    assert rep.in_flight_tokens == 0


def test_a_replica_dropped_mid_call_does_not_get_its_gauge_back():
    metrics = GatewayMetrics()
    embedder = _SlowEmbedder(metrics, forget="10.0.0.9:50051")
    rep, source = _one_replica(0, embedder)
    embedder.replica = rep

    async def main():
        router = Router(source, metrics)
        await router._send("Embed", None, types.SimpleNamespace(size=1), 10,
                           asyncio.get_running_loop().time() + 5)

    asyncio.run(main())
    assert "10.0.0.9" not in metrics.render().decode()


def test_waiters_ahead_keep_what_they_could_use_and_only_that():
    """First come, first served among waiters, except that a retry which excludes a replica
    does not hold that replica back from the chunks behind it."""
    free, full = replica("a", bound=100), replica("b", 100, bound=100)
    free.address, full.address = "a:1", "b:1"
    free.embedder = types.SimpleNamespace(
        Embed=lambda request, timeout, metadata=None: asyncio.sleep(0, "a"))
    source = types.SimpleNamespace(ready=lambda: [free, full])
    chunk = types.SimpleNamespace(size=1)

    async def newcomer(ahead_excludes):
        router = Router(source, GatewayMetrics())
        router._waiting.append((object(), ahead_excludes, None))  # a chunk already waiting
        loop = asyncio.get_running_loop()
        return await router._send("Embed", None, chunk, 10, loop.time() + 0.3)

    assert asyncio.run(newcomer((free,))) == "a"  # it waits for b only: a is free to take
    try:
        asyncio.run(newcomer(()))  # it could use a: the newcomer queues behind it
    except DeadlineError:
        pass
    else:
        raise AssertionError("a newcomer overtook a waiter that could use the same replica")
