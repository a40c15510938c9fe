"""The access log: one line per answered request with its id, method, route, status, tokens,
milliseconds, client address and user agent, sampled by --access-log-sample; the request id
echoed on every answer; TEI's timing headers on every embeddings answer."""

import logging
import re

import pytest

from tests.gateway.test_connections import connect, read_answer

from hedgerow.gateway.access_log import AccessLog


def access_lines(caplog):
    return [record.getMessage() for record in caplog.records
            if record.name == "hedgerow.gateway.access"]


def test_every_request_gets_one_line(gateway_factory, caplog):
    caplog.set_level(logging.INFO, logger="hedgerow.gateway.access")
    client = gateway_factory()
    caplog.clear()
    client.post("/v1/embeddings", json={"input": "hedge row"},
                headers={"x-request-id": "abc-123", "user-agent": "hedge-client/1.0"})
    client.post("/v1/embeddings", json={"input": ""})
    client.get("/v1/models/nope")
    lines = access_lines(caplog)
    assert len(lines) == 3, lines
    ok, empty, missing = lines
    assert ok.startswith("event=access request_id=abc-123 method=POST route=/v1/embeddings "
                         "status=200 tokens=4 ms=")
    assert ok.endswith(" client=127.0.0.1 user_agent=hedge-client/1.0")
    assert re.search(r"request_id=[0-9a-f]{32} .*status=400 tokens=0", empty)
    assert "route=/v1/models/{model} status=404" in missing and "nope" not in missing


def test_sample_zero_logs_nothing(gateway_factory, caplog):
    caplog.set_level(logging.INFO, logger="hedgerow.gateway.access")
    client = gateway_factory(access_log_sample=0)
    client.post("/v1/embeddings", json={"input": "hedge row"})
    assert access_lines(caplog) == []


@pytest.mark.parametrize("sample, low, high", [(0.25, 150, 350), (1.0, 1000, 1000)])
def test_a_fraction_is_sampled(caplog, sample, low, high):
    caplog.set_level(logging.INFO, logger="hedgerow.gateway.access")
    log = AccessLog(sample)
    for _ in range(1000):
        log.record("GET", "/healthz", 200, 0, 0.001)
    assert low <= len(access_lines(caplog)) <= high


def test_request_id_is_echoed_on_every_answer(gateway_factory):
    client = gateway_factory()
    kept = client.post("/v1/embeddings", json={"input": "hi"}, headers={"x-request-id": "r-1"})
    assert kept.headers["x-request-id"] == "r-1"
    made = [client.post("/v1/embeddings", json={"input": "hi"}).headers["x-request-id"]
            for _ in range(2)]
    assert all(re.fullmatch("[0-9a-f]{32}", rid) for rid in made) and made[0] != made[1]
    # Not visible ASCII, or too long: replaced by a new one.
    for bad in ("has space", "x" * 129, "caf\u00e9".encode()):
        answer = client.get("/healthz", headers={"x-request-id": bad})
        assert re.fullmatch("[0-9a-f]{32}", answer.headers["x-request-id"]), bad
    assert client.get("/healthz", headers={"x-request-id": "x" * 128}).headers[
        "x-request-id"] == "x" * 128
    # Errors too: a route's (400, TEI's 422), FastAPI's router (404, 405).
    errors = [client.post("/v1/embeddings", json={"input": ""}, headers={"x-request-id": "e1"}),
              client.post("/embed", json={"inputs": 5}, headers={"x-request-id": "e2"}),
              client.get("/nowhere", headers={"x-request-id": "e3"}),
              client.get("/v1/embeddings", headers={"x-request-id": "e4"})]
    assert [e.status_code for e in errors] == [400, 422, 404, 405]
    assert [e.headers["x-request-id"] for e in errors] == ["e1", "e2", "e3", "e4"]


TIMINGS = ("x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time")


def test_every_embeddings_answer_has_the_timing_headers(gateway_factory):
    client = gateway_factory()
    answers = [client.post("/v1/embeddings", json={"input": ["a", "b"]}),
               client.post("/embed", json={"inputs": "a"}),
               client.post("/", json={"inputs": "a"}),
               client.post("/v2/embed", json={"texts": ["a"], "input_type": "search_query"})]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        values = [int(answer.headers[name]) for name in TIMINGS]
        assert all(value >= 0 for value in values), answer.headers
        assert values[0] >= values[1]
    # Not on other answers.
    assert "x-total-time" not in client.get("/healthz").headers


def test_the_http_servers_own_refusals_carry_an_id(gateway_factory):
    """413 on the declared length and 400 for a head that cannot be parsed: the client's id
    (its header had arrived); a head timeout on a connection that sent nothing: a new one."""
    client = gateway_factory(head_timeout=0.3)
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-1\r\n"
    with connect(client) as sock:
        sock.sendall(head + b"Content-Length: 99999999999\r\n\r\n")
        status, headers, _ = read_answer(sock)
    assert (status, headers["x-request-id"]) == (413, "big-1")
    with connect(client) as sock:
        sock.sendall(head + b"Content-Length: nope\r\n\r\n")
        status, headers, _ = read_answer(sock)
    assert (status, headers["x-request-id"]) == (400, "big-1")
    with connect(client) as sock:  # sends nothing: 408 after --head-timeout
        status, headers, _ = read_answer(sock)
    assert status == 408 and re.fullmatch("[0-9a-f]{32}", headers["x-request-id"])
