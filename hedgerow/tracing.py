"""OpenTelemetry tracing for the gateway and the server: on with --otlp-endpoint, else absent.

Owns the tracer of a process (`Tracing`: an SDK TracerProvider exporting spans in batches by
OTLP over gRPC, named by its component), W3C trace-context propagation over gRPC metadata
(`traceparent`), and the conversion of the monotonic clock the server measures with into the
epoch nanoseconds spans carry. Without an endpoint nothing is set up and callers hold None: no
OpenTelemetry module is imported and no request pays anything. Knows nothing about HTTP or
the engine; the gateway's and the server's code say which spans exist.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

REQUEST_ID_ATTRIBUTE = "hedgerow.request_id"


class Tracing:
    """One process's tracer. `exporter` replaces the OTLP exporter (a test's in-memory one,
    exported at once instead of in batches)."""

    def __init__(self, component: str, endpoint: str | None, exporter: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.propagators.textmap import DefaultGetter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from hedgerow import __version__

        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._getter = DefaultGetter()
        self.provider = TracerProvider(resource=Resource.create({
            "service.name": f"hedgerow-{component}", "service.version": __version__}))
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
                endpoint=endpoint, insecure=not str(endpoint).startswith("https://"))))
        else:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("hedgerow")
        self.kind = trace.SpanKind

    def span(self, name: str, *, kind: Any = None, attributes: dict | None = None,
             parent: Any = None):
        """A span as the current one, child of the current or of `parent` (a context)."""
        return self.tracer.start_as_current_span(
            name, context=parent, kind=kind or self.kind.INTERNAL, attributes=attributes)

    def in_span(self) -> bool:
        """Whether a span is current (a request is being handled)."""
        return self._trace.get_current_span().get_span_context().is_valid

    def inject(self, metadata: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """`metadata` plus the current span's `traceparent` (and `tracestate`)."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return (*metadata, *carrier.items())

    def remote_parent(self, metadata: Iterable[tuple[str, str]]):
        """The context a call's `traceparent` metadata names (an empty one without it)."""
        return self._propagator.extract(dict(metadata or ()), getter=self._getter)

    def finished_span(self, name: str, parent: Any, start: float, end: float, *,
                      kind: Any = None, attributes: dict | None = None):
        """A span from `start` to `end` (time.monotonic() values) under `parent` (a context),
        recorded after the fact; returns the context it is the parent in."""
        span = self.tracer.start_span(name, context=parent, kind=kind or self.kind.INTERNAL,
                                      attributes=attributes, start_time=epoch_ns(start))
        span.end(end_time=epoch_ns(end))
        return self._trace.set_span_in_context(span)

    def close(self) -> None:
        """Export what is still buffered and stop."""
        self.provider.shutdown()


def epoch_ns(monotonic: float) -> int:
    """A time.monotonic() reading as nanoseconds since the epoch."""
    return time.time_ns() - int((time.monotonic() - monotonic) * 1e9)


def setup(component: str, endpoint: str | None) -> Tracing | None:
    """The process's tracing: None (off, nothing imported) without an endpoint."""
    return Tracing(component, endpoint) if endpoint else None


def endpoint_setting(component: str):
    """The `--otlp-endpoint` setting the gateway and the server declare."""
    from hedgerow.settings import setting

    return setting(None, f"OTLP/gRPC collector that this {component} sends OpenTelemetry "
                   "spans to, as http://host:port (https:// for TLS), e.g. "
                   "http://otel-collector:4317. Unset: no tracing, and no cost.",
                   pattern=r"https?://[^\s/]+(:[0-9]+)?/?", pattern_help="http(s)://host:port")
