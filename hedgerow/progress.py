"""A progress bar for long steps (loading weights, capturing graphs, embedding many texts).

Drawn with tqdm on stderr when stderr is a terminal and INFO lines are shown; otherwise (a log
file, a pod, `--log-level warning`) it draws nothing and the step's structured log lines
(`logs.step`, per-item events) say how far along it is. Log lines written while a bar is up go
above it instead of through it.
"""

import contextlib
import logging
import os
import sys
from typing import Iterator

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


def _wanted() -> bool:
    stream = sys.stderr  # None when the process was started with stderr closed
    return (stream is not None and stream.isatty()
            and logging.getLogger().isEnabledFor(logging.INFO))


def _size() -> os.terminal_size:
    """The size of the terminal stderr (where the bar goes) is on; 80 x 24 where it reports
    0 x 0 (a bare pty) or is none (tqdm would draw nothing there)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):
        size = os.terminal_size((0, 0))
    return os.terminal_size((size.columns or 80, size.lines or 24))


@contextlib.contextmanager
def bar(total: int, what: str, unit: str = "it", unit_scale: bool = False) -> Iterator[tqdm]:
    """A bar of `total` steps labelled `what`; call `.update(n)` on it. Gone when the block
    ends (`leave=False`): the step's own done line says how long it took. `unit_scale` shows
    large counts with SI prefixes (bytes as MB/s, say)."""
    shown, size = _wanted(), _size()
    with contextlib.ExitStack() as stack:
        if shown:
            stack.enter_context(logging_redirect_tqdm())
        progress = stack.enter_context(tqdm(total=total, desc=what, unit=unit, leave=False,
                                            unit_scale=unit_scale,
                                            disable=not shown, file=sys.stderr,
                                            ncols=size.columns, nrows=size.lines))
        yield progress
