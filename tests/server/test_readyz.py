"""GET /readyz on the server's HTTP port follows the serving state: 503 while loading or
draining, 200 while serving (the kubelet's probe when gRPC speaks mutual TLS)."""

import asyncio

import pytest

from hedgerow.server.http import start_http
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server.state import ServerState
from hedgerow.server_settings import ServerSettings

pytestmark = pytest.mark.asyncio


async def _get(port: int, path: str) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], body


async def test_readyz_follows_the_serving_state():
    state = ServerState(settings=ServerSettings(), metrics=ServerMetrics())
    http = await start_http(state, "127.0.0.1", 0)
    port = http.sockets[0].getsockname()[1]
    try:
        assert await _get(port, "/readyz") == (b"HTTP/1.1 503 Service Unavailable",
                                               b"not serving\n")
        state.serving = True
        assert await _get(port, "/readyz") == (b"HTTP/1.1 200 OK", b"serving\n")
        state.serving = False  # draining
        status, _ = await _get(port, "/readyz")
        assert status == b"HTTP/1.1 503 Service Unavailable"
    finally:
        http.close()
        await http.wait_closed()
