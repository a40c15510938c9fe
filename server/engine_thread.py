"""The one thread that talks to the engine, and the thread that waits for the device.

Every engine call runs on the engine thread: loading, warmup (hot-set capture), `step`, and
taking a finished result off its LazyTensor. LazyTensors never leave that thread: a launch
returns a ticket, and `collect(ticket)` hands back a plain (pageable) copy of the rows, so the
pinned host buffers and events of the device path are made, waited on and freed on the thread
that also captures CUDA graphs, never concurrently with a capture. (Freeing a pinned buffer
records an event on the stream it was copied on; done from another thread while that stream
is being captured, the record would land inside the graph. An earlier design that let result
buffers die on the event loop thread failed on an H200 with "CUDA error: invalid argument" in
the next pinned allocation, once lazy captures began; this one passes the same test.)

A result already on the host when `step` returns (always, on CPU) comes back with the launch.
One that is not ready is waited for on a second thread
(`wait(ticket)`, a blocking `synchronize()` that holds no lock the event loop needs), so the
engine thread stays free to launch the next batch. Knows nothing about requests or batching.
"""

import asyncio
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, NamedTuple

import torch

from hedgerow.engine.batch import RaggedBatch


class Launched(NamedTuple):
    ticket: int
    started: float   # time.monotonic() when the engine took the batch
    returned: float  # when `step` returned
    # The rows, float32 [B, D], when the result was on the host as `step` returned (the CPU
    # engine, or a device that was quick); None means: wait, then collect.
    rows: torch.Tensor | None


class EngineThread:
    """Runs engine work on one thread and device waits on another; all methods are async."""

    def __init__(self) -> None:
        self._engine_thread = ThreadPoolExecutor(1, thread_name_prefix="hedgerow-engine")
        self._wait_thread = ThreadPoolExecutor(1, thread_name_prefix="hedgerow-device-wait")
        self._tickets = itertools.count()
        self._pending: dict[int, Any] = {}  # ticket -> LazyTensor; touched on the engine thread
        self.engine: Any = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the engine thread (loading, warmup, anything device-side)."""
        return await asyncio.get_running_loop().run_in_executor(self._engine_thread, fn, *args)

    def launch(self, batch: RaggedBatch) -> "asyncio.Future[Launched]":
        """Start `engine.step(batch)` on the engine thread."""
        ticket = next(self._tickets)
        return asyncio.get_running_loop().run_in_executor(
            self._engine_thread, self._launch, ticket, batch)

    def wait(self, ticket: int) -> "asyncio.Future[float]":
        """Block the wait thread until the ticket's result is on the host; its time."""
        return asyncio.get_running_loop().run_in_executor(self._wait_thread, self._wait, ticket)

    def collect(self, ticket: int) -> "asyncio.Future[torch.Tensor]":
        """The ticket's rows, float32 [B, D], as a pageable copy (engine thread)."""
        return asyncio.get_running_loop().run_in_executor(
            self._engine_thread, self._collect, ticket)

    async def close(self) -> None:
        """Drop results nobody collected (on the engine thread), then stop both threads."""
        await self.run(self._pending.clear)
        self._wait_thread.shutdown(wait=True)
        self._engine_thread.shutdown(wait=True)

    # --- on the threads -----------------------------------------------------------------------

    def _launch(self, ticket: int, batch: RaggedBatch) -> Launched:
        started = time.monotonic()
        lazy = self.engine.step(batch)
        returned = time.monotonic()
        if lazy.ready():
            return Launched(ticket, started, returned, lazy.synchronize().clone())
        self._pending[ticket] = lazy
        return Launched(ticket, started, returned, None)

    def _wait(self, ticket: int) -> float:
        self._pending[ticket].synchronize()
        return time.monotonic()

    def _collect(self, ticket: int) -> torch.Tensor:
        lazy = self._pending.pop(ticket)
        return lazy.synchronize().clone()
