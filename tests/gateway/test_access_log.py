"""The access log: one line per answered request with method, route, status, tokens and
milliseconds, sampled by --access-log-sample."""

import logging

import pytest

from hedgerow.gateway.access_log import AccessLog


def access_lines(caplog):
    return [record.getMessage() for record in caplog.records
            if record.name == "hedgerow.gateway.access"]


def test_every_request_gets_one_line(gateway_factory, caplog):
    caplog.set_level(logging.INFO, logger="hedgerow.gateway.access")
    client = gateway_factory()
    caplog.clear()
    client.post("/v1/embeddings", json={"input": "hedge row"})
    client.post("/v1/embeddings", json={"input": ""})
    client.get("/v1/models/nope")
    lines = access_lines(caplog)
    assert len(lines) == 3, lines
    ok, empty, missing = lines
    assert ok.startswith("event=access method=POST route=/v1/embeddings status=200 tokens=4 ms=")
    assert "status=400 tokens=0" in empty
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
