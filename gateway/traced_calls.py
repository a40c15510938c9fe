"""The gRPC client interceptor that traces the gateway's calls to the servers.

Owns the chunk spans: each unary call made while a request's span is current (an Embed or
Score chunk, each retry its own) gets a client span, child of the request's, and carries it as
W3C `traceparent` metadata; calls outside a request (Info, health checks) pass untouched. It is
installed on the channels only when tracing is on (gateway/app.py): without --otlp-endpoint
they carry no interceptor at all. Knows nothing about routing.
"""

import grpc

from hedgerow.tracing import Tracing


class TracedCalls(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    async def intercept_unary_unary(self, continuation, details, request):
        tracing = self._tracing
        if not tracing.in_span():
            return await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        with tracing.span(f"chunk {method.rsplit('/', 1)[-1]}", kind=tracing.kind.CLIENT,
                          attributes={"rpc.system": "grpc", "rpc.method": method}) as span:
            metadata = grpc.aio.Metadata(*tracing.inject(tuple(details.metadata or ())))
            call = await continuation(details._replace(metadata=metadata), request)
            try:
                await call  # the span lasts until the answer
            except grpc.aio.AioRpcError as error:
                span.set_attribute("rpc.grpc.status_code", error.code().value[0])
                raise
            return call
