"""The one thread that talks to the engine, and the thread that waits for the device.

Every engine call runs on the engine thread: loading, warmup (hot-set capture) and `step`.
The loop sees plain (pageable) copies of the rows, never a LazyTensor, and the engine thread
holds every LazyTensor until it drops it, so the pinned host buffers of the device path are
made and freed on the thread that also captures CUDA graphs, never concurrently with a
capture. (Freeing a pinned buffer records an event on the stream it was copied on; done from
another thread while that stream is being captured, the record would land inside the graph.
An earlier design that let result buffers die on the event loop thread failed on an H200 with
"CUDA error: invalid argument" in the next pinned allocation, once lazy captures began; this
one passes the same test.)

A result already on the host when `step` returns (always, on CPU) comes back with the launch.
For one that is not ready, the engine thread hands the LazyTensor straight to a second thread
(no trip through the event loop), which blocks in `synchronize()` (holding no lock the event
loop needs), copies the rows out of the pinned buffer into pageable memory and completes the
launch's `waited` future: one wakeup of the event loop once the device is done, so the engine
thread stays free to launch the next batch and the result's path back has one thread hop.
Reading a pinned buffer after its event has completed makes no CUDA call; the LazyTensor
itself (pinned buffer, event) stays referenced by the engine thread, which drops it at its
next launch (or at close), so it is still freed there. Knows nothing about requests or
batching.
"""

import asyncio
import itertools
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, NamedTuple

import torch

from hedgerow.engine.batch import RaggedBatch


class Launched(NamedTuple):
    ticket: int
    started: float   # time.monotonic() when the engine took the batch
    returned: float  # when `step` returned
    # The rows, float32 [B, D], when the result was on the host as `step` returned (the CPU
    # engine, or a device that was quick); None means: the result comes with `waited`.
    rows: torch.Tensor | None
    # Completed by the device-wait thread with (rows float32 [B, D] pageable, time.monotonic()
    # when they were on the host), or with the error `synchronize()` raised; None when `rows`
    # came with the launch.
    waited: "Future[tuple[torch.Tensor, float]] | None" = None


class EngineThread:
    """Runs engine work on one thread and device waits on another; all methods are async."""

    def __init__(self) -> None:
        self._engine_thread = ThreadPoolExecutor(1, thread_name_prefix="hedgerow-engine")
        self._wait_thread = ThreadPoolExecutor(1, thread_name_prefix="hedgerow-device-wait")
        self._tickets = itertools.count()
        self._pending: dict[int, Any] = {}  # ticket -> LazyTensor; touched on the engine thread
        self._released: deque[int] = deque()  # tickets whose rows were copied out (wait thread)
        self.engine: Any = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the engine thread (loading, warmup, anything device-side)."""
        return await asyncio.get_running_loop().run_in_executor(self._engine_thread, fn, *args)

    def launch(self, batch: RaggedBatch) -> "asyncio.Future[Launched]":
        """Start `engine.step(batch)` on the engine thread."""
        ticket = next(self._tickets)
        return asyncio.get_running_loop().run_in_executor(
            self._engine_thread, self._launch, ticket, batch)

    async def close(self) -> None:
        """Let waits in progress finish, drop every LazyTensor on the engine thread, stop."""
        await self.run(self._wait_thread.shutdown, True)
        await self.run(self._pending.clear)
        self._released.clear()
        self._engine_thread.shutdown(wait=True)

    # --- on the threads -----------------------------------------------------------------------

    def _launch(self, ticket: int, batch: RaggedBatch) -> Launched:
        while self._released:  # free finished results here, before `step` may capture
            self._pending.pop(self._released.popleft(), None)
        started = time.monotonic()
        lazy = self.engine.step(batch)
        returned = time.monotonic()
        if lazy.ready():
            return Launched(ticket, started, returned, lazy.synchronize().clone())
        self._pending[ticket] = lazy
        waited = self._wait_thread.submit(self._wait, ticket)
        return Launched(ticket, started, returned, None, waited)

    def _wait(self, ticket: int) -> tuple[torch.Tensor, float]:
        lazy = self._pending[ticket]
        try:
            rows = lazy.synchronize().clone()
            done = time.monotonic()
        finally:
            del lazy  # this thread holds no reference once the ticket is released
            self._released.append(ticket)  # the engine thread drops the LazyTensor
        return rows, done
