"""The HTTP API: FastAPI routes that convert JSON to service calls and back.

Owns the routes (`POST /v1/embeddings`, `POST /v1/rerank`, `GET /v1/models`, `POST /tokenize`,
`GET /healthz`, `GET /readyz`, `GET /metrics`), reading a body under the size limit before any
parsing, the API key check, the request deadline, latency metrics by route and status, and the
app's lifetime (replica watchers start and stop with it). Request logic lives in `service.py`
and `rerank.py`, errors are translated in `http_errors.py`.
"""

import asyncio
import contextlib
import functools
import json
import logging
import time
from typing import AsyncIterator, Awaitable, TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from hedgerow import __version__
from hedgerow.gateway import http_errors
from hedgerow.gateway.auth import ApiKeys
from hedgerow.gateway.chunking import offsets
from hedgerow.gateway.errors import BodyTooLargeError, RequestError
from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.gateway.model_card import ModelCard
from hedgerow.gateway.replicas import ReplicaSet
from hedgerow.gateway.rerank import Reranker, RerankRequest, rerank_body
from hedgerow.gateway.router import Router
from hedgerow.gateway.schema import (
    EmbeddingsRequest,
    TokenizeRequest,
    embeddings_body,
    tokenize_body,
)
from hedgerow.gateway.service import EmbeddingService
from hedgerow.gateway.settings import GatewaySettings
from hedgerow.gateway.tokenizer import TextTokenizer
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway")

TIMEOUT_HEADER = "x-request-timeout"
OPENAI_TIMEOUT_HEADER = "x-stainless-read-timeout"
# Responses with more floats than this are JSON-encoded off the event loop.
INLINE_ENCODE_VALUES = 64 * 1024
DISCONNECT_POLL_S = 0.25
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request its client abandoned; nobody reads it
T = TypeVar("T")


class ClientGone(Exception):
    """The HTTP client disconnected before its answer was ready."""


async def while_connected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it when the client disconnects: its chunks still waiting for
    room are never sent and the servers drop its queued sequences (cancelled gRPC calls),
    instead of spending the request's whole deadline on an answer nobody reads."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGone()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def read_json(request: Request, limit: int) -> object:
    """The body as JSON; 413 past `limit` bytes (checked before parsing), 400 when malformed."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(
            f"the request body is {declared} bytes; at most {limit} are accepted "
            "(--max-body-bytes)", code="body_too_large")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise BodyTooLargeError(
                f"the request body is over {limit} bytes, the most accepted (--max-body-bytes)",
                code="body_too_large")
        parts.append(part)
    raw = b"".join(parts)
    if not raw.strip():
        raise RequestError("the request body is empty; send a JSON object",
                           code="invalid_json")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(f"the request body is not valid UTF-8 (byte {error.start})",
                           code="invalid_encoding") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise RequestError(
            f"the request body is not valid JSON: {error.msg} at line {error.lineno} "
            f"column {error.colno}", code="invalid_json") from None
    except RecursionError:
        raise RequestError("the request body's JSON is nested too deeply",
                           code="invalid_json") from None


def _seconds(raw: str) -> float | None:
    """A positive, finite number of seconds from a header, else None."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 < value < float("inf") else None


def create_app(settings: GatewaySettings, card: ModelCard, tokenizer: TextTokenizer,
               api_keys: ApiKeys) -> FastAPI:
    """The gateway app; its lifespan starts discovery and health watching."""
    metrics = GatewayMetrics()
    # `service` is bound below, before the lifespan starts the watchers that call this.
    replicas = ReplicaSet(
        servers=settings.servers, service_dns=settings.service_dns,
        dns_interval=settings.dns_interval, health_interval=settings.health_interval,
        on_info=lambda replica, info: service.adopt_info(info),
        on_status=lambda replica: metrics.ready_replicas.set(len(replicas.ready())),
        on_removed=metrics.forget_replica,
    )
    router = Router(replicas, metrics)
    service = EmbeddingService(settings, card, tokenizer, router, metrics)
    reranker = Reranker(service)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await replicas.start()
        log.info("%s", fields(event="gateway.started", model=card.name,
                              replicas=",".join(replicas.replicas) or "none",
                              auth="on" if api_keys.enabled else "off"))
        try:
            yield
        finally:
            await replicas.close()
            tokenizer.close()

    app = FastAPI(title="Hedgerow gateway", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.replicas = replicas
    app.state.metrics = metrics
    http_errors.install(app)
    app.add_middleware(LatencyMiddleware, metrics=metrics)

    async def authorized(request: Request) -> None:
        api_keys.check(request.headers.get("authorization"))

    async def deadline(request: Request) -> float:
        """The request's deadline on the loop's clock: our timeout, shortened by the client's.

        X-Request-Timeout is ours (seconds; malformed is a 400). OpenAI's clients send their
        read timeout as x-stainless-read-timeout; it is honoured when it parses.
        """
        budget = settings.request_timeout
        raw = request.headers.get(TIMEOUT_HEADER)
        if raw is not None:
            asked = _seconds(raw)
            if asked is None:
                raise RequestError(f"{TIMEOUT_HEADER} is {raw!r}; send a positive number of "
                                   "seconds", param=TIMEOUT_HEADER)
            budget = min(budget, asked)
        client_timeout = _seconds(request.headers.get(OPENAI_TIMEOUT_HEADER, ""))
        if client_timeout is not None:
            budget = min(budget, client_timeout)
        return asyncio.get_running_loop().time() + budget

    @app.post("/v1/embeddings", dependencies=[Depends(authorized)])
    async def embeddings(request: Request, until: float = Depends(deadline)) -> Response:
        body = EmbeddingsRequest.model_validate(
            await read_json(request, settings.max_body_bytes))
        try:
            result = await while_connected(request, service.embed(
                body.input, model=body.model, dimensions=body.dimensions,
                input_type=body.input_type, deadline=until))
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        encode = functools.partial(
            embeddings_body, result.embeddings, model=service.card.name,
            prompt_tokens=result.prompt_tokens, encoding_format=body.encoding_format or "float")
        if result.embeddings.size <= INLINE_ENCODE_VALUES:
            content = encode()
        else:  # a large response is encoded in a thread so the event loop keeps serving
            content = await asyncio.get_running_loop().run_in_executor(None, encode)
        return Response(content, media_type="application/json")

    @app.post("/v1/rerank", dependencies=[Depends(authorized)])
    async def rerank(request: Request, until: float = Depends(deadline)) -> Response:
        body = RerankRequest.model_validate(await read_json(request, settings.max_body_bytes))
        try:
            result = await while_connected(request, reranker.rerank(body, deadline=until))
        except ClientGone:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        return Response(rerank_body(result, model=service.card.name,
                                    return_documents=body.return_documents),
                        media_type="application/json")

    @app.post("/tokenize", dependencies=[Depends(authorized)])
    async def tokenize(request: Request) -> Response:
        body = TokenizeRequest.model_validate(await read_json(request, settings.max_body_bytes))
        service.check_model(body.model)
        sequences = await service.sequences(body.input, body.input_type)
        starts = offsets(sequences.lengths)
        split = [sequences.input_ids[starts[i]:starts[i + 1]]
                 for i in range(len(sequences.lengths))]
        return Response(tokenize_body(split, model=service.card.name),
                        media_type="application/json")

    @app.get("/v1/models", dependencies=[Depends(authorized)])
    async def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{
            "id": service.card.name, "object": "model", "created": 0, "owned_by": "hedgerow",
            "dimensions": service.card.dimensions, "max_tokens": service.card.max_tokens,
        }]})

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        ready = [replica.address for replica in replicas.ready()]
        body = {"status": "ready" if ready else "not ready", "ready_replicas": ready,
                "known_replicas": sorted(replicas.replicas)}
        if ready:
            return JSONResponse(body)
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    return app


class LatencyMiddleware:
    """Observe every HTTP request's latency under its route template and final status."""

    def __init__(self, app, metrics: GatewayMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def capture(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"
            self.metrics.request_seconds.labels(name, str(status["code"])).observe(
                time.perf_counter() - started)

