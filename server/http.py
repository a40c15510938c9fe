"""The server's tiny HTTP side (port 9090): GET /metrics, /warmup, /readyz and /livez.

A minimal asyncio HTTP/1.1 responder (one request per connection, `Connection: close`), so
the server extra needs no web framework. /metrics is the Prometheus text exposition of the
server's registry; /warmup is JSON from `warmup_status` (what the operator's readiness gate
reads); /readyz answers 200 while the server is serving (what gRPC health calls SERVING) and
503 otherwise, for a kubelet probe where gRPC speaks mutual TLS, which the kubelet's gRPC
probe cannot; /livez answers 200 while the process may go on (loading, serving, draining) and
503 with the reason once its engine failed (a sticky device error or a failed probe batch:
server/engine_health.py), so the kubelet's liveness probe restarts the container. Knows
nothing about gRPC, the engine or scheduling.
"""

import asyncio
import json
import logging
from typing import Callable
from urllib.parse import urlsplit

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hedgerow.logs import fields
from hedgerow.server.state import ServerState, warmup_status

log = logging.getLogger("hedgerow.server.http")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}
_MAX_HEAD = 16 * 1024
_READ_TIMEOUT_S = 10.0

Route = Callable[[], tuple[int, str, bytes]]


def routes(state: ServerState) -> dict[str, Route]:
    """Path -> a function returning (status, content type, body)."""
    return {
        "/metrics": lambda: (200, CONTENT_TYPE_LATEST, state.metrics.render()),
        "/warmup": lambda: (200, "application/json",
                            json.dumps(warmup_status(state), sort_keys=True).encode()),
        "/readyz": lambda: _readiness(state),
        "/livez": lambda: _liveness(state),
    }


def _readiness(state: ServerState) -> tuple[int, str, bytes]:
    if state.serving:
        return 200, "text/plain", b"serving\n"
    return 503, "text/plain", b"not serving\n"


def _liveness(state: ServerState) -> tuple[int, str, bytes]:
    failed = state.loop.failed if state.loop is not None else None
    if failed is None:
        return 200, "text/plain", b"alive\n"
    return 503, "text/plain", f"engine failed: {failed}\n".encode()


async def start_http(state: ServerState, host: str, port: int) -> asyncio.Server:
    """Listen on host:port; close the returned server to stop."""
    table = routes(state)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, content_type, body, head_only = await _respond(reader, table)
            allow = "Allow: GET, HEAD\r\n" if status == 405 else ""
            head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\n{allow}Connection: close\r\n\r\n"
                    ).encode()
            writer.write(head if head_only else head + body)
            await writer.drain()
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError) as error:
            log.debug("%s", fields(event="http.dropped", error=repr(error)))
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port, limit=_MAX_HEAD)
    return server


async def _respond(reader: asyncio.StreamReader, table: dict[str, Route]
                   ) -> tuple[int, str, bytes, bool]:
    """Read one request head and pick the response: (status, content type, body, HEAD?)."""
    try:
        request_line = await asyncio.wait_for(_read_head(reader), _READ_TIMEOUT_S)
    except ValueError:  # a line or the whole head past _MAX_HEAD
        return 400, "text/plain", b"request head too large\n", False
    parts = request_line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400, "text/plain", b"malformed request line\n", False
    method, target = parts[0], parts[1]
    head_only = method == "HEAD"  # RFC 9110: no body on any answer to HEAD
    # Origin form ("/warmup?x") or absolute form ("http://host:9090/warmup"), RFC 9112 3.2.
    path = urlsplit(target).path if "://" in target else target.split("?", 1)[0]
    if path not in table:
        known = ", ".join(sorted(table))
        return 404, "text/plain", f"not found; this server serves {known}\n".encode(), head_only
    if method not in ("GET", "HEAD"):
        return 405, "text/plain", b"only GET and HEAD are supported\n", False
    status, content_type, body = table[path]()
    return status, content_type, body, head_only


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request line, after reading the head up to its blank line (CRLF or bare LF line
    ends, as RFC 9112 lets a server accept). Raises ValueError past _MAX_HEAD."""
    first, size = None, 0
    while True:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        size += len(line)
        if size > _MAX_HEAD:
            raise ValueError("request head too large")
        if line in (b"\r\n", b"\n"):
            return first or b""
        if first is None:
            first = line.rstrip(b"\r\n")
