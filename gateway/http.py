"""The gateway's routes on FastAPI: JSON bodies, errors in each API's shape, latency, access log.

Owns registering a handler (`Routes.route`): FastAPI routes it and documents it in
/openapi.json (the request and answer models given), while the handler itself takes the raw
`Request` and returns a complete `Response`: the hot routes parse JSON with orjson and
validate by hand (gateway/schema.py and the other APIs' modules), which measured faster than
FastAPI's own body parsing. Around every handler: the error it raised becomes the answer in the
shape of the route's API (gateway/http_errors.py), one latency observation per request under
its route and final status, and the access log (gateway/access_log.py). Every request gets a
`RequestContext` (gateway/request_context.py: its id, from the client's X-Request-Id or new, and
its timings), and every answer echoes the id in X-Request-Id. A request whose client
went away (gateway/uvicorn_server.py cancels its task) is recorded as 499 and logged once at
INFO. No route or no such method is 404 or 405 in OpenAI's shape. Knows nothing about
embeddings or sockets.
"""

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

import orjson
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import Match
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.requests import Request as StarletteRequest
from starlette.responses import Response as StarletteResponse

from hedgerow.errors import HedgerowError
from hedgerow.gateway import http_errors
from hedgerow.gateway.access_log import AccessLog
from hedgerow.gateway.errors import RequestError, StoppingError
from hedgerow.gateway.http_errors import Style
from hedgerow.gateway.request_context import (
    CURRENT, REQUEST_ID_HEADER, RequestContext, current, request_id,
)
from hedgerow.tracing import REQUEST_ID_ATTRIBUTE, Tracing
from hedgerow.gateway.uvicorn_server import CLIENT_CLOSED_REQUEST, GONE_KEY
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.http")

# Set by a handler whose body decides which API's error shape answers (a Style).
STYLE_KEY = "hedgerow.error_style"
STOPPING_MESSAGE = "the gateway stopped before this request was answered; retry"

__all__ = ["Request", "Response", "Routes", "Style", "json_response", "parse_json"]


class _Headers(Headers):
    """Starlette's request headers with a `get` that scans once: Mapping's raises and catches
    KeyError for every header a request lacks (most it asks for), three times the cost."""

    def get(self, key: str, default: Any = None) -> Any:
        name = key.lower().encode("latin-1")
        for header, value in self._list:
            if header == name:
                return value.decode("latin-1")
        return default


class Request(StarletteRequest):
    """Starlette's request, lighter on the two things every route does: look up headers and
    read the whole body (without Starlette's stream generator, which costs more than the
    read when the body came in one message, as it nearly always does)."""

    @property
    def headers(self) -> Headers:
        if not hasattr(self, "_headers"):
            self._headers = _Headers(raw=self.scope["headers"])
        return self._headers

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            if self._stream_consumed:
                raise RuntimeError("Stream consumed")
            chunks = []
            while not self._stream_consumed:
                message = await self._receive()
                if message["type"] == "http.request":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        self._stream_consumed = True
                elif message["type"] == "http.disconnect":
                    self._is_disconnected = True
                    raise ClientDisconnect()
            self._body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return self._body


class Response(StarletteResponse):
    """A complete answer: one body, its status and content type, extra headers; `tokens`
    (what the request cost) is for the access log and never sent."""

    def __init__(self, body: bytes, status: int = 200,
                 content_type: bytes = b"application/json",
                 headers: tuple[tuple[bytes, bytes], ...] = (), tokens: int = 0) -> None:
        # Starlette's constructor renders and encodes header by header; these are bytes already.
        self.body = body
        self.status_code = status
        self.background = None
        self.tokens = tokens
        self.raw_headers = [(b"content-type", content_type),
                            (b"content-length", b"%d" % len(body)), *headers]


def parse_json(raw: bytes) -> Any:
    """JSON from `raw` with a specific message for every way it can be wrong."""
    if not raw.strip():
        raise RequestError("the request body is empty; send a JSON object", code="invalid_json")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        if "UTF-8" in error.msg:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise RequestError(f"the request body is not valid UTF-8 (byte {bad.start})",
                                   code="invalid_encoding") from None
        if "surrogate" in error.msg:
            raise RequestError(
                "the request body's JSON holds a lone surrogate escape (\\ud800-\\udfff "
                "without its pair): that is not valid Unicode", code="invalid_encoding") from None
        if "depth" in error.msg:
            raise RequestError("the request body's JSON is nested too deeply",
                               code="invalid_json") from None
        raise RequestError(
            f"the request body is not valid JSON: {error.msg} at line {error.lineno} "
            f"column {error.colno}", code="invalid_json") from None


def json_response(value: Any, status: int = 200,
                  headers: tuple[tuple[bytes, bytes], ...] = ()) -> Response:
    return Response(orjson.dumps(value), status, headers=headers)


Handler = Callable[[Request], Awaitable[Response]]
Observe = Callable[[str, int, float], None]  # (route, status, seconds)


class GatewayApp(FastAPI):
    """FastAPI, lighter per request where the gateway has no use for the weight.

    A request for one of the gateway's own routes without path parameters, by a method it
    accepts, goes straight to that FastAPI route (looked up by method and path in `exact`, which
    `Routes` fills); everything else (docs, path parameters, 404, 405) takes FastAPI's whole
    stack. That stack is also cut to the exception handlers (404, 405): FastAPI's default adds
    a server-error page, telemetry, a body limit and an exit stack for uploaded files, which
    the gateway's routes (which never raise, take no uploads, and whose body limit is the HTTP
    server's) do not need. Together these took 90 µs off every request here, and FastAPI's
    router alone tries each route in turn, at about 5 µs a route."""

    def __init__(self, **kwargs) -> None:
        super().__init__(telemetry={"tracing": False, "metrics": False, "logs": False},
                         **kwargs)
        self.exact: dict[tuple[str, str], "_RawRoute"] = {}

    async def __call__(self, scope, receive, send) -> None:
        route = self.exact.get((scope.get("method"), scope.get("path")))
        if route is None:
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        await route.app(scope, receive, send)

    def openapi(self) -> dict:
        """FastAPI's document, plus the request schemas the routes name (gateway/openapi.py:
        the routes parse their own bodies, so FastAPI does not see the models)."""
        if self.openapi_schema is None:
            from hedgerow.gateway.openapi import request_schemas

            components = super().openapi().setdefault("components", {})
            components.setdefault("schemas", {}).update(request_schemas())
        return self.openapi_schema

    def build_middleware_stack(self):
        handlers = {key: handler for key, handler in self.exception_handlers.items()
                    if key not in (500, Exception)}
        return ExceptionMiddleware(self.router, handlers=handlers)


class _RawRoute(APIRoute):
    """A FastAPI route (documented, routed) whose endpoint takes the `Request` and returns the
    `Response`: FastAPI's per-request dependency solving and body parsing are skipped, and a
    path without parameters is told apart by comparing strings before any pattern is tried
    (FastAPI tries each route in turn: about 5 µs a route otherwise)."""

    def __init__(self, path: str, endpoint, **kwargs) -> None:
        super().__init__(path, endpoint, **kwargs)
        self._exact = "{" not in path
        self.app = self._asgi

    async def _asgi(self, scope, receive, send) -> None:
        response = await self.endpoint(Request(scope, receive, send))
        await response(scope, receive, send)

    def matches(self, scope) -> tuple[Match, dict]:
        if self._exact and scope.get("path") != self.path:
            return Match.NONE, {}
        return super().matches(scope)


class Routes:
    """Registers handlers on `app`, each guarded as the module docstring says."""

    def __init__(self, app: GatewayApp, observe: Observe, access_log: AccessLog | None = None,
                 tracing: Tracing | None = None) -> None:
        self._app = app
        self._observe = observe
        self._tracing = tracing
        self._access_log = access_log or AccessLog(0.0)
        self._styles: dict[str, Style] = {}  # route -> the error shape it answers in
        app.add_exception_handler(HTTPException, self._unrouted)

    def route(self, method: str, path: str, errors: Style = Style.OPENAI, **docs
              ) -> Callable[[Handler], Handler]:
        """Register a handler for `method` on `path`, answering errors in the `errors` API's
        shape; `docs` are FastAPI's documentation arguments (summary, response_model,
        openapi_extra, ...)."""
        self._styles[path] = errors
        label = path.replace(":path}", "}")  # metrics and logs name the route as documented

        def register(handler: Handler) -> Handler:
            router = self._app.router
            router.add_api_route(path, self._guarded(handler, method, label, errors),
                                 methods=[method], route_class_override=_RawRoute,
                                 name=handler.__name__, **docs)
            if "{" not in path:
                self._app.exact[method, path] = router.routes[-1]
            # The gateway's routes before FastAPI's own (/openapi.json, /docs): tried first.
            router.routes.sort(key=lambda route: not isinstance(route, _RawRoute))
            return handler
        return register

    def _guarded(self, handler: Handler, method: str, route: str, style: Style) -> Handler:
        observe, access_log, tracing = self._observe, self._access_log, self._tracing
        if tracing is not None:
            handler = _traced(handler, tracing, method, route)

        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            scope = request.scope
            context = RequestContext(request_id(request.headers.get(REQUEST_ID_HEADER)), started,
                                     tracing)
            CURRENT.set(context)  # the request's own task: no other request sees it
            try:
                response = await handler(request)
            except ClientDisconnect:  # left while sending: counted by the server as "unread"
                return Response(b"", CLIENT_CLOSED_REQUEST)
            except asyncio.CancelledError:
                elapsed = time.perf_counter() - started
                if scope.get(GONE_KEY):
                    log.info("%s", fields(event="request.abandoned", method=method,
                                          path=scope["path"], seconds=round(elapsed, 4)))
                    observe(route, CLIENT_CLOSED_REQUEST, elapsed)
                    return Response(b"", CLIENT_CLOSED_REQUEST)  # never sent: no one is there
                # The stop's grace ran out while this request was still being answered.
                log.warning("%s", fields(event="gateway.stop_abandoned", method=method,
                                         path=scope["path"]))
                status, body, headers = http_errors.answer_for(
                    StoppingError(STOPPING_MESSAGE), scope.get(STYLE_KEY, style))
                observe(route, status, elapsed)
                return Response(body, status, headers=(*headers, _id_header(context.request_id)))
            except HedgerowError as error:
                status, body, headers = http_errors.answer_for(error, scope.get(STYLE_KEY, style))
                response = Response(body, status, headers=headers)
            except Exception:
                log.exception("%s", fields(event="request.failed", method=method,
                                           path=scope["path"]))
                status, body, headers = http_errors.internal_error(style)
                response = Response(body, status, headers=headers)
            response.raw_headers.append(_id_header(context.request_id))
            elapsed = time.perf_counter() - started
            observe(route, response.status_code, elapsed)
            access_log.record(method, route, response.status_code, response.tokens, elapsed,
                              context.request_id, scope)
            return response

        endpoint.__name__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        return endpoint

    async def _unrouted(self, request: Request, error: HTTPException) -> Response:
        """No route for the path (404), or not for the method (405, with Allow)."""
        method, path = request.method, request.scope["path"]
        if error.status_code == 405:
            message = f"{path} does not accept {method}"
            allowed = {k.lower(): v for k, v in (error.headers or {}).items()}.get("allow", "")
            extra = ((b"allow", allowed.encode()),)
        else:
            message, extra = f"no route {method} {path}", ()
        style = self._styles.get(path, Style.OPENAI)
        status, body, headers = http_errors.answer_for(
            http_errors.RouteError(error.status_code, message, headers=extra), style)
        self._observe("unmatched", status, 0.0)
        rid = request_id(request.headers.get(REQUEST_ID_HEADER))
        return Response(body, status, headers=(*headers, _id_header(rid)))


def _traced(handler: Handler, tracing: Tracing, method: str, route: str) -> Handler:
    """`handler` inside the request's span (the root of its trace in this gateway; a child of
    the client's when it sent a `traceparent`), named and labelled by the route and the id."""

    async def traced(request: Request) -> Response:
        parent = tracing.remote_parent(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in request.scope["headers"] if name in (b"traceparent",
                                                                     b"tracestate"))
        with tracing.span(f"{method} {route}", kind=tracing.kind.SERVER, parent=parent,
                          attributes={"http.request.method": method, "http.route": route,
                                      REQUEST_ID_ATTRIBUTE: current().request_id}) as span:
            response = await handler(request)
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    return traced


def _id_header(rid: str) -> tuple[bytes, bytes]:
    return (b"x-request-id", rid.encode())
