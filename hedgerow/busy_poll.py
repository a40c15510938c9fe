"""Keep an event loop polling while it waits on work elsewhere, instead of sleeping.

An event loop with nothing ready sleeps in its selector; whatever finishes on another thread or
process must then wake it, and on a virtual machine's CPU that wake-up costs 150-400 µs
(docs/server.md, "Busy poll"). While `busy()` holds, one task turns the loop over and over, so
it polls with a zero timeout and runs the completion at once; the task ends as soon as `busy()`
is false, and the loop sleeps again. Each turn yields the CPU to any thread waiting for it
(`sched_yield`, without which the server's own I/O threads on that CPU waited for the poll's
time slice: 7-11 % fewer requests/s at 16 clients, none with it) and gives the GIL up. The cost
is the CPU the polling takes.
"""

import asyncio
import os
from typing import Callable


class BusyPoll:
    """`start()` after work begins; the poll runs until `busy()` is false."""

    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        try:
            while self._busy():
                os.sched_yield()
                await asyncio.sleep(0)
        finally:
            self._task = None
