"""Logging follows sys.stderr when it is swapped, so a closed stream never gets written to."""

import io
import logging
import sys

from hedgerow import logs


def test_log_lines_follow_the_current_stderr(monkeypatch):
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.configure("info")
    first.close()  # what a finished pytest capture does to the stream the handler saw
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("hedgerow.test").info("%s", logs.fields(event="probe", seconds=1.5))
    assert "event=probe seconds=1.500" in second.getvalue()


def test_json_lines_carry_the_fields_as_keys(monkeypatch):
    import json

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.configure("info", "json")
    log = logging.getLogger("hedgerow.test")
    log.info("%s", logs.fields(event="access", status=200, ms=1.25))
    log.warning("plain %s", "words")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("%s", logs.fields(event="failed"))
    first, second, third = (json.loads(line) for line in stream.getvalue().splitlines()
                            if line.startswith("{"))
    assert first["event"] == "access" and first["status"] == 200 and first["ms"] == 1.25
    assert first["level"] == "INFO" and first["logger"] == "hedgerow.test" and first["time"]
    assert second["message"] == "plain words"
    assert third["event"] == "failed" and "ValueError: boom" in third["exception"]
    assert logs.json_configured()
    logs.configure("info", "text")
    assert not logs.json_configured()


def test_an_unknown_format_is_refused():
    import pytest

    with pytest.raises(ValueError, match="not one of text, json"):
        logs.configure("info", "yaml")
