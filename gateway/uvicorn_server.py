"""uvicorn serving the gateway's app, with the limits a client could otherwise abuse.

uvicorn (httptools, uvloop) parses and frames HTTP/1.1, answers pipelined requests in order,
honours `Expect: 100-continue`, closes idle keep-alive connections (--keep-alive-timeout) and
stops gracefully. What it lacks is added through its documented extension point, its own HTTP
protocol class (`uvicorn.Config(http=...)`), subclassed here:
- a head timeout: a request's headers, and a new connection's first bytes, must arrive within
  --head-timeout, else 408 and the connection is closed (a slowloris holds nothing);
- a body timeout: the whole body must arrive within --body-timeout of its headers, else 408;
- a body size limit, on the declared length before reading and while reading (413), and a head
  size limit (431);
- at most --max-connections open connections: the next one is answered 503 and closed;
- a client that hangs up before its answer cancels its request's task (in-flight gRPC calls are
  cancelled) and is counted 499, never an error;
- an answer is one write (one system call, one wakeup of the client): uvicorn writes the
  head and the body separately, which cost the gateway a third of its time per short request;
- a stop that closes uploads in progress at once (a stalled upload is not waited for), lets
  requests already read finish within the grace, then cancels what is left.
The answers it makes itself are in OpenAI's error shape, carry the request's X-Request-Id (the
client's, when its headers had arrived, else a new one) and are counted under route "unread".
"""

import asyncio
import contextlib
import dataclasses
import logging
import signal
import threading
from typing import Callable

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from hedgerow.gateway import http_errors
from hedgerow.gateway.request_context import REQUEST_ID_HEADER, request_id
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.http")

MAX_HEAD_BYTES = 64 * 1024
HEAD_TOO_LARGE = f"the request's URL and headers are over {MAX_HEAD_BYTES} bytes"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request its client abandoned
# Scope keys: the server leaves the task answering the request under TASK_KEY, and sets
# GONE_KEY before cancelling that task because its client left.
TASK_KEY = "hedgerow.task"
GONE_KEY = "hedgerow.client_gone"

Observe = Callable[[str, int, float], None]  # (route, status, seconds)
_HEAD, _BODY = 1, 2  # which timeout a request still arriving is under


@dataclasses.dataclass(frozen=True)
class Limits:
    head_timeout: float
    body_timeout: float
    max_body_bytes: int
    max_connections: int


class _Refused(Exception):
    """Raised in a parser callback: answer `status` with `message` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _OneWrite:
    """The transport as a response cycle sees it: the head uvicorn writes at
    `http.response.start` is held and written with the body's first part (uvicorn writes one
    for every answer but HEAD's, an empty one too), so that an answer is one write."""

    __slots__ = ("_transport", "_head")

    def __init__(self, transport) -> None:
        self._transport = transport
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._head is None and data.startswith(b"HTTP/1.1 ") and not data.startswith(
                b"HTTP/1.1 100 "):
            self._head = data
            return
        if self._head is not None:
            data, self._head = self._head + data, None
        self._transport.write(data)

    def close(self) -> None:
        if self._head is not None:
            self._transport.write(self._head)
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under the module docstring's limits; `limits` and
    `observe` are set on the subclass `protocol_class` makes."""

    limits: Limits
    observe: Observe

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        # The timeout a request still arriving needs (_HEAD or _BODY), armed once the bytes
        # at hand are parsed: a request that arrives whole (nearly all) arms none.
        self._due = 0
        self._idle_since: float | None = None  # loop time the last answer completed; None: busy
        self._refused = False
        self._receiving = False  # between a request's first byte and its end
        self._head_bytes = 0
        self._body_bytes = 0

    # --- the connection -------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        if len(self.connections) >= self.limits.max_connections:
            self.transport = transport
            self._refuse(503, "the gateway has as many connections open as it accepts "
                              "(--max-connections); retry shortly")
            return
        super().connection_made(transport)
        self._arm(self.limits.head_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.flow is None:  # refused in connection_made: never counted as open
            return
        if self._receiving and not self._refused:
            log.info("%s", fields(event="request.abandoned", phase="sending"))
            self.observe("unread", CLIENT_CLOSED_REQUEST, 0.0)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not self._receiving:
            task = cycle.scope.get(TASK_KEY)
            if task is not None:
                cycle.scope[GONE_KEY] = True  # the app records the 499
                task.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._idle_since = None  # the keep-alive timer, if armed, stays: see on_response_complete
        try:
            self.parser.feed_data(data)
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
        else:
            if self._due:
                self._arm_due()

    def _start_asgi_task(self, cycle, app) -> None:
        """uvicorn's (without its reset_contextvars option, which the gateway leaves off),
        also leaving the task under TASK_KEY for connection_lost: asyncio.current_task() in
        the app would cost a system call per request (getpid, on Python 3.11)."""
        task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        cycle.scope[TASK_KEY] = task

    def on_response_complete(self) -> None:
        """uvicorn's, except that the keep-alive timer is not cancelled and armed again for
        every request (1-3 µs each): one armed timer looks at the idle time when it fires."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        if self._idle_since is None:  # a request is under way: armed again when it is answered
            return
        left = self._idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
        else:
            self.timeout_keep_alive_handler()

    def shutdown(self) -> None:
        """At a stop: an upload in progress is closed at once, not waited for."""
        if self._receiving:
            self.transport.close()
        else:
            super().shutdown()

    # --- parser callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._receiving = True
        self._head_bytes = self._body_bytes = 0
        self._due = _HEAD

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _Refused(431, HEAD_TOO_LARGE)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)  # inline: a call per header costs more
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _Refused(431, HEAD_TOO_LARGE)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        limit = self.limits.max_body_bytes
        for name, value in self.headers:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise _Refused(413, f"the request body is {int(value)} bytes; at most {limit} "
                                    "are accepted (--max-body-bytes)")
        self._due = _BODY
        super().on_headers_complete()
        if self.scope["method"] != "HEAD":  # a HEAD answer's head has no body part to join
            self.cycle.transport = _OneWrite(self.transport)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_bytes:
            raise _Refused(413, f"the request body is over {self.limits.max_body_bytes} bytes, "
                                "the most accepted (--max-body-bytes)")
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._receiving = False
        self._due = 0
        self._disarm()
        super().on_message_complete()

    # --- limits ---------------------------------------------------------------------------------

    def _arm_due(self) -> None:
        if self._due == _HEAD:
            self._arm(self.limits.head_timeout, self._head_timed_out)
        else:
            self._arm(self.limits.body_timeout, self._body_timed_out)
        self._due = 0

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_timed_out(self) -> None:
        self._timer = None
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # not while an answer is being made
            self._refuse(408, f"the request's headers did not arrive within "
                              f"{self.limits.head_timeout:g} s (--head-timeout)")

    def _body_timed_out(self) -> None:
        self._timer = None
        self._refuse(408, f"the request body did not arrive within "
                          f"{self.limits.body_timeout:g} s (--body-timeout)")

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with `message` and close; the request never reaches a route."""
        self._disarm()
        self._refused = True
        self.observe("unread", status, 0.0)
        if self.transport.is_closing():
            return
        body = http_errors.error_body(message, "invalid_request_error",
                                      code=http_errors.PROTOCOL_CODES.get(status))
        retry = b"retry-after: 1\r\n" if status == 503 else b""
        sent = dict(self.headers).get(REQUEST_ID_HEADER.encode()) if self._receiving else None
        rid = request_id(sent.decode("latin-1") if sent is not None else None).encode()
        self.transport.write(b"%scontent-type: application/json\r\ncontent-length: %d\r\n%s"
                             b"x-request-id: %s\r\nconnection: close\r\n\r\n%s"
                             % (STATUS_LINE[status], len(body), retry, rid, body))
        self.transport.close()


def protocol_class(limits: Limits, observe: Observe) -> type[GuardedProtocol]:
    """The protocol class uvicorn is given, bound to `limits` and `observe`."""
    return type("GatewayProtocol", (GuardedProtocol,), {"limits": limits,
                                                         "observe": staticmethod(observe)})


class _Server(uvicorn.Server):
    """uvicorn's server, except that SIGINT or SIGTERM ends a graceful stop with status 0
    instead of being raised again once the server is down (which would kill the process)."""

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {signum: signal.signal(signum, self.handle_exit) for signum in stops}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def server(app, limits: Limits, observe: Observe, keep_alive_timeout: float,
           graceful_stop: float) -> uvicorn.Server:
    """A uvicorn server for `app` (serve it with `await server.serve(sockets=[sock])`)."""
    config = uvicorn.Config(
        app, http=protocol_class(limits, observe), lifespan="on", loop="none",
        timeout_keep_alive=keep_alive_timeout, timeout_graceful_shutdown=graceful_stop,
        log_config=None, access_log=False, proxy_headers=False, server_header=False,
        date_header=False, backlog=2048)
    # uvicorn's own INFO lines (started, waiting, finished) say nothing the gateway's log
    # does not; its warnings and errors still show.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    return _Server(config)
