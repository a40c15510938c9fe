"""The gRPC Embedder servicer: convert, call, convert back; errors translated in one place.

`Embed` decodes and validates the request (ragged layout, per-request token limit, the model's
vocabulary and length checks, dimensions and dtype), submits it to the scheduling loop with the
call's deadline, awaits the rows and answers the response's bytes, written straight from them,
ending with the space's fingerprint (bytes written once at start). `Score` does the same with a
query and its documents (server/score.py), then ranks the documents by cosine on the engine
thread (device work never runs elsewhere). `Rerank` scores query-document pairs with a
cross-encoder (server/rerank.py) and ranks them the same way; `EmbedSparse` answers BGE-M3's
lexical weights or SPLADE's vocabulary weights (server/sparse.py). Embed and Score serve a model
of task `embed` only, Rerank one of task `rerank`, EmbedSparse one of task `sparse`: the other
gets INVALID_ARGUMENT naming the model's task. `Info` reports the engine's model, its task and
the fingerprint of its embedding space. Every embedding and score answer says where the
request's time went (`timing`: queue wait and inference). The gateway's request id arrives as
the call's `x-request-id` metadata; it is read only for a log line: the DEBUG line
`request.done` each call writes at --log-level debug, and the ERROR line `request.failed`. Every
HedgerowError becomes its status code in `_abort`; nothing else is caught. `add_to_server`
registers it with decoders that turn bytes that are no valid message into INVALID_ARGUMENT. The
servicer knows nothing about batching or the engine's internals.
"""

import asyncio
import logging
import time
from pathlib import Path

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from hedgerow import __version__
from hedgerow.defaults import default_model_path
from hedgerow.errors import (
    HedgerowError, InvalidInputError, NotReadyError, OverloadedError,
)
from hedgerow.logs import fields
from hedgerow.tracing import REQUEST_ID_ATTRIBUTE, Tracing
from hedgerow.engine.batch import check_tokens
from hedgerow.server import metrics as m
from hedgerow.server.convert import (
    WireBatch, decode_batch, decode_options, encode_embeddings, timing_field,
)
from hedgerow.server.loop import DeadlineExceededError, EngineStepError
from hedgerow.server.rerank import decode_rerank, rank_pairs
from hedgerow.server.sparse import encode_sparse, sparse_vectors, special_ids
from hedgerow.server.score import decode_score, encode_scores, rank
from hedgerow.server.state import ServerState
from hedgerow.wire import embed_pb2, embed_pb2_grpc

log = logging.getLogger("hedgerow.server.service")

SERVICE_NAME = embed_pb2.DESCRIPTOR.services_by_name["Embedder"].full_name
# The gRPC metadata key of the gateway's request id (its X-Request-Id), and the most of it logged.
REQUEST_ID_KEY = "x-request-id"
MAX_REQUEST_ID = 128

# A client's deadline timer starts before the call reaches this server, so a client that gives
# up at its deadline cancels the call while this server's clock still shows a little time left.
# A cancellation that close to the deadline is counted as deadline_exceeded, not cancelled.
DEADLINE_SLACK_S = 0.05

# The one translation table: error class -> (gRPC status, requests_total status label).
_CODES: list[tuple[type, grpc.StatusCode, str]] = [
    (InvalidInputError, grpc.StatusCode.INVALID_ARGUMENT, m.INVALID),
    (OverloadedError, grpc.StatusCode.RESOURCE_EXHAUSTED, m.OVERLOADED),
    (NotReadyError, grpc.StatusCode.UNAVAILABLE, m.UNAVAILABLE),
    (DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED, m.EXPIRED),
    (EngineStepError, grpc.StatusCode.INTERNAL, m.FAILED),
    (HedgerowError, grpc.StatusCode.INTERNAL, m.FAILED),
]


class UndecodableRequest:
    """Stands in for request bytes that are not a valid message: grpc's own decoding would
    answer UNKNOWN, name a Python class and log a traceback for every such call."""

    def __init__(self, message: str) -> None:
        self.message = message


def _tolerant_decoder(message_class):
    def decode(raw: bytes):
        try:
            return message_class.FromString(raw)
        except DecodeError as error:
            return UndecodableRequest(
                f"the request is not a valid {message_class.DESCRIPTOR.full_name}: {error}")
    return decode


def add_to_server(servicer: "EmbedderService", server: grpc.aio.Server) -> None:
    """Register `servicer` as the generated add_EmbedderServicer_to_server does, but with
    decoders that hand malformed bytes to the servicer (answered INVALID_ARGUMENT), and Embed
    answering the bytes its handler wrote."""
    handlers = {}
    for method in embed_pb2.DESCRIPTOR.services_by_name["Embedder"].methods:
        request = getattr(embed_pb2, method.input_type.name)
        response = getattr(embed_pb2, method.output_type.name)
        serialize = None if method.name == "Embed" else response.SerializeToString
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name), request_deserializer=_tolerant_decoder(request),
            response_serializer=serialize)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


def request_id(context: grpc.aio.ServicerContext) -> str:
    """The call's `x-request-id` metadata ("" without one), cut to MAX_REQUEST_ID characters."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY:
            return value[:MAX_REQUEST_ID]
    return ""


def _decoded(request):
    if isinstance(request, UndecodableRequest):
        raise InvalidInputError(request.message)
    return request


class EmbedderService(embed_pb2_grpc.EmbedderServicer):
    def __init__(self, state: ServerState, tracing: Tracing | None = None) -> None:
        self._state = state
        self._special_ids: frozenset[int] | None = None  # read at the first EmbedSparse
        self._tracing = tracing
        # Decided once: the per-request DEBUG line costs nothing unless it is on.
        self._debug = log.isEnabledFor(logging.DEBUG)

    async def Embed(self, request: embed_pb2.EmbedRequest, context: grpc.aio.ServicerContext
                    ) -> embed_pb2.EmbedResponse:
        return await self._answer(self._embed, request, context)

    async def Score(self, request: embed_pb2.ScoreRequest, context: grpc.aio.ServicerContext
                    ) -> embed_pb2.ScoreResponse:
        return await self._answer(self._score, request, context)

    async def Rerank(self, request: embed_pb2.RerankRequest, context: grpc.aio.ServicerContext
                     ) -> embed_pb2.ScoreResponse:
        return await self._answer(self._rerank, request, context)

    async def EmbedSparse(self, request: embed_pb2.EmbedRequest,
                          context: grpc.aio.ServicerContext) -> embed_pb2.SparseEmbedResponse:
        return await self._answer(self._embed_sparse, request, context)

    async def _answer(self, handler, request, context: grpc.aio.ServicerContext):
        """Run `handler(request, context, start)`, counting its outcome; errors become status."""
        metrics = self._state.metrics
        start = time.monotonic()
        self._state.active_calls += 1
        try:
            response = await handler(_decoded(request), context, start)
        except HedgerowError as error:
            await self._abort(context, error)
        except asyncio.CancelledError:
            remaining = context.time_remaining()
            expired = remaining is not None and remaining <= DEADLINE_SLACK_S
            metrics.requests_by_status[m.EXPIRED if expired else m.CANCELLED].inc()
            raise
        finally:
            self._state.active_calls -= 1
        metrics.record(metrics.requests_by_status[m.OK].inc, 1)
        metrics.record(metrics.request_seconds.observe, time.monotonic() - start)
        return response

    async def _embed(self, request: embed_pb2.EmbedRequest, context: grpc.aio.ServicerContext,
                     start: float) -> bytes:
        engine, loop = self._ready("embed", "Embed")
        batch = self._checked(decode_batch(request, self._state.settings.max_request_tokens))
        options = decode_options(request, engine.info.dimensions, engine.info.normalize)
        rows, queue_us, inference_us = await self._rows(loop, batch, context, start)
        if self._debug:
            self._log_done(context, "Embed", batch, queue_us, inference_us)
        if self._tracing is not None:
            self._trace(context, "Embed", start, queue_us, inference_us)
        return encode_embeddings(rows, options, batch.num_tokens, self._state.space_field,
                                 timing_field(queue_us, inference_us))

    async def _score(self, request: embed_pb2.ScoreRequest, context: grpc.aio.ServicerContext,
                     start: float) -> embed_pb2.ScoreResponse:
        engine, loop = self._ready("embed", "Score")
        query = decode_score(request, self._state.settings.max_request_tokens,
                             engine.info.dimensions)
        self._checked(query.batch)
        rows, queue_us, inference_us = await self._rows(loop, query.batch, context, start)
        indices, scores = await self._state.engine_thread.run(rank, rows, query,
                                                              engine.info.device)
        if self._debug:
            self._log_done(context, "Score", query.batch, queue_us, inference_us)
        if self._tracing is not None:
            self._trace(context, "Score", start, queue_us, inference_us)
        return encode_scores(indices, scores, query.batch.num_tokens,
                             self._state.space.fingerprint, queue_us, inference_us)

    async def _rerank(self, request: embed_pb2.RerankRequest,
                      context: grpc.aio.ServicerContext, start: float) -> embed_pb2.ScoreResponse:
        engine, loop = self._ready("rerank", "Rerank")
        info = engine.info
        query = decode_rerank(request, self._state.settings.max_request_tokens,
                              info.token_types)
        self._checked(query.batch)
        batch = query.folded(info.vocab_size, info.token_types)
        rows, queue_us, inference_us = await self._rows(loop, batch, context, start)
        indices, scores = await self._state.engine_thread.run(rank_pairs, rows, query.top_n,
                                                              info.device)
        if self._debug:
            self._log_done(context, "Rerank", batch, queue_us, inference_us)
        if self._tracing is not None:
            self._trace(context, "Rerank", start, queue_us, inference_us)
        return encode_scores(indices, scores, batch.num_tokens, self._state.space.fingerprint,
                             queue_us, inference_us)

    async def _embed_sparse(self, request: embed_pb2.EmbedRequest,
                            context: grpc.aio.ServicerContext, start: float
                            ) -> embed_pb2.SparseEmbedResponse:
        engine, loop = self._ready("sparse", "EmbedSparse")
        batch = self._checked(decode_batch(request, self._state.settings.max_request_tokens))
        rows, queue_us, inference_us = await self._rows(loop, batch, context, start)
        if self._debug:
            self._log_done(context, "EmbedSparse", batch, queue_us, inference_us)
        if self._tracing is not None:
            self._trace(context, "EmbedSparse", start, queue_us, inference_us)
        if self._special_ids is None:
            self._special_ids = special_ids(Path(self._state.settings.model
                                                 or default_model_path()))
        vectors = sparse_vectors(engine.info.pooling, batch.input_ids, batch.cu_seqlens, rows,
                                 self._special_ids)
        return encode_sparse(vectors, batch.num_tokens, self._state.space.fingerprint,
                             queue_us, inference_us)

    def _checked(self, batch: WireBatch) -> WireBatch:
        """`batch`, once the model's own checks (vocabulary, sequence length) pass."""
        info = self._state.engine.info
        check_tokens(batch.input_ids, batch.cu_seqlens, batch.max_seqlen, info.vocab_size,
                     info.max_tokens)
        return batch

    async def _rows(self, loop, batch: WireBatch, context: grpc.aio.ServicerContext,
                    start: float) -> tuple[np.ndarray, int, int]:
        """Submit the batch with the call's deadline; its rows float32 [B, D], and the
        microseconds it waited for its first batch and then until its last row was back."""
        remaining = context.time_remaining()
        deadline = None if remaining is None else start + remaining
        pending = loop.submit(batch.input_ids, batch.cu_seqlens, batch.lengths, deadline)
        rows = await loop.result(pending)
        batched = pending.batched if pending.batched is not None else pending.arrival
        return (rows, int((batched - pending.arrival) * 1e6),
                int((time.monotonic() - batched) * 1e6))

    def _trace(self, context: grpc.aio.ServicerContext, method: str, start: float,
               queue_us: int, inference_us: int) -> None:
        """The call's spans, under the caller's `traceparent`: the call, and inside it the
        queue wait and the step (batched until its rows were back), recorded after the fact
        from the times the request measured."""
        tracing, end = self._tracing, time.monotonic()
        metadata = context.invocation_metadata() or ()
        batched = end - inference_us / 1e6
        call = tracing.finished_span(
            f"server {method}", tracing.remote_parent(metadata), start, end,
            kind=tracing.kind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.method": method,
                        REQUEST_ID_ATTRIBUTE: request_id(context)})
        tracing.finished_span("queue", call, batched - queue_us / 1e6, batched)
        tracing.finished_span("step", call, batched, end)

    @staticmethod
    def _log_done(context: grpc.aio.ServicerContext, method: str, batch: WireBatch,
                  queue_us: int, inference_us: int) -> None:
        log.debug("%s", fields(event="request.done", request_id=request_id(context),
                               method=method, sequences=batch.num_seqs, tokens=batch.num_tokens,
                               queue_ms=queue_us / 1000, inference_ms=inference_us / 1000))

    async def Info(self, request: embed_pb2.InfoRequest, context: grpc.aio.ServicerContext
                   ) -> embed_pb2.InfoResponse:
        try:
            _decoded(request)
            engine, _ = self._ready()
        except HedgerowError as error:
            await self._abort(context, error, count=False)
        info = engine.info
        return embed_pb2.InfoResponse(
            model=info.name,
            architecture=info.architecture,
            dimensions=info.dimensions,
            max_tokens=info.max_tokens,
            max_request_tokens=self._state.settings.max_request_tokens,
            max_inflight_tokens=self._state.settings.max_inflight_tokens,
            pooling=info.pooling,
            normalize=info.normalize,
            templates=dict(info.templates),
            version=__version__,
            vocab_size=info.vocab_size,
            dtype=info.dtype,
            dtype_reason=info.dtype_reason,
            space=self._state.space.fingerprint,
            task=info.task,
            token_types=info.token_types,
        )

    def _ready(self, task: str | None = None, method: str = ""):
        """The engine and loop once loaded; InvalidInputError when the model's task is not
        `task`, the one `method` serves."""
        state = self._state
        if state.engine is None or state.loop is None:
            raise NotReadyError("the model is still loading; retry shortly")
        info = state.engine.info
        if task is not None and info.task != task:
            serves = {"embed": "embeddings (Embed, Score)",
                      "rerank": "query-document pair scores (Rerank)",
                      "sparse": "sparse vectors (EmbedSparse)"}[info.task]
            raise InvalidInputError(f"{method} needs a model of task {task!r}; model "
                                    f"{info.name} is of task {info.task!r}: it serves {serves}")
        return state.engine, state.loop

    async def _abort(self, context: grpc.aio.ServicerContext, error: HedgerowError,
                     count: bool = True) -> None:
        for kind, code, label in _CODES:
            if isinstance(error, kind):
                break
        if count:
            self._state.metrics.requests_by_status[label].inc()
        if code is grpc.StatusCode.INTERNAL:
            log.error("%s", fields(event="request.failed", request_id=request_id(context),
                                   error=str(error)))
        await context.abort(code, str(error))
