"""Keep an event loop polling while it waits on work elsewhere, instead of sleeping.

An event loop with nothing ready sleeps in its selector; whatever finishes on another thread or
process must then wake it, and on a virtual machine's CPU that wake-up costs 150-400 µs
(docs/server.md, "Busy poll"). While the loop only waits, and for LINGER_S once all is done,
one task turns the loop over and over, so it polls with a zero timeout and runs a completion,
or the next request, at once; then the task ends and the loop sleeps again. A loop with work of
its own is awake anyway, and the poll's turns would only slow it down, so the poll stops then.
Each turn yields the CPU to any thread waiting for it (`sched_yield`, without which the server's
own I/O threads on that CPU waited for the poll's time slice: 7-11 % fewer requests/s at 16
clients) and gives the GIL up. The cost is the CPU the polling takes.
"""

import asyncio
import os
import time
from typing import Callable

# How long the poll outlasts the work: a client that sends its next request as soon as it has
# its answer finds the loop awake (about 130 µs less per request than without, with 1, 2 or
# 5 ms alike on the 2-core machine), while a server between bursts sleeps soon.
LINGER_S = 1e-3


class BusyPoll:
    """`start()` after work goes elsewhere. The poll runs while `waiting()` (the loop has
    nothing to do but wait for that work), and LINGER_S longer once `idle()` (no work
    anywhere); it ends at once when neither holds: the loop has work of its own, which keeps
    it awake without a poll, whose turns would only slow it down."""

    def __init__(self, waiting: Callable[[], bool], idle: Callable[[], bool],
                 linger: float = LINGER_S) -> None:
        self._waiting = waiting
        self._idle = idle
        self._linger = linger
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        # Only a loop that waits needs one: under load this is called at every launch.
        if self._task is None and self._waiting():
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        try:
            until = 0.0  # when an idle loop stops polling; 0: not idle yet
            while True:
                if self._waiting():
                    until = 0.0
                elif not self._idle():
                    return
                elif not until:
                    until = time.monotonic() + self._linger
                elif time.monotonic() >= until:
                    return
                os.sched_yield()
                await asyncio.sleep(0)
        finally:
            self._task = None
