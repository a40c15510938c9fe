"""The one thread that makes every device call: loading, warmup, steps, and Score's ranking.

Work arrives in one queue, in order. A step job carries a ragged batch as numpy arrays; the
thread wraps them as tensors, calls `engine.step` and keeps the LazyTensor in a deque of at
most `depth`. It blocks on the oldest only when the deque is full or no other job is queued,
so on a GPU batch N+1 is launched while batch N computes; on CPU `step` computes before it
returns and the result goes back at once. One exception to blocking at once: right after a
result went back, the event loop is usually forming the next batch from what waited meanwhile,
so for up to `handoff_grace` the thread waits for that job instead, checking the oldest result
every POLL_S; without it, every batch under load would be launched only after the one before
it finished, and the device would idle for each launch. A finished batch goes back to the
event loop with
one `call_soon_threadsafe`: its rows as a float32 numpy array [B, D] (copied out of the
pinned buffer on a GPU, so that buffer and its LazyTensor die here, on the thread that also
captures CUDA graphs, never concurrently with a capture), or the error `step` raised. A step
error is placed here, before anything else runs on the device (server/engine_health.py): a
sticky device error, or one that repeats on the probe batch, comes back as the engine's
`fault`; otherwise the batch's sequences are stepped one by one, and only those that fail
again come back as `bad` (their requests' own errors), with every other row. A call job
(load, warmup, rank, the periodic probe) runs a function here and hands back its result or
error.

The thread touches no asyncio object: the only way back is `call_soon_threadsafe`. It knows
nothing about requests, scheduling or gRPC.
"""

import asyncio
import queue
import threading
import time
from collections import deque
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch

from hedgerow.engine.batch import RaggedBatch
from hedgerow.server import affinity
from hedgerow.server.engine_health import Probe, device_fault


class StepDone(NamedTuple):
    """What the loop gets back for one step: the rows, or the error, and when it ran."""

    rows: np.ndarray | None      # float32 [B, D]; None when the step failed
    error: BaseException | None  # what the step raised, if it did
    started: float               # time.monotonic() when the engine took the batch
    finished: float              # when the rows were in host memory (or the step failed)
    fault: str | None = None     # why the engine can no longer be trusted; rows is None
    bad: tuple[int, ...] = ()    # sequences (batch positions) that failed alone; their rows
                                 # are zeros, every other row is good


class _Step(NamedTuple):
    input_ids: np.ndarray        # int32 [T]
    cu_seqlens: Sequence[int]    # [B+1]
    max_seqlen: int
    done: Callable[[StepDone], None]   # called on the event loop


class _Call(NamedTuple):
    fn: Callable[..., Any]
    args: tuple
    future: "asyncio.Future[Any]"


_STOP = object()
HANDOFF_GRACE_S = 0.5e-3  # the loop's usual time from a hand-back to the next batch's launch
POLL_S = 0.1e-3


class EngineThread:
    """Owns the engine thread; `launch` and `run` are called from the event loop."""

    def __init__(self, depth: int = 1, handoff_grace: float = HANDOFF_GRACE_S,
                 cpus: set[int] | None = None) -> None:
        """`cpus`: the CPUs this thread (and the threads torch starts from it) may run on;
        None keeps the creating thread's."""
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.depth = depth
        self.cpus = cpus
        self.handoff_grace = handoff_grace
        self.engine: Any = None
        self.probe: Probe | None = None  # places step errors; None: only sticky ones are fatal
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._work, name="hedgerow-engine", daemon=True)

    def _started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._thread.start()
        return self._loop

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the engine thread (loading, warmup, ranking) and return its
        result; its exception is raised here."""
        future = self._started().create_future()
        self._jobs.put(_Call(fn, args, future))
        return await future

    def launch(self, input_ids: np.ndarray, cu_seqlens: Sequence[int], max_seqlen: int,
               done: Callable[[StepDone], None]) -> None:
        """Queue `engine.step` of one ragged batch (int32 [T] and its offsets [B+1]); `done`
        is called on the event loop once its rows are on the host or the step failed."""
        self._started()
        self._jobs.put(_Step(input_ids, cu_seqlens, max_seqlen, done))

    async def close(self) -> None:
        """Finish the queued work, drop every LazyTensor on the engine thread, stop it."""
        if self._loop is None:
            return
        self._jobs.put(_STOP)
        await asyncio.to_thread(self._thread.join)

    # --- on the engine thread ----------------------------------------------------------------

    def _work(self) -> None:
        if self.cpus:
            affinity.pin(self.cpus)  # before torch starts any thread from here
        pending: deque[tuple[_Step, Any, float]] = deque()  # (job, LazyTensor, started)
        handed_back = False  # a result just went back: the loop is likely forming a batch
        while True:
            job = None
            if pending and (len(pending) >= self.depth or self._jobs.empty()):
                if handed_back and len(pending) < self.depth:
                    job = self._await_job(pending[0][1])
                if job is None:
                    self._finish(*pending.popleft())
                    handed_back = True
                    continue
            if job is None:
                job = self._jobs.get()
            handed_back = False
            if job is _STOP:
                while pending:
                    self._finish(*pending.popleft())
                return
            if isinstance(job, _Call):
                self._call(job)
                continue
            started = time.monotonic()
            try:
                lazy = self.engine.step(RaggedBatch(
                    input_ids=torch.from_numpy(job.input_ids),
                    # via numpy: torch.tensor of a tuple costs several times more cold
                    cu_seqlens=torch.from_numpy(np.array(job.cu_seqlens, dtype=np.int32)),
                    max_seqlen=job.max_seqlen))
            except Exception as error:  # placed, and answered; the thread keeps serving
                self._hand_back(job.done, self._failed(job, error, started))
                continue
            if lazy.ready():
                self._finish(job, lazy, started)
                handed_back = True
            else:
                pending.append((job, lazy, started))

    def _await_job(self, oldest: Any) -> Any:
        """The next job if one comes within the hand-off grace while `oldest` computes; None
        once `oldest` is ready or the grace is over."""
        deadline = time.monotonic() + self.handoff_grace
        while not oldest.ready() and time.monotonic() < deadline:
            try:
                return self._jobs.get(timeout=POLL_S)
            except queue.Empty:
                pass
        return None

    def _finish(self, job: _Step, lazy: Any, started: float) -> None:
        error = None
        try:
            rows = lazy.synchronize().numpy()
            if lazy.pinned:
                rows = rows.copy()  # the pinned buffer is freed here, with `lazy`
            done = StepDone(rows, None, started, time.monotonic())
        except Exception as raised:
            error = raised
        del lazy
        if error is not None:
            done = self._failed(job, error, started)
        self._hand_back(job.done, done)

    def _failed(self, job: _Step, error: Exception, started: float) -> StepDone:
        """Place a step error: the engine's fault, or the sequences that fail on their own."""
        fault = device_fault(error)
        if fault is None and self.probe is None:  # nothing to place it by: the batch fails
            return StepDone(None, error, started, time.monotonic())
        if fault is None and (problem := self.probe.check(self.engine)) is not None:
            fault = f"a step failed ({type(error).__name__}: {str(error)[:200]}) and {problem}"
        if fault is not None:
            return StepDone(None, error, started, time.monotonic(), fault=fault)
        rows, bad = [], []
        for position, (a, b) in enumerate(zip(job.cu_seqlens[:-1], job.cu_seqlens[1:])):
            try:
                rows.append(self.engine.step(RaggedBatch.from_sequences(
                    [job.input_ids[a:b].tolist()])).synchronize().numpy()[0].copy())
            except Exception:  # this sequence's own error: its request fails, no other
                rows.append(None)
                bad.append(position)
        width = next((len(row) for row in rows if row is not None), 0)
        joined = np.stack([np.zeros(width, np.float32) if row is None else row for row in rows])
        return StepDone(joined, error, started, time.monotonic(), bad=tuple(bad))

    def _call(self, job: _Call) -> None:
        try:
            result = job.fn(*job.args)
        except BaseException as error:
            self._hand_back(_settle, job.future, None, error)
        else:
            self._hand_back(_settle, job.future, result, None)

    def _hand_back(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the event loop is closed: nobody is waiting any more
            pass


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
