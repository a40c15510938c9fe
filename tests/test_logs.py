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
