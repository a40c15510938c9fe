"""The gateway's HTTP/1.1 server: connections parsed by httptools, one handler call per request.

Owns the connection's life and every limit a client could otherwise abuse:
- a head timeout: a request's headers, and a new connection's first bytes, must arrive within
  `head_timeout` seconds, else 408 and the connection is closed;
- a body timeout: the whole body must arrive within `body_timeout` of its headers, else 408;
- a body size limit, checked on the declared length before reading and while reading (413),
  and a head size limit (431);
- an idle keep-alive timeout, and at most `max_connections` open connections (the next one is
  answered 503 and closed);
- a client that hangs up before its answer cancels its request's task (the handler's chunks
  still waiting are never sent, in-flight calls are cancelled);
- a stop that closes idle connections and uploads in progress at once, lets requests already
  read finish within the grace, then closes what is left.
Requests on one connection are answered in order (a pipelined one waits, reading paused); each
answer is written in one write. `Expect: 100-continue` is honoured. Knows nothing about routes:
it hands a complete `Request` to the handler and writes the `Response` it returns. uvicorn
served the same app at about 60 µs more per request here and had neither head nor body
timeouts.
"""

import asyncio
import dataclasses
import logging
import time
from collections import deque
from typing import Callable, Protocol

import httptools

from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.http")

MAX_HEAD_BYTES = 64 * 1024
_REASONS = {100: b"Continue", 200: b"OK", 400: b"Bad Request", 401: b"Unauthorized",
            404: b"Not Found", 405: b"Method Not Allowed", 408: b"Request Timeout",
            409: b"Conflict", 413: b"Content Too Large", 422: b"Unprocessable Content",
            429: b"Too Many Requests", 431: b"Request Header Fields Too Large",
            500: b"Internal Server Error", 502: b"Bad Gateway", 503: b"Service Unavailable",
            504: b"Gateway Timeout"}


@dataclasses.dataclass(eq=False)
class Request:
    method: str
    path: str
    query: bytes
    headers: list[tuple[bytes, bytes]]  # names lower-case
    body: bytes
    path_params: dict[str, str] = dataclasses.field(default_factory=dict)  # set by routing
    # Set by a handler whose body decides which API's error shape answers (the app's
    # http_errors.Style); None keeps the route's.
    error_style: object = None

    def header(self, name: bytes) -> str | None:
        """The last value of header `name` (lower-case bytes), or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return None if found is None else found.decode("latin-1")


@dataclasses.dataclass
class Response:
    body: bytes
    status: int = 200
    content_type: bytes = b"application/json"
    headers: tuple[tuple[bytes, bytes], ...] = ()
    tokens: int = 0  # tokens the request cost, for the access log; never sent


class App(Protocol):
    """What the server needs from the application."""

    async def handle(self, request: Request) -> Response:
        """The answer to a complete request (never raises; cancelled if the client leaves)."""

    def refusal(self, status: int, message: str) -> bytes:
        """The body of an answer the server makes itself (timeouts, limits, bad framing)."""

    def abandoned(self) -> None:
        """A client left in the middle of sending a request."""


class _Refused(Exception):
    """Raised in a parser callback: answer `status` with `message` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class Limits:
    head_timeout: float
    body_timeout: float
    keep_alive_timeout: float
    max_body_bytes: int
    max_connections: int


def encode_response(response: Response, keep_alive: bool) -> bytes:
    head = [b"HTTP/1.1 %d %s\r\n" % (response.status, _REASONS.get(response.status, b"")),
            b"content-type: ", response.content_type,
            b"\r\ncontent-length: %d\r\n" % len(response.body)]
    for name, value in response.headers:
        head += [name, b": ", value, b"\r\n"]
    if not keep_alive:
        head.append(b"connection: close\r\n")
    head += [b"\r\n", response.body]
    return b"".join(head)


class Connection(asyncio.Protocol):
    """One client connection (see the module docstring)."""

    def __init__(self, server: "HttpServer") -> None:
        self._server = server
        self._limits = server.limits
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        # Complete requests not yet handled, each with whether its connection may stay open.
        self._pending: deque[tuple[Request, bool]] = deque()
        self._task: asyncio.Task | None = None    # the request being handled
        self._closing = False  # answer what is under way, then close
        self._refused = False  # answered by the server itself
        # The request being parsed:
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._receiving = False  # between a request's first byte and its end

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self._transport = transport
        server = self._server
        if len(server.connections) >= self._limits.max_connections:
            self._refuse(503, "the gateway has as many connections open as it accepts "
                              "(--max-connections); retry shortly")
            return
        server.connections.add(self)
        self._arm(self._limits.head_timeout, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._refused or (self._closing and not self._receiving and self._task is None):
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            refused = error.__context__
            if not isinstance(refused, _Refused):
                raise
            self._refuse(refused.status, str(refused))
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported here")
        except httptools.HttpParserError:
            self._refuse(400, "the HTTP request is malformed (its framing or headers, e.g. a "
                              "Content-Length that is not a number, cannot be parsed)")

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        if self._receiving and not self._refused:
            self._server.app.abandoned()
        self._disarm()
        self._pending.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    # --- httptools callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url, self._headers, self._head_bytes = b"", [], 0
        self._body, self._body_bytes = [], 0
        self._receiving = True
        self._arm(self._limits.head_timeout, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))
        self._count_head(len(name) + len(value))

    def on_headers_complete(self) -> None:
        self._arm(self._limits.body_timeout, self._body_timed_out)
        declared, expect_continue = None, False
        for name, value in self._headers:
            if name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == b"expect" and value.lower() == b"100-continue":
                expect_continue = True
        if declared is not None and declared > self._limits.max_body_bytes:
            raise _Refused(413, f"the request body is {declared} bytes; at most "
                                f"{self._limits.max_body_bytes} are accepted (--max-body-bytes)")
        if expect_continue:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._limits.max_body_bytes:
            raise _Refused(413, f"the request body is over {self._limits.max_body_bytes} "
                                "bytes, the most accepted (--max-body-bytes)")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._receiving = False
        self._disarm()
        url = httptools.parse_url(self._url)
        path = url.path.decode("latin-1")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(self._parser.get_method().decode("ascii"), path, url.query or b"",
                          self._headers, body)
        self._pending.append((request, self._parser.should_keep_alive()))
        if self._task is None:
            self._next()
        else:
            self._transport.pause_reading()  # pipelined: one request at a time

    # --- handling -----------------------------------------------------------------------------

    def _next(self) -> None:
        request, keep_alive = self._pending.popleft()
        self._task = asyncio.get_running_loop().create_task(self._handle(request, keep_alive))

    async def _handle(self, request: Request, keep_alive: bool) -> None:
        response = await self._server.app.handle(request)
        keep_alive = keep_alive and not self._closing
        self._transport.write(encode_response(response, keep_alive))
        self._task = None
        if not keep_alive:
            self._transport.close()
        elif self._pending:
            self._next()
        else:
            self._transport.resume_reading()
            if self._closing:
                self._transport.close()
            elif not self._receiving:
                self._arm(self._limits.keep_alive_timeout, self._idle_timed_out)

    def close_gracefully(self) -> None:
        """At a stop: close now unless a request already read is being answered."""
        self._closing = True
        if self._task is None:
            self._transport.close()

    @property
    def busy(self) -> bool:
        return self._task is not None

    # --- limits -------------------------------------------------------------------------------

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _Refused(431, f"the request's URL and headers are over {MAX_HEAD_BYTES} "
                                "bytes")

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        if self._task is None:
            self._refuse(408, f"the request's headers did not arrive within "
                              f"{self._limits.head_timeout:g} s (--head-timeout)")

    def _body_timed_out(self) -> None:
        self._refuse(408, f"the request body did not arrive within "
                          f"{self._limits.body_timeout:g} s (--body-timeout)")

    def _idle_timed_out(self) -> None:
        self._timer = None
        self._transport.close()

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with `message` and close (the request never reaches the app)."""
        self._disarm()
        self._refused = True
        if not self._transport.is_closing():
            body = self._server.app.refusal(status, message)
            self._transport.write(encode_response(
                Response(body, status, headers=((b"retry-after", b"1"),) if status == 503
                         else ()), keep_alive=False))
            self._transport.close()


class HttpServer:
    """Serves `app` on a listening socket until `stop()`."""

    def __init__(self, app: App, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self, sock) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), sock=sock,
                                                backlog=2048)

    async def stop(self, grace: float) -> None:
        """Stop accepting; close idle connections and uploads in progress; give requests
        already read `grace` seconds; close the rest."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close_gracefully()
        deadline = time.monotonic() + grace
        while any(c.busy for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = [c for c in self.connections if c.busy]
        if left:
            log.warning("%s", fields(event="gateway.stop_abandoned", requests=len(left),
                                     grace_seconds=grace))
        for connection in list(self.connections):
            connection._transport.close()
