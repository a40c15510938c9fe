"""The gateway's Prometheus metrics, in a registry owned by one app (no global state).

Owns the metric names and labels: tokens offered and embedded, request latency by route and status,
tokenization time, in-flight tokens and chunks per replica, ready replicas, and retries. Every
name starts `hedgerow_gateway_` (the server's start `hedgerow_server_`), so no name means two
things; `hedgerow_build_info` is the one both export, with one meaning. The token and input
counters carry the served model's name (`model`). With
several worker processes (`--workers`), each worker writes its samples to files in a shared
directory (prometheus-client's multiprocess mode, switched on by PROMETHEUS_MULTIPROC_DIR in
the workers' environment, which `hedgerow gateway` sets) and /metrics, answered by any worker,
adds them up: counters and histograms sum, in-flight gauges sum over workers, ready replicas is
the lowest any worker sees. Knows nothing about how requests are handled; callers record.
"""

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hedgerow.build_info import build_info
from hedgerow.gateway.workers import MULTIPROCESS_DIR

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
TOKENIZE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                    0.5, 1, 2.5)


def multiprocess() -> bool:
    """True in a worker of a multi-worker gateway (see the module docstring)."""
    return bool(os.environ.get(MULTIPROCESS_DIR))


_pid = os.getpid()


def _process_id() -> int:
    return _pid


def _forked() -> None:
    global _pid
    _pid = os.getpid()


if multiprocess():
    # Every sample a worker writes first checks its process id for a fork, by os.getpid(): a
    # system call, ten per request. The id is kept here and renewed in a forked
    # child. prometheus-client takes this function as documented (MultiProcessValue); it is
    # set before any metric exists, as the one it replaces has made none (nothing in a worker
    # creates metrics before this module is imported).
    os.register_at_fork(after_in_child=_forked)
    prometheus_values.ValueClass = prometheus_values.MultiProcessValue(_process_id)


class GatewayMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model: str = "") -> None:
        """`model`: the served model's name, the `model` label of the token counters."""
        self.registry = CollectorRegistry()
        r = self.registry
        build_info(r, "gateway")
        self.tokens = Counter(
            "hedgerow_gateway_tokens", "Tokens of embedding requests answered, templates "
            "included, by served model.", ("model",), registry=r).labels(model)
        self.inputs = Counter(
            "hedgerow_gateway_inputs", "Inputs (sequences) of embedding requests answered, by "
            "served model.", ("model",), registry=r).labels(model)
        # The `offered` autoscaling signal (operator/token_signals.py): counted at admission,
        # so a surge shows in full even while the servers are saturated and 429 is answered.
        self.offered_tokens = Counter(
            "hedgerow_gateway_offered_tokens",
            "Tokens of every embedding and rerank request that reached admission, admitted or "
            "refused (the autoscaling signal that does not saturate at the fleet's capacity), "
            "by served model.", ("model",), registry=r).labels(model)
        self.request_seconds = Histogram(
            "hedgerow_gateway_request_seconds",
            "HTTP request latency, by route and status (499: the client went away).",
            ("route", "status"), buckets=LATENCY_BUCKETS, registry=r)
        self.tokenize_seconds = Histogram(
            "hedgerow_gateway_tokenize_seconds",
            "Time to tokenize one request, queueing included.",
            buckets=TOKENIZE_BUCKETS, registry=r)
        self.in_flight_tokens = Gauge(
            "hedgerow_gateway_replica_in_flight_tokens",
            "Tokens sent to a replica and not yet answered.",
            ("replica",), registry=r, multiprocess_mode="livesum")
        self.chunks = Counter(
            "hedgerow_gateway_chunks", "Chunks sent, by replica and outcome.",
            ("replica", "outcome"), registry=r)
        self.retries = Counter(
            "hedgerow_gateway_retries",
            "Chunk retries, by the code of the failure that caused each.",
            ("code",), registry=r)
        self.refused = Counter(
            "hedgerow_gateway_admission_refused",
            "Requests answered 429 at once because their estimated wait for the servers was "
            "past --max-queue-seconds or their deadline.", registry=r)
        self.ready_replicas = Gauge(
            "hedgerow_gateway_ready_replicas", "Replicas SERVING with their Info known.",
            registry=r, multiprocess_mode="livemin")
        # Labelled children, looked up once each (labels() takes a lock and hashes).
        self._latency: dict[tuple[str, int], Histogram] = {}
        self._in_flight: dict[str, Gauge] = {}
        self._chunks: dict[tuple[str, str], Counter] = {}

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """One HTTP request's latency (its labelled child looked up once per pair)."""
        child = self._latency.get((route, status))
        if child is None:
            child = self._latency[(route, status)] = self.request_seconds.labels(
                route, str(status))
        child.observe(seconds)

    def in_flight(self, address: str) -> Gauge:
        child = self._in_flight.get(address)
        if child is None:
            child = self._in_flight[address] = self.in_flight_tokens.labels(address)
        return child

    def chunk_outcome(self, address: str, outcome: str) -> Counter:
        child = self._chunks.get((address, outcome))
        if child is None:
            child = self._chunks[(address, outcome)] = self.chunks.labels(address, outcome)
        return child

    def forget_replica(self, address: str) -> None:
        """Drop a departed replica's series: pod addresses churn, and each one's series would
        otherwise be exported (the in-flight gauge frozen at its last value) forever."""
        for metric in (self.in_flight_tokens, self.chunks):
            metric.remove_by_labels({"replica": address})
        self._in_flight.pop(address, None)
        for key in [key for key in self._chunks if key[0] == address]:
            del self._chunks[key]

    def render(self) -> bytes:
        if multiprocess():
            from prometheus_client import multiprocess as prometheus_multiprocess

            registry = CollectorRegistry()
            prometheus_multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)
