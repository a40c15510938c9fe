"""The gateway's HTTP server under clients that stall, idle, hang up, pipeline or flood.

The gateway is served for real on loopback (conftest's LiveGateway, as a worker serves it) in
front of the in-test stand-in servers; clients here speak HTTP over raw sockets so that they
can stall, hang up or pipeline at will. No assertion is about speed: where a limit is a time,
the test sets it short and checks the answer, not how fast it came.
"""

import json
import logging
import socket
import threading
import time

import pytest

MODEL = "all-MiniLM-L6-v2"


def connect(client) -> socket.socket:
    port = int(str(client.base_url).rsplit(":", 1)[1].rstrip("/"))
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    return sock


def request_bytes(body: bytes, path: str = "/v1/embeddings", extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s\r\n" % (path.encode(), len(body), extra)) + body


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP answer off `sock`: (status, headers, body)."""
    stream = sock.makefile("rb")
    status_line = stream.readline()
    assert status_line, "the connection closed without an answer"
    status = int(status_line.split()[1])
    headers = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers.get("content-length", 0)))
    return status, headers, body


def closed(sock: socket.socket) -> bool:
    """True when the server closed the connection (reading gives end of file)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def metric(client, route: str, status: int) -> float:
    text = client.get("/metrics").text
    needle = f'hedgerow_gateway_request_seconds_count{{route="{route}",status="{status}"}} '
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(needle))


@pytest.fixture
def quick(gateway_factory, standins):
    return gateway_factory(servers=[standins[0].address], head_timeout=0.5, body_timeout=0.5,
                           keep_alive_timeout=0.5, max_body_bytes=10_000,
                           accept_token_ids=True)


def test_a_stalled_body_gets_408_and_the_connection_closes(quick):
    body = json.dumps({"model": MODEL, "input": "hello"}).encode()
    with connect(quick) as sock:
        sock.sendall(request_bytes(body)[:-5])  # the last bytes never come
        status, headers, answer = read_answer(sock)
        assert status == 408 and headers["connection"] == "close"
        assert "--body-timeout" in json.loads(answer)["error"]["message"]
        assert closed(sock)


def test_stalled_headers_and_silent_connections_get_408(quick):
    with connect(quick) as silent, connect(quick) as partial:
        partial.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
        for sock in (silent, partial):
            status, _, answer = read_answer(sock)
            assert status == 408 and "--head-timeout" in json.loads(answer)["error"]["message"]
            assert closed(sock)


def test_idle_keep_alive_connections_are_closed(quick):
    body = json.dumps({"model": MODEL, "input": "hello"}).encode()
    with connect(quick) as sock:
        sock.sendall(request_bytes(body))
        assert read_answer(sock)[0] == 200
        assert closed(sock)  # after --keep-alive-timeout of silence


def test_pipelined_requests_are_answered_in_order_and_100_continue_is_honoured(quick):
    first = json.dumps({"input": [[101, 7, 102]]}).encode()
    second = json.dumps({"input": [[101, 8, 9, 102]]}).encode()
    with connect(quick) as sock:
        sock.sendall(request_bytes(first) + request_bytes(second))
        answers = [json.loads(read_answer(sock)[2]) for _ in range(2)]
        assert [a["usage"]["prompt_tokens"] for a in answers] == [3, 4]
        sock.sendall(request_bytes(first, extra=b"Expect: 100-continue\r\n")[:-len(first)])
        assert sock.recv(25).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(first)
        assert read_answer(sock)[0] == 200


def test_oversized_bodies_and_heads_are_refused_before_being_read(quick):
    with connect(quick) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n")
        status, _, answer = read_answer(sock)
        assert status == 413 and "--max-body-bytes" in json.loads(answer)["error"]["message"]
    with connect(quick) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
        assert read_answer(sock)[0] == 431
    with connect(quick) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
        status, _, answer = read_answer(sock)
        assert status == 400 and json.loads(answer)["error"]["code"] == "malformed_http"


def test_connections_past_the_cap_get_503(gateway_factory, standins):
    # The fixture's own client keeps one connection open: two more fill the cap of three.
    client = gateway_factory(servers=[standins[0].address], max_connections=3)
    with connect(client) as a, connect(client) as b, connect(client) as c:
        status, headers, _ = read_answer(c)
        assert status == 503 and headers["retry-after"] == "1"
        for sock in (a, b):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answer(sock)[0] == 200


def test_a_client_that_hangs_up_cancels_its_work_and_is_a_499_not_an_error(
        gateway_factory, standins, caplog):
    client = gateway_factory(servers=[standins[0].address])
    standins[0].delay = 1.0
    body = json.dumps({"model": MODEL, "input": "hello"}).encode()
    caplog.set_level(logging.INFO)
    with connect(client) as sock:
        sock.sendall(request_bytes(body))
        deadline = time.monotonic() + 10
        while standins[0].calls == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the chunk is on the stand-in
    with connect(client) as sock:
        sock.sendall(request_bytes(body)[:-3])  # hangs up mid-body
    deadline = time.monotonic() + 10
    while (metric(client, "/v1/embeddings", 499) < 1 or metric(client, "unread", 499) < 1) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(client, "/v1/embeddings", 499) == 1 and metric(client, "unread", 499) == 1
    assert metric(client, "/v1/embeddings", 500) == 0
    abandoned = [r for r in caplog.records if "request.abandoned" in r.getMessage()]
    assert len(abandoned) == 2 and all(r.levelno == logging.INFO for r in abandoned)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_burst_past_what_the_servers_can_do_in_time_is_told_429_at_once(
        gateway_factory, standins):
    """One stand-in that takes 0.2 s per chunk; a burst of 30 requests with a 2 s deadline.
    Those the gateway cannot finish in time get 429 with Retry-After instead of waiting out
    their deadline; every one it admits succeeds."""
    standins[0].delay = 0.2
    standins[0].max_inflight_tokens = 400
    client = gateway_factory(servers=[standins[0].address], chunk_tokens=400)
    texts = ["a hedge of hawthorn and blackthorn"] * 40
    client.post("/v1/embeddings", json={"input": texts}).raise_for_status()  # measured once
    answers = [None] * 30

    def post(i: int) -> None:
        answers[i] = client.post("/v1/embeddings", json={"input": texts},
                                 headers={"x-request-timeout": "2"})

    threads = [threading.Thread(target=post, args=(i,)) for i in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(answer.status_code for answer in answers)
    assert set(statuses) == {200, 429}, statuses
    refused = [a for a in answers if a.status_code == 429]
    assert all(int(a.headers["retry-after"]) >= 1 for a in refused)
    assert all(a.json()["error"]["code"] == "overloaded" for a in refused)
    assert "hedgerow_gateway_admission_refused_total " in client.get("/metrics").text
