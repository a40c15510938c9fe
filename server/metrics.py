"""The server's Prometheus metrics, in a registry of their own (no process-global state).

Owns metric names, help texts and buckets. Every name starts `hedgerow_server_` (the gateway's
start `hedgerow_gateway_`), so no name means two things and a plain PromQL sum over a name
reads one component; `hedgerow_build_info` is the one name both export, and it means the same
in both. `hedgerow_server_tokens_total{model}` counts tokens the engine actually ran (sent in
a step), so autoscaling reads real work, and a request dropped before the engine (expired,
cancelled) adds nothing to it. On a GPU the device memory gauges read what the app hands
`watch_device_memory`. Knows nothing about gRPC or the engine.

The event loop's per-request samples go through `record`, which appends them to a list that
`render` (every scrape) or a full list applies: between requests prometheus_client's code is
cold, and one `observe` then costs 10-20 µs against about 1 µs for the append. Only the
event-loop thread records and renders, so the list needs no lock.
"""

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hedgerow.build_info import build_info

# Request outcomes, the values of the `status` label of hedgerow_requests_total.
OK, INVALID, OVERLOADED, UNAVAILABLE, CANCELLED, EXPIRED, FAILED = (
    "ok", "invalid_argument", "resource_exhausted", "unavailable", "cancelled",
    "deadline_exceeded", "internal",
)
STATUSES = (OK, INVALID, OVERLOADED, UNAVAILABLE, CANCELLED, EXPIRED, FAILED)

FLUSH_AT = 4096  # recorded samples applied at once without a scrape (bounds the list)
_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_SEQ_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_SECONDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            0.5, 1.0, 2.5, 5.0, 10.0)


class ServerMetrics:
    """Every metric the server exports; `render()` is the /metrics body. `model` is the
    served model's name (the `model` label of the token counter)."""

    def __init__(self, model: str = "") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        build_info(r, "server")
        self.tokens = Counter(
            "hedgerow_server_tokens", "Tokens run through the engine (the `served` autoscaling "
            "signal), by served model.", ["model"], registry=r,
        ).labels(model)
        self.serving = Gauge(
            "hedgerow_server_serving", "1 while health says SERVING (loaded, hot set captured, "
            "not draining), else 0: warming replicas read 0.", registry=r,
        )
        self.requests = Counter(
            "hedgerow_server_requests", "Embed and Score requests by final status.", ["status"],
            registry=r,
        )
        # One child per status, looked up once (labels() costs a dict lookup and a lock).
        self.requests_by_status = {status: self.requests.labels(status) for status in STATUSES}
        self.batch_tokens = Histogram(
            "hedgerow_server_batch_tokens", "Tokens per engine step.", buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.batch_sequences = Histogram(
            "hedgerow_server_batch_sequences", "Sequences per engine step.", buckets=_SEQ_BUCKETS,
            registry=r,
        )
        self.pool_tokens = Gauge(
            "hedgerow_server_pool_tokens", "Tokens waiting in the pool for a batch.", registry=r,
        )
        self.inflight_tokens = Gauge(
            "hedgerow_server_inflight_tokens",
            "Tokens admitted and not yet answered (pool plus engine); admission bounds this.",
            registry=r,
        )
        self.queue_seconds = Histogram(
            "hedgerow_server_queue_seconds",
            "Queueing delay: from admission until the request's first sequence is batched.",
            buckets=_SECONDS, registry=r,
        )
        self.step_seconds = Histogram(
            "hedgerow_server_step_seconds",
            "Engine step time: from when the engine thread hands the batch to the engine until "
            "the result is in host memory (on a GPU this includes waiting behind the batch "
            "before it on the stream).",
            buckets=_SECONDS, registry=r,
        )
        self.request_seconds = Histogram(
            "hedgerow_server_request_seconds",
            "Embed and Score latency inside the server, admission to answer.",
            buckets=_SECONDS, registry=r,
        )

        self._pending: list[tuple[Callable[[float], None], float]] = []

    def watch_device_memory(self, allocated: Callable[[], float],
                            reserved: Callable[[], float]) -> None:
        """Export the GPU's memory in use and reserved, read at each scrape from `allocated`
        and `reserved` (torch.cuda.memory_allocated and memory_reserved). Not called on CPU,
        where the gauges do not exist."""
        Gauge("hedgerow_server_device_memory_allocated_bytes",
              "Device memory held by tensors (torch.cuda.memory_allocated).",
              registry=self.registry).set_function(allocated)
        Gauge("hedgerow_server_device_memory_reserved_bytes",
              "Device memory reserved by the caching allocator, in use or free for reuse "
              "(torch.cuda.memory_reserved).", registry=self.registry).set_function(reserved)

    def record(self, apply: Callable[[float], None], value: float) -> None:
        """Queue `apply(value)` (a metric's `observe` or `inc`) for the next scrape."""
        self._pending.append((apply, value))
        if len(self._pending) >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for apply, value in pending:
            apply(value)

    def render(self) -> bytes:
        self.flush()
        return generate_latest(self.registry)
