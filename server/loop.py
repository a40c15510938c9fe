"""The asyncio side of the server: it owns the pool and forms the batches the engine runs.

Callers `submit()` a request (its token ids as numpy int32 arrays) and `await result()`.
Everything here runs on the event loop, as plain calls and callbacks, without a task of its
own: a submit that finds fewer than `depth` batches on the engine forms a batch at once (first
come, first served, via `Scheduler`) and queues it on the engine thread, so a request reaching
an idle server waits for nothing but that hand-off; otherwise its sequences wait in the pool.
When the engine thread hands a batch back (once per batch), its rows complete the requests
that are now whole and the next batch is formed from whatever accumulated meanwhile. At most
`depth` batches are on the engine: 2 on a GPU (batch N+1 launched while N computes), 1 on CPU.

A step the engine thread placed as the engine's fault (server/engine_health.py), or a failed
periodic probe (`fail_engine`), fails the engine for good: everything admitted fails, nothing
more is admitted (UNAVAILABLE, so gateways send it elsewhere), `failed` says why and
`on_engine_failed` tells the server, which turns health NOT_SERVING and liveness 503. A step
whose sequences failed alone fails only their requests, as invalid input.

It knows nothing about gRPC, byte layouts or postprocessing: token ids in, raw pooled float32
rows out (numpy [n, D] per request). No torch call runs here.
"""

import asyncio
import itertools
import logging
import time
from typing import Any, Callable, Sequence

import numpy as np

from hedgerow.errors import HedgerowError, InvalidInputError, NotReadyError
from hedgerow.logs import fields
from hedgerow.server.engine_thread import EngineThread, StepDone
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server.scheduler import FAILED, Batch, Request, Scheduler

log = logging.getLogger("hedgerow.server.loop")


class DeadlineExceededError(HedgerowError):
    """The request's deadline passed before its sequences reached the engine."""


class EngineStepError(HedgerowError):
    """The engine raised while running a batch; every request in it fails."""


def ragged_arrays(batch: Batch) -> tuple[np.ndarray, Sequence[int], int]:
    """The batch's sequences as one ragged batch: (input_ids int32 [T], the offsets
    cu_seqlens [B+1], max_seqlen). A batch that is exactly one request uses that request's
    own arrays; otherwise the sequences are joined here, once."""
    whole = batch.whole
    if whole is not None:
        input_ids, cu_seqlens = whole.ragged
        return input_ids, cu_seqlens, max(whole.lengths)
    lengths = [entry.length for entry in batch.entries]
    cu_seqlens = list(itertools.accumulate(lengths, initial=0))
    input_ids = np.concatenate([entry.payload for entry in batch.entries])
    return input_ids, cu_seqlens, max(lengths)


class EmbedLoop:
    """Owns the pool; turns submitted requests into engine steps and completed futures."""

    def __init__(
        self,
        engine_thread: EngineThread,
        scheduler: Scheduler,
        metrics: ServerMetrics,
        *,
        on_crash: Callable[[BaseException], None] | None = None,
        on_engine_failed: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine_thread
        self._scheduler = scheduler
        self._metrics = metrics
        self._clock = clock
        self._on_crash = on_crash
        self._on_engine_failed = on_engine_failed
        self._on_engine: set[Batch] = set()  # batches queued on or running in the engine thread
        self._idle = asyncio.Event()
        self._idle.set()
        self._admitting = True
        self.crashed: BaseException | None = None
        self.failed: str | None = None  # why the engine failed, once it has
        self.steps = 0
        self.shapes: set[tuple[int, int]] = set()  # (sequences, tokens) of steps run
        metrics.pool_tokens.set_function(lambda: scheduler.pool_tokens)
        metrics.inflight_tokens.set_function(lambda: scheduler.inflight_tokens)

    # --- callers (request handlers) -------------------------------------------------------

    def submit(self, input_ids: np.ndarray, cu_seqlens: Sequence[int], lengths: list[int],
               deadline: float | None) -> Request:
        """Admit one request (a valid ragged layout: int32 [T], the offsets [B+1], and its B
        lengths) or raise, and launch a batch if the engine has room.

        Raises NotReadyError while shutting down and OverloadedError past the admission
        bound, both at once. `deadline` is on this loop's clock (time.monotonic).
        """
        if not self._admitting:
            why = "failed" if self.crashed else "is shutting down"
            if self.failed:
                why = f"engine failed ({self.failed})"
            raise NotReadyError(f"server {why}; send the request to another replica")
        if len(lengths) == 1:
            payloads = [input_ids]
        else:
            payloads = [input_ids[a:b] for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:])]
        request = Request(
            payloads=payloads,
            lengths=lengths,
            deadline=deadline,
            arrival=self._clock(),
            handle=asyncio.get_running_loop().create_future(),
            ragged=(input_ids, cu_seqlens),
        )
        self._scheduler.submit(request)
        self._idle.clear()
        self._launch()
        return request

    async def result(self, request: Request) -> np.ndarray:
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
            self._settle_idle()
        if not request.handle.done():
            request.handle.cancel()

    @property
    def idle(self) -> bool:
        """Nothing admitted is waiting or on the engine."""
        return not self._on_engine and self._scheduler.idle

    @property
    def inflight_tokens(self) -> int:
        """Tokens admitted and not yet answered."""
        return self._scheduler.inflight_tokens

    # --- lifecycle --------------------------------------------------------------------------

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
        """Stop the engine thread (after `drain`, or abandoning what is still pooled)."""
        self._admitting = False
        while (batch := self._scheduler.next_batch(float("-inf"))) is not None:
            self._fail(batch, NotReadyError("server stopped before this request was answered"))
        await self._engine.close()

    # --- batches ------------------------------------------------------------------------------

    def _launch(self) -> None:
        """Form and launch batches while fewer than `depth` are on the engine."""
        while len(self._on_engine) < self._engine.depth:
            now = self._clock()
            batch = self._scheduler.next_batch(now)
            if batch is None:
                break
            for request in batch.dropped:
                _finish(request, exception=DeadlineExceededError(
                    "the request's deadline passed while it waited for the engine"))
            if not batch.entries:
                continue
            for entry in batch.entries:
                if entry.index == 0:
                    entry.request.batched = now
                    self._metrics.record(self._metrics.queue_seconds.observe,
                                         now - entry.request.arrival)
            self.steps += 1
            self.shapes.add((batch.num_seqs, batch.num_tokens))
            self._metrics.record(self._metrics.tokens.inc, batch.num_tokens)
            self._metrics.record(self._metrics.batch_tokens.observe, batch.num_tokens)
            self._metrics.record(self._metrics.batch_sequences.observe, batch.num_seqs)
            self._on_engine.add(batch)
            self._engine.launch(*ragged_arrays(batch),
                                lambda outcome, batch=batch: self._done(batch, outcome))
        self._settle_idle()

    def _done(self, batch: Batch, outcome: StepDone) -> None:
        """The engine thread handed `batch` back: answer its requests, launch what waits."""
        self._on_engine.discard(batch)
        # After a crash or an engine failure its requests have been failed already.
        if self.crashed is None and self.failed is None:
            try:
                self._answer(batch, outcome)
                self._launch()
            except Exception as error:  # a bug here must not leave callers waiting forever
                self._crash(error, batch)
        self._settle_idle()

    def _answer(self, batch: Batch, outcome: StepDone) -> None:
        self._metrics.record(self._metrics.step_seconds.observe,
                             outcome.finished - outcome.started)
        if outcome.error is not None:
            log.error("%s", fields(event="engine.step_failed", sequences=batch.num_seqs,
                                   tokens=batch.num_tokens, error=repr(outcome.error),
                                   fault=outcome.fault, bad_sequences=len(outcome.bad)),
                      exc_info=outcome.error)
        if outcome.rows is None:
            self._fail(batch, EngineStepError(
                f"the engine failed on this request's batch: {outcome.error}"))
            if outcome.fault is not None:
                self.fail_engine(outcome.fault)
            return
        for position in outcome.bad:  # failed alone: the request's own input
            entry = batch.entries[position]
            if entry.request.active:
                self._scheduler.cancel(entry.request, FAILED)
                _finish(entry.request, exception=InvalidInputError(
                    f"the engine could not embed sequence {entry.index} of this request (the "
                    f"other sequences and a probe batch ran): {outcome.error}"))
        whole = batch.whole
        for request in self._scheduler.complete(batch, outcome.rows):
            _finish(request, result=outcome.rows if request is whole else _joined(request.rows))

    def _fail(self, batch: Batch, error: BaseException) -> None:
        for request in self._scheduler.fail(batch):
            _finish(request, exception=error)

    def fail_engine(self, reason: str) -> None:
        """The engine can no longer be trusted: fail everything admitted, admit nothing more,
        tell the server (once)."""
        if self.failed is not None:
            return
        log.critical("%s", fields(event="engine.failed", reason=reason))
        self.failed = reason
        self._admitting = False
        failure = NotReadyError(f"the server's engine failed ({reason}); send the request to "
                                "another replica")
        while (batch := self._scheduler.next_batch(float("-inf"))) is not None:
            self._fail(batch, failure)
        for batch in list(self._on_engine):
            self._fail(batch, failure)
        self._settle_idle()
        if self._on_engine_failed is not None:
            self._on_engine_failed(reason)

    def _crash(self, error: BaseException, batch: Batch) -> None:
        """A bug in answering `batch`: fail everything admitted, refuse more, report it."""
        log.critical("%s", fields(event="loop.crashed", error=repr(error)), exc_info=error)
        self.crashed = error
        self._admitting = False
        failure = EngineStepError(f"the server's scheduling loop failed: {error!r}")
        for admitted in [batch, *self._on_engine]:
            self._fail(admitted, failure)
        while (batch := self._scheduler.next_batch(float("-inf"))) is not None:
            self._fail(batch, failure)
        if self._on_crash is not None:
            self._on_crash(error)

    def _settle_idle(self) -> None:
        if not self._on_engine and (self._scheduler.idle or self.crashed is not None):
            self._idle.set()


def _joined(rows: list[np.ndarray]) -> np.ndarray:
    """A request's rows as one array [n, D]; a view for one row (np.stack costs ~50 µs cold)."""
    return rows[0][None] if len(rows) == 1 else np.stack(rows)


def _finish(request: Request, *, result: Any = None,
            exception: BaseException | None = None) -> None:
    future = request.handle
    if future.done():
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
