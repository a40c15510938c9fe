"""The gateway's HTTP layer: a small ASGI application, its routing table and request bodies.

Owns turning an ASGI request into a `Request` (method, path, headers; the body read under the
size and time limits, as JSON on demand), dispatching it to the handler registered for its
path and method, and turning the handler's `Response`, or the error it raised, into the answer,
with one latency observation per request under its route and final status. A client that goes
away before its answer (the connection protocol cancels the request's task) is recorded as 499
and logged once at INFO. Routing is a dict lookup: FastAPI's routing, dependency solving and
middlewares were a fifth of a batch-1 request's CPU here. Knows nothing about embeddings.
"""

import asyncio
import dataclasses
import logging
import time
from typing import Any, Awaitable, Callable

import orjson

from hedgerow.errors import HedgerowError
from hedgerow.gateway import http_errors
from hedgerow.gateway.errors import BodyTimeoutError, BodyTooLargeError, RequestError
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.http")

CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request its client abandoned


class ClientGone(Exception):
    """The client disconnected before its request was read or answered."""


@dataclasses.dataclass(eq=False)
class Request:
    method: str
    path: str
    raw_headers: list[tuple[bytes, bytes]]  # as ASGI gives them: lower-case names
    receive: Callable[[], Awaitable[dict]]
    path_params: dict[str, str] = dataclasses.field(default_factory=dict)

    def header(self, name: bytes) -> str | None:
        """The last value of header `name` (lower-case bytes), or None."""
        found = None
        for key, value in self.raw_headers:
            if key == name:
                found = value
        return None if found is None else found.decode("latin-1")

    async def body(self, limit: int, timeout: float) -> bytes:
        """The whole body: 413 past `limit` bytes (the declared length is checked before
        reading), 408 when it has not all arrived `timeout` seconds from now."""
        declared = self.header(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLargeError(
                f"the request body is {declared} bytes; at most {limit} are accepted "
                "(--max-body-bytes)", code="body_too_large")
        parts, size = [], 0
        try:
            async with asyncio.timeout(timeout):
                while True:
                    message = await self.receive()
                    if message["type"] == "http.disconnect":
                        raise ClientGone()
                    part = message.get("body", b"")
                    size += len(part)
                    if size > limit:
                        raise BodyTooLargeError(
                            f"the request body is over {limit} bytes, the most accepted "
                            "(--max-body-bytes)", code="body_too_large")
                    parts.append(part)
                    if not message.get("more_body"):
                        break
        except TimeoutError:
            raise BodyTimeoutError(
                f"the request body did not arrive within {timeout:g} s "
                "(--body-timeout)") from None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def json(self, limit: int, timeout: float) -> Any:
        """The body as JSON: 400 when empty or malformed (see `parse_json`)."""
        return parse_json(await self.body(limit, timeout))


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
            raise RequestError("the request body is not valid UTF-8 (it holds a lone "
                               "surrogate escape)", code="invalid_encoding") from None
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


@dataclasses.dataclass
class Response:
    body: bytes
    status: int = 200
    content_type: bytes = b"application/json"
    headers: tuple[tuple[bytes, bytes], ...] = ()


def json_response(value: Any, status: int = 200,
                  headers: tuple[tuple[bytes, bytes], ...] = ()) -> Response:
    return Response(orjson.dumps(value), status, headers=headers)


Handler = Callable[[Request], Awaitable[Response]]
Observe = Callable[[str, int, float], None]  # (route, status, seconds)


class HttpApp:
    """The ASGI application: routes, lifespan hooks, errors, latency."""

    def __init__(self, observe: Observe, on_start: Callable[[], Awaitable[None]],
                 on_stop: Callable[[], Awaitable[None]]) -> None:
        self._observe = observe
        self._on_start, self._on_stop = on_start, on_stop
        self.state: Any = None  # what the app's builder wants reachable (tests read it)
        self._routes: dict[str, dict[str, Handler]] = {}
        # Routes ending in a parameter: (prefix, route, parameter name, method -> handler).
        self._prefixes: list[tuple[str, str, str, dict[str, Handler]]] = []

    def route(self, method: str, path: str) -> Callable[[Handler], Handler]:
        """Register a handler for `method` on `path`; a path ending in `/{name}` matches any
        last segment, handed over as `request.path_params[name]`."""
        def register(handler: Handler) -> Handler:
            if not path.endswith("}"):
                self._routes.setdefault(path, {})[method] = handler
                return handler
            prefix, _, name = path[:-1].rpartition("/{")
            for _, route, _, methods in self._prefixes:
                if route == path:
                    methods[method] = handler
                    return handler
            self._prefixes.append((prefix + "/", path, name, {method: handler}))
            return handler
        return register

    def _find(self, path: str) -> tuple[str, dict[str, Handler], dict[str, str]] | None:
        methods = self._routes.get(path)
        if methods is not None:
            return path, methods, {}
        for prefix, route, name, methods in self._prefixes:
            rest = path[len(prefix):]
            if path.startswith(prefix) and rest and "/" not in rest:
                return route, methods, {name: rest}
        return None

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._on_start()
                except Exception as error:  # reported to uvicorn, which exits with it
                    await send({"type": "lifespan.startup.failed", "message": str(error)})
                    raise
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._on_stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict, receive, send) -> None:
        started = time.perf_counter()
        method, path = scope["method"], scope["path"]
        found = self._find(path)
        route = found[0] if found else "unmatched"
        try:
            if found is None:
                raise http_errors.RouteError(404, f"no route {method} {path}")
            handler = found[1].get(method)
            if handler is None:
                raise http_errors.RouteError(
                    405, f"{path} does not accept {method}",
                    headers=((b"allow", ", ".join(sorted(found[1])).encode()),))
            response = await handler(Request(method, path, scope["headers"], receive,
                                             found[2]))
        except (ClientGone, asyncio.CancelledError):
            # The connection is gone (the protocol cancelled this task): nobody to answer.
            log.info("%s", fields(event="request.abandoned", method=method, path=path,
                                  seconds=round(time.perf_counter() - started, 4)))
            self._observe(route, CLIENT_CLOSED_REQUEST, time.perf_counter() - started)
            return
        except HedgerowError as error:
            status, body, headers = http_errors.answer_for(error)
            response = Response(body, status, headers=headers)
        except Exception:
            log.exception("%s", fields(event="request.failed", method=method, path=path))
            status, body, headers = http_errors.INTERNAL_ERROR
            response = Response(body, status, headers=headers)
        await send({"type": "http.response.start", "status": response.status,
                    "headers": [(b"content-type", response.content_type),
                                (b"content-length", b"%d" % len(response.body)),
                                *response.headers]})
        await send({"type": "http.response.body", "body": response.body})
        self._observe(route, response.status, time.perf_counter() - started)
