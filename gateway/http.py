"""The gateway's HTTP application: its routing table, JSON bodies, errors and latency.

Owns dispatching a complete request (gateway/protocol.py read it, under its limits) to the
handler registered for its path and method, JSON bodies with a specific message for every way
they can be malformed, turning the handler's `Response`, or the error it raised, into the
answer (in the error shape of the API the route belongs to), one latency observation per
request under its route and final status, and the access log (gateway/access_log.py). A
request whose client went away (the protocol cancels its task) is recorded as 499 and logged
once at INFO. Routing is a dict lookup. Knows nothing about embeddings or sockets.
"""

import asyncio
import logging
import time
import urllib.parse
from typing import Any, Awaitable, Callable

import orjson

from hedgerow.errors import HedgerowError
from hedgerow.gateway import http_errors
from hedgerow.gateway.access_log import AccessLog
from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.http_errors import Style
from hedgerow.gateway.protocol import Request, Response
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.http")

CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request its client abandoned

__all__ = ["HttpApp", "Request", "Response", "Style", "json_response", "parse_json"]


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


class HttpApp:
    """Routes, errors and latency for complete requests; `handle` never raises (but is
    cancelled with its request when the client goes away)."""

    def __init__(self, observe: Observe, access_log: AccessLog | None = None) -> None:
        self._observe = observe
        self._access_log = access_log or AccessLog(0.0)
        self._routes: dict[str, dict[str, Handler]] = {}
        # Routes ending in a parameter: (prefix, route, parameter name, method -> handler).
        self._prefixes: list[tuple[str, str, str, dict[str, Handler]]] = []
        self._styles: dict[str, Style] = {}  # route -> the error shape it answers in
        self.state: Any = None  # what the app's builder wants reachable (tests read it)

    def route(self, method: str, path: str, errors: Style = Style.OPENAI
              ) -> Callable[[Handler], Handler]:
        """Register a handler for `method` on `path`, answering errors in the `errors` API's
        shape; a path ending in `/{name}` matches any last segment, percent-decoded (so
        `%2F` is a slash) and handed over in `request.path_params[name]`."""
        self._styles[path] = errors

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
                try:
                    value = urllib.parse.unquote(rest, errors="strict")
                except UnicodeDecodeError:
                    raise RequestError(f"the path {path!r} is not valid UTF-8 once %-decoded",
                                       code="invalid_encoding") from None
                return route, methods, {name: value}
        return None

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        method, path = request.method, request.path
        route = "unmatched"
        try:
            found = self._find(path)
            if found is None:
                raise http_errors.RouteError(404, f"no route {method} {path}")
            route = found[0]
            handler = found[1].get(method)
            if handler is None:
                raise http_errors.RouteError(
                    405, f"{path} does not accept {method}",
                    headers=((b"allow", ", ".join(sorted(found[1])).encode()),))
            request.path_params = found[2]
            response = await handler(request)
        except asyncio.CancelledError:
            log.info("%s", fields(event="request.abandoned", method=method, path=path,
                                  seconds=round(time.perf_counter() - started, 4)))
            self._observe(route, CLIENT_CLOSED_REQUEST, time.perf_counter() - started)
            raise
        except HedgerowError as error:
            status, body, headers = http_errors.answer_for(
                error, request.error_style or self._styles.get(route, Style.OPENAI))
            response = Response(body, status, headers=headers)
        except Exception:
            log.exception("%s", fields(event="request.failed", method=method, path=path))
            status, body, headers = http_errors.internal_error(
                self._styles.get(route, Style.OPENAI))
            response = Response(body, status, headers=headers)
        elapsed = time.perf_counter() - started
        self._observe(route, response.status, elapsed)
        self._access_log.record(method, route, response.status, response.tokens, elapsed)
        return response

    def refusal(self, status: int, message: str) -> bytes:
        """The body of an answer the protocol makes itself (timeouts, limits, bad framing)."""
        self._observe("unread", status, 0.0)
        return http_errors.error_body(message, "invalid_request_error",
                                      code=http_errors.PROTOCOL_CODES.get(status))

    def abandoned(self) -> None:
        """A client left while sending its request: 499, one INFO line."""
        log.info("%s", fields(event="request.abandoned", phase="sending"))
        self._observe("unread", CLIENT_CLOSED_REQUEST, 0.0)
