"""Structured log lines, and the timing of long steps.

Every process logs `key=value` lines to stderr with a timestamp, so a person can read them and
a log pipeline can parse them. `step()` times a long step (loading weights, warmup) and logs its
duration.
"""

import contextlib
import logging
import sys
import time
from typing import Iterator

_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


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


def configure(level: str = "info") -> None:
    """Set up stderr logging once per process."""
    logging.basicConfig(level=level.upper(), format=_FORMAT, handlers=[_StderrHandler()],
                        force=True)


def fields(**values: object) -> str:
    """Render `key=value` pairs, quoting values that contain spaces."""
    parts = []
    for key, value in values.items():
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        if " " in text or text == "":
            text = '"' + text.replace('"', "'") + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


@contextlib.contextmanager
def step(log: logging.Logger, what: str, **context: object) -> Iterator[None]:
    """Log the start and the end of a long step with its duration in seconds."""
    log.info("%s", fields(event=f"{what}.start", **context))
    start = time.perf_counter()
    yield
    log.info("%s", fields(event=f"{what}.done", seconds=time.perf_counter() - start, **context))
