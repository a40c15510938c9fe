"""The scheduling loop: one asyncio task owns the pool and feeds the engine.

Callers `submit()` a request and `await result()`; the loop task alone forms batches
(first come, first served, via `Scheduler`), launches `engine.step` on the one engine thread
(`EngineThread`), and completes each request's future with its pooled rows, float32 [n, D],
once the batch's result is on the host. While batch N is pending it already forms and
launches batch N+1 (at most `depth` batches in flight), so on a GPU the host prepares the next
batch while the device computes, and on CPU (where `step` computes synchronously on the engine
thread) the event loop keeps accepting requests meanwhile.

Per batch: launch (engine thread; `ready()` is checked there as soon as `step` returns, and a
ready result comes back with the launch); if not ready, the engine thread has already handed
it to the device-wait thread, which blocks in `synchronize()` and completes the launch's
`waited` future with a pageable copy of the rows. Each completion wakes the loop task once. A
batch stops counting against the overlap depth once its result is on the host. The event loop
never blocks and never makes a device call.

It knows nothing about gRPC, the wire format or postprocessing: token ids in, raw pooled
float32 rows out. The engine is anything with `step(RaggedBatch) -> LazyTensor`.
"""

import asyncio
import concurrent.futures
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from hedgerow.engine.batch import RaggedBatch
from hedgerow.errors import HedgerowError, NotReadyError
from hedgerow.logs import fields
from hedgerow.server.engine_thread import EngineThread, Launched
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server.scheduler import Batch, Request, Scheduler

log = logging.getLogger("hedgerow.server.loop")


class DeadlineExceededError(HedgerowError):
    """The request's deadline passed before its sequences reached the engine."""


class EngineStepError(HedgerowError):
    """The engine raised while running a batch; every request in it fails."""


def ragged_from_batch(batch: Batch) -> RaggedBatch:
    """Concatenate the batch's sequences (int32 [len] each, numpy arrays or CPU tensors) into
    one RaggedBatch (numpy on the host: a few µs where torch ops cost tens)."""
    entries = batch.entries
    if len(entries) == 1:
        input_ids = np.ascontiguousarray(entries[0].payload, dtype=np.int32)
    else:
        input_ids = np.concatenate([np.asarray(entry.payload) for entry in entries])
    lengths = [entry.length for entry in entries]
    cu_seqlens = np.fromiter(itertools.accumulate(lengths, initial=0), dtype=np.int32,
                             count=len(lengths) + 1)
    return RaggedBatch(input_ids=torch.from_numpy(input_ids),
                       cu_seqlens=torch.from_numpy(cu_seqlens), max_seqlen=max(lengths))


@dataclass(eq=False)
class _Launched:
    """A batch handed to the engine, and where its result stands."""

    batch: Batch
    launch: "asyncio.Future[Launched]"
    # Only for results not ready at launch: (rows, time on the host) from the wait thread.
    wait: "concurrent.futures.Future[tuple[torch.Tensor, float]] | None" = None
    done_at: float = 0.0                                # when the result was on the host

    @property
    def on_device(self) -> bool:
        """Still computing (or copying back): counts against the overlap depth."""
        if not self.launch.done():
            return True                       # being launched (on CPU: computed)
        if self.launch.exception() is not None:
            return False
        waited = self.launch.result().waited
        return waited is not None and not waited.done()  # being waited for


class EmbedLoop:
    """Owns the pool; turns submitted requests into engine steps and completed futures."""

    def __init__(
        self,
        engine: Any,
        scheduler: Scheduler,
        metrics: ServerMetrics,
        *,
        engine_thread: EngineThread | None = None,
        on_crash: Callable[[BaseException], None] | None = None,
        depth: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self._threads = engine_thread or EngineThread()
        self._threads.engine = engine
        self._scheduler = scheduler
        self._metrics = metrics
        self._depth = depth
        self._clock = clock
        self._launched: deque[_Launched] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False
        self._admitting = True
        self._task: asyncio.Task | None = None
        self._on_crash = on_crash
        self.crashed: BaseException | None = None
        self.steps = 0
        self.shapes: set[tuple[int, int]] = set()  # (sequences, tokens) of steps run

    # --- callers (request handlers) -------------------------------------------------------

    def submit(self, payloads: list[torch.Tensor], deadline: float | None) -> Request:
        """Admit one request (int32 [len] token arrays, numpy or CPU tensors, one per
        sequence) or raise.

        Raises NotReadyError while shutting down and OverloadedError past the admission
        bound, both at once. `deadline` is on this loop's clock (time.monotonic).
        """
        if not self._admitting:
            why = "failed" if self.crashed else "is shutting down"
            raise NotReadyError(f"server {why}; send the request to another replica")
        now = self._clock()
        request = Request(
            payloads=payloads,
            lengths=[len(p) for p in payloads],
            deadline=deadline,
            arrival=now,
            handle=asyncio.get_running_loop().create_future(),
        )
        self._scheduler.submit(request)
        self._idle.clear()
        self._wake.set()  # the loop task's pass updates the gauges
        return request

    async def result(self, request: Request) -> torch.Tensor:
        """Wait for `request`'s rows, float32 [n, D] in its sequence order.

        If the waiting caller is cancelled (client cancel, gRPC deadline), the request is
        withdrawn: its sequences still in the pool never reach the engine.
        """
        try:
            return await request.handle
        except asyncio.CancelledError:
            self.cancel(request)
            raise

    def cancel(self, request: Request) -> None:
        """Withdraw a request; its waiting sequences are dropped, its future cancelled."""
        if request.active:
            self._scheduler.cancel(request)
            self._wake.set()
        if not request.handle.done():
            request.handle.cancel()

    @property
    def inflight_tokens(self) -> int:
        """Tokens admitted and not yet answered."""
        return self._scheduler.inflight_tokens

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="hedgerow-scheduling-loop")
        self._task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task) -> None:
        """The loop task must only end through `close()`; if it dies, say so and refuse work."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        log.critical("%s", fields(event="loop.crashed", error=repr(error)), exc_info=error)
        self.crashed = error
        self._admitting = False
        failure = EngineStepError(f"the server's scheduling loop failed: {error!r}")
        for launched in self._launched:
            for request in self._scheduler.fail(launched.batch):
                self._finish(request, exception=failure)
        while (batch := self._scheduler.next_batch(float("-inf"))) is not None:
            for request in self._scheduler.fail(batch):
                self._finish(request, exception=failure)
        self._idle.set()
        if self._on_crash is not None:
            self._on_crash(error)

    def stop_admitting(self) -> None:
        self._admitting = False

    async def drain(self, timeout: float) -> bool:
        """Stop admitting and wait until everything admitted is answered; False on timeout."""
        self.stop_admitting()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop the loop task and the worker threads (after `drain`, or abandoning work)."""
        self._stopping = True
        self._wake.set()
        if self._task is not None and not self._task.done():
            await self._task
        await self._threads.close()

    # --- the loop task ----------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            self._collect()
            self._update_gauges()
            self._launch()
            if self._scheduler.idle and not self._launched:
                self._idle.set()
            await self._wake.wait()
        for launched in self._launched:
            for request in self._scheduler.fail(launched.batch):
                self._finish(request, exception=NotReadyError("server stopped before this "
                                                              "request was answered"))
        self._launched.clear()

    def _launch(self) -> None:
        """Form and launch batches while fewer than `depth` are in flight.

        The hand-off to the engine thread is the last thing done per batch: that thread needs
        the GIL, which this one holds until it yields, so bookkeeping goes first.
        """
        while sum(1 for launched in self._launched if launched.on_device) < self._depth:
            now = self._clock()
            batch = self._scheduler.next_batch(now)
            if batch is None:
                break
            for request in batch.dropped:
                self._finish(request, exception=DeadlineExceededError(
                    "the request's deadline passed while it waited for the engine"))
            self._update_gauges()
            if not batch.entries:
                continue
            for entry in batch.entries:
                if entry.index == 0:
                    self._metrics.queue_seconds.observe(now - entry.request.arrival)
            self.steps += 1
            self.shapes.add((batch.num_seqs, batch.num_tokens))
            self._metrics.tokens.inc(batch.num_tokens)
            self._metrics.batch_tokens.observe(batch.num_tokens)
            self._metrics.batch_sequences.observe(batch.num_seqs)
            launch = self._threads.launch(ragged_from_batch(batch))
            launch.add_done_callback(self._on_done)
            self._launched.append(_Launched(batch, launch))

    def _collect(self) -> None:
        """Complete finished batches in launch order (one stream: they finish in order)."""
        while self._launched:
            head = self._launched[0]
            if not self._advance(head):
                break
            error = head.launch.exception()
            if error is None and head.wait is not None:
                error = head.wait.exception()
            if error is not None:
                self._launched.popleft()
                self._fail(head, error)
                continue
            launched = head.launch.result()
            rows = launched.rows if launched.rows is not None else head.wait.result()[0]
            self._metrics.step_seconds.observe(head.done_at - launched.started)
            finished = self._scheduler.complete(head.batch, rows.numpy())
            self._launched.popleft()
            for request in finished:
                rows_of = request.rows
                whole = rows_of[0][None] if len(rows_of) == 1 else np.stack(rows_of)
                self._finish(request, result=torch.from_numpy(whole))

    def _advance(self, head: _Launched) -> bool:
        """Move the head batch to its next stage; True once its outcome is known."""
        if not head.launch.done():
            return False
        if head.launch.exception() is not None:
            return True
        launched = head.launch.result()
        if launched.rows is not None:
            head.done_at = launched.returned
            return True
        waited = launched.waited
        if not waited.done():
            if head.wait is None:  # wake the loop task once the wait thread is done
                running = asyncio.get_running_loop()
                waited.add_done_callback(lambda _: running.call_soon_threadsafe(self._wake.set))
            head.wait = waited
            return False
        head.wait = waited
        failed = waited.exception() is not None
        head.done_at = time.monotonic() if failed else head.wait.result()[1]
        return True

    def _fail(self, head: _Launched, error: BaseException) -> None:
        log.error("%s", fields(event="engine.step_failed", sequences=head.batch.num_seqs,
                               tokens=head.batch.num_tokens, error=repr(error)),
                  exc_info=error)
        failure = EngineStepError(f"the engine failed on this request's batch: {error}")
        for request in self._scheduler.fail(head.batch):
            self._finish(request, exception=failure)

    def _finish(self, request: Request, *, result: Any = None,
                exception: BaseException | None = None) -> None:
        future = request.handle
        if future.done():
            return
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)

    def _on_done(self, _future: asyncio.Future) -> None:
        self._wake.set()

    def _update_gauges(self) -> None:
        self._metrics.pool_tokens.set(self._scheduler.pool_tokens)
        self._metrics.inflight_tokens.set(self._scheduler.inflight_tokens)
