"""Structured log lines, in text or JSON, and the timing of long steps.

Every process logs to stderr, one line per record, in one of two formats (`--log-format`):
`text`, a timestamp, level, logger and `key=value` pairs a person can read; or `json`, one JSON
object per line with the same pairs as keys, for a log pipeline. Call sites write
`log.info("%s", fields(event=..., ...))` either way: `fields` renders the text and keeps the
pairs for the JSON formatter. `step()` times a long step (loading weights, warmup) and logs its
duration.
"""

import contextlib
import datetime
import json
import logging
import sys
import time
from typing import Iterator

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time of the record, not at set-up.

    Code that swaps stderr (pytest's capture, a tool embedding the CLI) would otherwise leave
    the handler writing to a closed stream.
    """

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class Fields(str):
    """The `key=value` text of a log line that also keeps its pairs, for the JSON format."""

    pairs: dict[str, object]


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, then the record's
    `fields` pairs as keys, or its message as `message` when it has none; a traceback goes
    under `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
        }
        args = record.args
        if isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], Fields) \
                and record.msg == "%s":
            line.update(args[0].pairs)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure(level: str = "info", format: str = "text") -> None:
    """Set up stderr logging once per process, in `format` (`text` or `json`)."""
    handler = _StderrHandler()
    if format == "json":
        handler.setFormatter(JsonFormatter())
    elif format == "text":
        handler.setFormatter(logging.Formatter(_TEXT_FORMAT))
    else:
        raise ValueError(f"log format {format!r} is not one of {', '.join(LOG_FORMATS)}")
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def json_configured() -> bool:
    """Whether `configure` set up the json format."""
    return any(isinstance(handler.formatter, JsonFormatter)
               for handler in logging.getLogger().handlers)


def fields(**values: object) -> Fields:
    """Render `key=value` pairs, quoting values that contain spaces."""
    parts = []
    for key, value in values.items():
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        if " " in text or text == "":
            text = '"' + text.replace('"', "'") + '"'
        parts.append(f"{key}={text}")
    line = Fields(" ".join(parts))
    line.pairs = values
    return line


@contextlib.contextmanager
def step(log: logging.Logger, what: str, **context: object) -> Iterator[None]:
    """Log the start and the end of a long step with its duration in seconds."""
    log.info("%s", fields(event=f"{what}.start", **context))
    start = time.perf_counter()
    yield
    log.info("%s", fields(event=f"{what}.done", seconds=time.perf_counter() - start, **context))


def format_setting():
    """The `--log-format` setting every process declares."""
    from hedgerow.settings import setting

    return setting("text", "Format of the log lines on stderr: text (a timestamp, level, "
                   "logger and key=value pairs) or json (one object per line, the same pairs "
                   "as keys).", choices=LOG_FORMATS)
