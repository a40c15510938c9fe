"""Structured log lines and progress for long steps.

Every process logs `key=value` lines to stderr with a timestamp, so a person can read them and
a log pipeline can parse them. `step()` times a long step (loading weights, warmup) and logs its
duration; `progress()` draws a bar on a terminal and logs milestones elsewhere.
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


class Progress:
    """A progress bar on a terminal; milestone log lines (every 25%) elsewhere."""

    def __init__(self, log: logging.Logger, what: str, total: int) -> None:
        self.log, self.what, self.total = log, what, max(total, 1)
        self.done = 0
        self.start = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self._next_milestone = 25

    def advance(self, count: int = 1) -> None:
        self.done = min(self.done + count, self.total)
        percent = 100 * self.done // self.total
        if self.tty:
            width = 30
            filled = width * self.done // self.total
            bar = "#" * filled + "-" * (width - filled)
            sys.stderr.write(f"\r{self.what} [{bar}] {self.done}/{self.total}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif percent >= self._next_milestone:
            elapsed = time.perf_counter() - self.start
            self.log.info(
                "%s",
                fields(event=f"{self.what}.progress", done=self.done, total=self.total,
                       seconds=elapsed),
            )
            self._next_milestone = (percent // 25 + 1) * 25
