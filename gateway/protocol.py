"""The gateway's HTTP/1.1 connection: uvicorn's httptools protocol, with the limits it lacks.

uvicorn parses HTTP and runs the app, but it never times out a client that stalls while sending
its headers or that connects and sends nothing (its keep-alive timer only starts after a first
answer), and it lets an app go on computing for a client that has hung up. This subclass adds:

- a head timeout: a request's headers, and a new connection's first bytes, must arrive within
  `head_timeout` seconds, else the connection gets 408 and is closed;
- cancel on hang-up: when the connection is lost before its answer is complete, the request's
  task is cancelled, so its chunks still waiting for room are never sent and the servers drop
  its queued sequences (the app records such a request as 499);
- a prompt stop: at shutdown a connection still receiving a request body is closed at once
  instead of being waited for (its request was never admitted);
- answers in OpenAI's error shape for requests the parser refuses (uvicorn answers plain text).

The body's own time limit is the app's (gateway/http.py). Knows nothing about routes.
"""

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hedgerow.gateway.http_errors import MALFORMED_HTTP, REQUEST_TIMEOUT


def _raw_answer(status_line: bytes, body: bytes) -> bytes:
    return b"".join((status_line, b"content-type: application/json\r\n",
                     b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n", body))


class GatewayProtocol(HttpToolsProtocol):
    """One client connection (see the module docstring)."""

    head_timeout: float = 10.0  # set per server by `protocol_class`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()
        super().on_headers_complete()

    def _start_asgi_task(self, cycle, app) -> None:
        # As uvicorn does (its tasks are one set shared by every connection), keeping this
        # connection's own task to cancel.
        task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        self._task = task

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        unanswered = self.cycle is not None and not self.cycle.response_complete
        super().connection_lost(exc)
        if unanswered and self._task is not None and not self._task.done():
            self._task.cancel()

    def shutdown(self) -> None:
        receiving = (self.cycle is not None and self.cycle.more_body
                     and not self.cycle.response_started)
        if receiving:
            self.transport.close()
        else:
            super().shutdown()

    def send_400_response(self, msg: str) -> None:
        self.transport.write(_raw_answer(b"HTTP/1.1 400 Bad Request\r\n", MALFORMED_HTTP))
        self.transport.close()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.write(_raw_answer(b"HTTP/1.1 408 Request Timeout\r\n",
                                             REQUEST_TIMEOUT))
            self.transport.close()


def protocol_class(head_timeout: float) -> type[GatewayProtocol]:
    """The protocol with `head_timeout` seconds for a request's headers."""
    return type("GatewayProtocol", (GatewayProtocol,), {"head_timeout": head_timeout})
