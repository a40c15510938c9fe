"""The HTTP API: thin routes that convert JSON to service calls and back.

Owns the routes, the API key check, the request deadline and the gateway's lifetime
(`Gateway.start` starts the replica watchers, `stop` ends them). The routes speak three APIs:
OpenAI's (`POST /v1/embeddings`, `/v1/embeddings/sparse`, `GET /v1/models`, `GET
/v1/models/{model}`, and the Cohere v1 and Jina style `POST /v1/rerank`), Cohere's v2 (`POST
/v2/embed`, `POST /v2/rerank`) and Text Embeddings Inference's (`POST /embed`, `/embed_sparse`,
`/rerank`, `/similarity`, `/`, `GET /info`, `/health`, `/`); `POST /tokenize` answers
OpenAI-style for `input` and TEI-style for `inputs`. Operations: `GET /healthz`, `/readyz`,
`/metrics`. Every answer that carries embeddings or rerank scores names their space in the
header `x-embedding-space` (OpenAI's embeddings body also in `embedding_space`); every
embeddings answer carries TEI's timing headers (x-total-time, x-tokenization-time, x-queue-time,
x-inference-time). Request logic lives in `service.py` and `rerank.py`, the other APIs' shapes
in `cohere.py` and `tei.py`, routing and error guarding in `http.py` (on FastAPI), the
documented request and answer schemas in `openapi.py`; errors are translated in
`http_errors.py`, in the shape of the route's API.
"""

import asyncio
import contextlib
import functools
import gc
import logging
import time
import urllib.parse

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from hedgerow import tracing as hedgerow_tracing
from hedgerow.gateway import cohere, openapi, tei
from hedgerow.gateway.access_log import AccessLog
from hedgerow.gateway.auth import ApiKeys
from hedgerow.gateway.errors import ModelNotFoundError, NoReplicaError, RequestError
from hedgerow.gateway.http import (
    STYLE_KEY,
    GatewayApp,
    Request,
    Response,
    Routes,
    Style,
    json_response,
    parse_json,
)
from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.gateway.model_card import ModelCard
from hedgerow.gateway.replicas import ReplicaSet
from hedgerow.gateway.request_context import current
from hedgerow.gateway.rerank import Reranker, RerankRequest, rerank_body
from hedgerow.gateway.router import NO_REPLICA_MESSAGE, Router
from hedgerow.gateway.schema import (
    EmbeddingsRequest,
    SparseEmbeddingsRequest,
    TokenizeRequest,
    embeddings_body,
    json_object,
    sparse_embeddings_body,
    tokenize_body,
)
from hedgerow.gateway.service import Embedded, EmbeddingService
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.gateway.tokenizer import TextTokenizer
from hedgerow.gateway.traced_calls import TracedCalls
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway")

TIMEOUT_HEADER = "x-request-timeout"
# Names the embedding space of an answer's vectors (also the body's `embedding_space`).
SPACE_HEADER = b"x-embedding-space"
OPENAI_TIMEOUT_HEADER = "x-stainless-read-timeout"
MODELS_PATH = "/v1/models/"
# Responses with more floats than this are JSON-encoded off the event loop.
INLINE_ENCODE_VALUES = 64 * 1024


def space_header(space: str) -> tuple[tuple[bytes, bytes], ...]:
    """The header that names the embedding space of an answer's vectors or scores."""
    return ((SPACE_HEADER, space.encode()),)


def _seconds(raw: str | None) -> float | None:
    """A positive, finite number of seconds from a header, else None."""
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if 0 < value < float("inf") else None


def create_app(settings: GatewaySettings, card: ModelCard, tokenizer: TextTokenizer,
               api_keys: ApiKeys, metrics: GatewayMetrics | None = None,
               tracing: hedgerow_tracing.Tracing | None = None) -> GatewayApp:
    """The gateway's FastAPI app; its lifespan starts and stops discovery and health
    watching. `app.state` holds the service, the replicas and the metrics. `tracing`
    replaces the tracing --otlp-endpoint sets up (a test's in-memory exporter)."""
    metrics = metrics or GatewayMetrics(card.name)
    traces = tracing or hedgerow_tracing.setup("gateway", settings.otlp_endpoint)
    # `service` is bound below, before the lifespan starts the watchers that call this.
    replicas = ReplicaSet(
        servers=settings.servers, service_dns=settings.service_dns,
        dns_interval=settings.dns_interval, health_interval=settings.health_interval,
        on_info=lambda replica, info: service.adopt_info(info),
        on_status=lambda replica: metrics.ready_replicas.set(len(replicas.ready())),
        on_removed=metrics.forget_replica,
        tls=settings.tls_files(), tls_server_name=settings.tls_server_name,
        interceptors=(TracedCalls(traces),) if traces else (),
    )
    router = Router(replicas, metrics, settings.max_queue_seconds,
                    eject_after=settings.eject_after_failures)
    service = EmbeddingService(settings, card, tokenizer, router, metrics)
    reranker = Reranker(service)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await replicas.start()
        log.info("%s", fields(event="gateway.started", model=card.name,
                              replicas=",".join(replicas.replicas) or "none",
                              auth="on" if api_keys.enabled else "off"))
        # What exists now lives until exit: keep it out of the collector's full passes.
        gc.freeze()
        yield
        await replicas.close()
        tokenizer.close()
        if traces is not None:
            traces.close()

    app = GatewayApp(title="Hedgerow gateway", version=openapi.VERSION,
                  description=openapi.DESCRIPTION, lifespan=lifespan,
                  docs_url="/docs" if settings.docs else None, redoc_url=None)
    app.state.service, app.state.replicas, app.state.metrics = service, replicas, metrics
    routes = Routes(app, metrics.observe_request, AccessLog(settings.access_log_sample), traces)

    def deadline(request: Request) -> float:
        """The request's deadline (a time.monotonic() value): our timeout, shortened by the
        client's.

        X-Request-Timeout is ours (seconds; malformed is a 400). OpenAI's clients send their
        read timeout as x-stainless-read-timeout; it is honoured when it parses.
        """
        budget = settings.request_timeout
        raw = request.headers.get(TIMEOUT_HEADER)
        if raw is not None:
            asked = _seconds(raw)
            if asked is None:
                raise RequestError(f"x-request-timeout is {raw!r}; send a positive number of "
                                   "seconds", param="x-request-timeout")
            budget = min(budget, asked)
        client_timeout = _seconds(request.headers.get(OPENAI_TIMEOUT_HEADER))
        if client_timeout is not None:
            budget = min(budget, client_timeout)
        return time.monotonic() + budget

    async def body_of(request: Request):
        """Authorised, then the JSON body."""
        api_keys.check(request.headers.get("authorization"))
        return parse_json(await request.body())

    @routes.route("POST", "/v1/embeddings", tags=["OpenAI"], summary="Create embeddings",
                  openapi_extra=openapi.body(openapi.EmbeddingsRequest),
                  response_model=openapi.EmbeddingsResponse,
                  responses=openapi.errors(openapi.OpenAIError))
    async def embeddings(request: Request) -> Response:
        body = EmbeddingsRequest.parse(await body_of(request))
        result = await service.embed(body.input, model=body.model, dimensions=body.dimensions,
                                     input_type=body.input_type, deadline=deadline(request))
        encode = functools.partial(
            embeddings_body, result.embeddings, model=service.card.name,
            prompt_tokens=result.prompt_tokens, encoding_format=body.encoding_format,
            space=result.space)
        return await encoded(encode, result)

    @routes.route("POST", "/v1/embeddings/sparse", tags=["OpenAI"],
                  summary="Create sparse embeddings (a model served with task sparse)",
                  openapi_extra=openapi.body(openapi.SparseEmbeddingsRequest),
                  response_model=openapi.SparseEmbeddingsResponse,
                  responses=openapi.errors(openapi.OpenAIError))
    async def sparse_embeddings(request: Request) -> Response:
        body = SparseEmbeddingsRequest.parse(await body_of(request))
        vectors, tokens, space = await service.embed_sparse(
            body.input, model=body.model, input_type=body.input_type,
            deadline=deadline(request), truncate=None, param="input")
        return Response(sparse_embeddings_body(vectors, model=service.card.name,
                                               prompt_tokens=tokens, space=space),
                        headers=space_header(space), tokens=tokens)

    async def encoded(encode, result: Embedded) -> Response:
        """The body `encode()` writes, with the headers naming the vectors' space and TEI's
        timings; a large one is encoded in a thread so the event loop keeps serving."""
        if result.embeddings.size <= INLINE_ENCODE_VALUES:
            body = encode()
        else:
            body = await asyncio.get_running_loop().run_in_executor(None, encode)
        headers = space_header(result.space) + current().timing_headers()
        return Response(body, headers=headers, tokens=result.prompt_tokens)

    @routes.route("POST", "/v1/rerank", tags=["Rerank (Cohere v1, Jina)"],
                  summary="Rank documents against a query",
                  openapi_extra=openapi.body(openapi.RerankRequest),
                  response_model=openapi.RerankResponse,
                  responses=openapi.errors(openapi.OpenAIError))
    async def rerank(request: Request) -> Response:
        body = RerankRequest.parse(await body_of(request))
        result = await reranker.rerank(body, deadline=deadline(request))
        return Response(rerank_body(result, model=service.card.name,
                                    return_documents=body.return_documents),
                        headers=space_header(result.space), tokens=result.total_tokens)

    @routes.route("POST", "/tokenize", tags=["OpenAI"], summary="Tokenize (OpenAI or TEI style)",
                  openapi_extra=openapi.body(openapi.TokenizeRequest),
                  responses=openapi.errors(openapi.OpenAIError))
    async def tokenize(request: Request) -> Response:
        raw = await body_of(request)
        if isinstance(raw, dict) and "inputs" in raw and "input" not in raw:
            request.scope[STYLE_KEY] = Style.TEI
            return await tei_tokenize(raw)
        body = TokenizeRequest.parse(raw)
        service.check_model(body.model)
        sequences = await service.sequences(body.input, body.input_type)
        starts = sequences.starts()
        split = [sequences.input_ids[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]
        return Response(tokenize_body(split, model=service.card.name))

    async def tei_tokenize(raw: dict) -> Response:
        body = tei.TokenizeRequest.parse(raw, settings.max_inputs)
        template = service.template(body.prompt_name)
        texts = [template + text for text in body.texts]
        encodings = await tokenizer.encodings(texts, body.add_special_tokens)
        return Response(tei.tokens_body(texts, encodings))

    def model_entry(name: str) -> dict:
        card = service.card
        return {"id": name, "object": "model", "created": 0, "owned_by": "hedgerow",
                "dimensions": card.dimensions, "max_tokens": card.max_tokens}

    @routes.route("GET", "/v1/models", tags=["OpenAI"], summary="List the served model",
                  response_model=openapi.ModelList)
    async def models(request: Request) -> Response:
        api_keys.check(request.headers.get("authorization"))
        return json_response({"object": "list",
                              "data": [model_entry(name) for name in service.model_names]})

    def model_path_name(request: Request) -> str:
        """The model named in the path, %-decoded (so `%2F` is a slash), strictly UTF-8."""
        raw = request.scope["raw_path"][len(MODELS_PATH):].decode("latin-1")
        try:
            return urllib.parse.unquote(raw, errors="strict")
        except UnicodeDecodeError:
            raise RequestError(f"the path {request.scope['raw_path'].decode('latin-1')!r} is "
                               "not valid UTF-8 once %-decoded", code="invalid_encoding") from None

    @routes.route("GET", MODELS_PATH + "{model:path}", tags=["OpenAI"],
                  summary="Describe the served model", response_model=openapi.Model,
                  openapi_extra=openapi.MODEL_PARAMETER,
                  responses=openapi.errors(openapi.OpenAIError))
    async def model(request: Request) -> Response:
        api_keys.check(request.headers.get("authorization"))
        name = model_path_name(request)
        if name not in service.model_names:
            served = " or ".join(repr(known) for known in service.model_names)
            raise ModelNotFoundError(f"model {name!r} is not served here; this gateway "
                                     f"serves {served}", param="model")
        return json_response(model_entry(name))

    # --- Cohere v2 ----------------------------------------------------------------------------

    @routes.route("POST", "/v2/embed", errors=Style.COHERE, tags=["Cohere v2"],
                  summary="Embed texts", openapi_extra=openapi.body(openapi.CohereEmbedRequest),
                  responses=openapi.errors(openapi.CohereError))
    async def cohere_embed(request: Request) -> Response:
        body = cohere.EmbedRequest.parse(await body_of(request))
        cohere.check_texts(body.texts)
        result = await service.embed(body.texts, model=body.model, dimensions=body.dimensions,
                                     input_type=body.template_name, truncate=body.truncate,
                                     deadline=deadline(request), param="texts")
        return await encoded(functools.partial(cohere.embed_body, result.embeddings, body.texts,
                                               body.embedding_types, result.prompt_tokens),
                             result)

    @routes.route("POST", "/v2/rerank", errors=Style.COHERE, tags=["Cohere v2"],
                  summary="Rank documents against a query",
                  openapi_extra=openapi.body(openapi.CohereRerankRequest),
                  responses=openapi.errors(openapi.CohereError))
    async def cohere_rerank(request: Request) -> Response:
        result = await reranker.rerank(cohere.rerank_request(await body_of(request)),
                                       deadline=deadline(request))
        return Response(cohere.rerank_body(result), headers=space_header(result.space),
                        tokens=result.total_tokens)

    # --- Text Embeddings Inference ------------------------------------------------------------

    async def tei_embed(request: Request, raw: dict) -> Response:
        body = tei.EmbedRequest.parse(raw)
        result = await service.embed(body.inputs, model=None, dimensions=body.dimensions,
                                     input_type=None, template=service.template(
                                         body.prompt_name),
                                     truncate=body.truncate, normalize=body.normalize,
                                     deadline=deadline(request), param="inputs")
        return await encoded(functools.partial(tei.embed_body, result.embeddings), result)

    async def tei_similarity(request: Request, raw: dict) -> Response:
        body = tei.SimilarityRequest.parse(raw, settings.max_inputs)
        result = await service.embed([body.source_sentence, *body.sentences], model=None,
                                     dimensions=None, input_type=None,
                                     template=service.template(body.prompt_name,
                                                               "parameters.prompt_name"),
                                     truncate=body.truncate, deadline=deadline(request),
                                     param="inputs.sentences")
        return Response(tei.similarity_body(result.embeddings), headers=space_header(result.space),
                        tokens=result.prompt_tokens)

    @routes.route("POST", "/embed", errors=Style.TEI, tags=["Text Embeddings Inference"],
                  summary="Embed", openapi_extra=openapi.body(openapi.TeiEmbedRequest),
                  response_model=list[list[float]],
                  responses=openapi.errors(openapi.TeiError, invalid=422))
    async def embed(request: Request) -> Response:
        return await tei_embed(request, json_object(await body_of(request)))

    @routes.route("POST", "/embed_sparse", errors=Style.TEI,
                  tags=["Text Embeddings Inference"],
                  summary="Sparse vectors (a model served with task sparse: BGE-M3's lexical "
                          "weights or SPLADE)",
                  openapi_extra=openapi.body(openapi.TeiSparseRequest),
                  response_model=list[list[openapi.SparseValue]],
                  responses=openapi.errors(openapi.TeiError, invalid=422))
    async def embed_sparse(request: Request) -> Response:
        body = tei.EmbedRequest.parse(json_object(await body_of(request)))
        vectors, tokens, space = await service.embed_sparse(
            body.inputs, deadline=deadline(request), truncate=body.truncate,
            template=service.template(body.prompt_name))
        return Response(tei.sparse_body(vectors), headers=space_header(space), tokens=tokens)

    @routes.route("POST", "/similarity", errors=Style.TEI, tags=["Text Embeddings Inference"],
                  summary="Similarity of sentences to a source sentence",
                  openapi_extra=openapi.body(openapi.TeiSimilarityRequest),
                  response_model=list[float],
                  responses=openapi.errors(openapi.TeiError, invalid=422))
    async def similarity(request: Request) -> Response:
        return await tei_similarity(request, json_object(await body_of(request)))

    @routes.route("POST", "/", errors=Style.TEI, tags=["Text Embeddings Inference"],
                  summary="Embed, or similarity (TEI's default route)",
                  openapi_extra=openapi.body(openapi.TeiRootRequest),
                  responses=openapi.errors(openapi.TeiError, invalid=422))
    async def root(request: Request) -> Response:
        """TEI's default route for an embedding model; InferenceClient's feature_extraction
        and sentence_similarity both post here, told apart by the shape of `inputs`."""
        raw = json_object(await body_of(request))
        if tei.is_similarity(raw):
            return await tei_similarity(request, raw)
        return await tei_embed(request, raw)

    @routes.route("POST", "/rerank", errors=Style.TEI, tags=["Text Embeddings Inference"],
                  summary="Rank texts against a query",
                  openapi_extra=openapi.body(openapi.TeiRerankRequest),
                  response_model=list[openapi.TeiRank],
                  responses=openapi.errors(openapi.TeiError, invalid=422))
    async def tei_rerank(request: Request) -> Response:
        body = tei.rerank_request(await body_of(request))
        result = await reranker.rerank(body, deadline=deadline(request))
        return Response(tei.rerank_body(result, body.return_documents),
                        headers=space_header(result.space), tokens=result.total_tokens)

    @routes.route("GET", "/info", errors=Style.TEI, tags=["Text Embeddings Inference"],
                  summary="The served model and limits")
    async def info(request: Request) -> Response:
        server = service.server_info
        return Response(tei.info_body(
            service.card, pooling=server.pooling if server else None,
            dtype=server.dtype if server else None, max_batch_tokens=service.chunk_budget(),
            max_client_batch_size=settings.max_inputs, auto_truncate=settings.truncate,
            tokenization_workers=settings.tokenizer_threads))

    @routes.route("GET", "/health", errors=Style.TEI, tags=["Text Embeddings Inference"],
                  summary="200 when a server is ready, else 503")
    @routes.route("GET", "/", errors=Style.TEI, tags=["Text Embeddings Inference"],
                  summary="200 when a server is ready, else 503")
    async def health(request: Request) -> Response:
        """TEI's health: 200 with an empty body when a server is ready, else 503."""
        if not replicas.ready():
            raise NoReplicaError(NO_REPLICA_MESSAGE)
        return Response(b"", content_type=b"text/plain")

    @routes.route("GET", "/healthz", tags=["Operations"], summary="The process is up")
    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    @routes.route("GET", "/readyz", tags=["Operations"],
                  summary="200 when a server is ready, else 503", response_model=openapi.Readiness)
    async def readyz(request: Request) -> Response:
        ready = [replica.address for replica in replicas.ready()]
        body = {"status": "ready" if ready else "not ready"}
        # The servers' addresses only to a caller with a key, when keys are set: a probe needs
        # the status alone.
        if api_keys.allows(request.headers.get("authorization")):
            body.update(ready_replicas=ready, known_replicas=sorted(replicas.replicas))
        if ready:
            return json_response(body)
        return json_response(body, 503, headers=((b"retry-after", b"1"),))

    @routes.route("GET", "/metrics", tags=["Operations"], summary="Prometheus metrics",
                  response_class=PlainTextResponse)
    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), content_type=metrics.content_type.encode())

    return app
