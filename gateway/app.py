"""The HTTP API: thin routes that convert JSON to service calls and back.

Owns the routes (`POST /v1/embeddings`, `POST /v1/rerank`, `GET /v1/models`, `POST /tokenize`,
`GET /healthz`, `GET /readyz`, `GET /metrics`), the API key check, the request deadline and the
gateway's lifetime (`Gateway.start` starts the replica watchers, `stop` ends them). Request
logic lives in `service.py` and `rerank.py`, HTTP in `http.py` and `protocol.py`, errors are
translated in `http_errors.py`.
"""

import asyncio
import functools
import logging
import types

from hedgerow.gateway.auth import ApiKeys
from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.http import HttpApp, Request, Response, json_response, parse_json
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

TIMEOUT_HEADER = b"x-request-timeout"
OPENAI_TIMEOUT_HEADER = b"x-stainless-read-timeout"
# Responses with more floats than this are JSON-encoded off the event loop.
INLINE_ENCODE_VALUES = 64 * 1024


def _seconds(raw: str | None) -> float | None:
    """A positive, finite number of seconds from a header, else None."""
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if 0 < value < float("inf") else None


class Gateway:
    """The app and its lifetime: `await start()` before serving, `await stop()` after."""

    def __init__(self, app: HttpApp, start, stop) -> None:
        self.app, self.start, self.stop = app, start, stop


def create_app(settings: GatewaySettings, card: ModelCard, tokenizer: TextTokenizer,
               api_keys: ApiKeys, metrics: GatewayMetrics | None = None) -> Gateway:
    """The gateway: its app, and the start and stop of discovery and health watching."""
    metrics = metrics or GatewayMetrics()
    # `service` is bound below, before the lifespan starts the watchers that call this.
    replicas = ReplicaSet(
        servers=settings.servers, service_dns=settings.service_dns,
        dns_interval=settings.dns_interval, health_interval=settings.health_interval,
        on_info=lambda replica, info: service.adopt_info(info),
        on_status=lambda replica: metrics.ready_replicas.set(len(replicas.ready())),
        on_removed=metrics.forget_replica,
    )
    router = Router(replicas, metrics, settings.max_queue_seconds)
    service = EmbeddingService(settings, card, tokenizer, router, metrics)
    reranker = Reranker(service)

    async def start() -> None:
        await replicas.start()
        log.info("%s", fields(event="gateway.started", model=card.name,
                              replicas=",".join(replicas.replicas) or "none",
                              auth="on" if api_keys.enabled else "off"))

    async def stop() -> None:
        await replicas.close()
        tokenizer.close()

    app = HttpApp(metrics.observe_request)
    app.state = types.SimpleNamespace(service=service, replicas=replicas, metrics=metrics)

    def deadline(request: Request) -> float:
        """The request's deadline on the loop's clock: our timeout, shortened by the client's.

        X-Request-Timeout is ours (seconds; malformed is a 400). OpenAI's clients send their
        read timeout as x-stainless-read-timeout; it is honoured when it parses.
        """
        budget = settings.request_timeout
        raw = request.header(TIMEOUT_HEADER)
        if raw is not None:
            asked = _seconds(raw)
            if asked is None:
                raise RequestError(f"x-request-timeout is {raw!r}; send a positive number of "
                                   "seconds", param="x-request-timeout")
            budget = min(budget, asked)
        client_timeout = _seconds(request.header(OPENAI_TIMEOUT_HEADER))
        if client_timeout is not None:
            budget = min(budget, client_timeout)
        return asyncio.get_running_loop().time() + budget

    def body_of(request: Request):
        """Authorised, then the JSON body."""
        api_keys.check(request.header(b"authorization"))
        return parse_json(request.body)

    @app.route("POST", "/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body = EmbeddingsRequest.parse(body_of(request))
        result = await service.embed(body.input, model=body.model, dimensions=body.dimensions,
                                     input_type=body.input_type, deadline=deadline(request))
        encode = functools.partial(
            embeddings_body, result.embeddings, model=service.card.name,
            prompt_tokens=result.prompt_tokens, encoding_format=body.encoding_format)
        if result.embeddings.size <= INLINE_ENCODE_VALUES:
            return Response(encode())
        # A large response is encoded in a thread so the event loop keeps serving.
        return Response(await asyncio.get_running_loop().run_in_executor(None, encode))

    @app.route("POST", "/v1/rerank")
    async def rerank(request: Request) -> Response:
        body = RerankRequest.parse(body_of(request))
        result = await reranker.rerank(body, deadline=deadline(request))
        return Response(rerank_body(result, model=service.card.name,
                                    return_documents=body.return_documents))

    @app.route("POST", "/tokenize")
    async def tokenize(request: Request) -> Response:
        body = TokenizeRequest.parse(body_of(request))
        service.check_model(body.model)
        sequences = await service.sequences(body.input, body.input_type)
        starts = sequences.starts()
        split = [sequences.input_ids[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]
        return Response(tokenize_body(split, model=service.card.name))

    @app.route("GET", "/v1/models")
    async def models(request: Request) -> Response:
        api_keys.check(request.header(b"authorization"))
        return json_response({"object": "list", "data": [{
            "id": service.card.name, "object": "model", "created": 0, "owned_by": "hedgerow",
            "dimensions": service.card.dimensions, "max_tokens": service.card.max_tokens,
        }]})

    @app.route("GET", "/healthz")
    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    @app.route("GET", "/readyz")
    async def readyz(request: Request) -> Response:
        ready = [replica.address for replica in replicas.ready()]
        body = {"status": "ready" if ready else "not ready", "ready_replicas": ready,
                "known_replicas": sorted(replicas.replicas)}
        if ready:
            return json_response(body)
        return json_response(body, 503, headers=((b"retry-after", b"1"),))

    @app.route("GET", "/metrics")
    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), content_type=metrics.content_type.encode())

    return Gateway(app, start, stop)
