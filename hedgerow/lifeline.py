"""A child of `hedgerow serve` stops when its parent dies, even of SIGKILL.

`hedgerow serve` runs the server and the gateway as children in their own process groups (so a
terminal's Ctrl-C reaches only the parent, which stops them in order). A parent killed outright
never gets to stop them, so each child watches its parent itself: `HEDGEROW_PARENT_PID` names
the parent, and once the child's parent process is another one (the parent died and the child
was re-parented) the child sends itself SIGTERM, its ordinary graceful stop.
"""

import dataclasses
import logging
import os
import signal
import threading
import time

from hedgerow import settings
from hedgerow.logs import fields
from hedgerow.settings import setting

log = logging.getLogger("hedgerow.lifeline")

POLL_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class LifelineSettings:
    parent_pid: int | None = setting(
        None, "Stop (SIGTERM to itself) when this parent process dies; set by hedgerow serve.",
        minimum=1)


def follow_parent() -> None:
    """Start the watch when HEDGEROW_PARENT_PID is set; return at once either way."""
    parent = settings.load(LifelineSettings).parent_pid
    if parent is None:
        return
    threading.Thread(target=_watch, args=(parent,), name="lifeline", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    log.warning("%s", fields(event="parent.gone", parent_pid=parent,
                             action="stopping (SIGTERM to itself)"))
    os.kill(os.getpid(), signal.SIGTERM)
