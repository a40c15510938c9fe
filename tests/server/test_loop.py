"""The scheduling loop and the engine thread: overlap, ordering, cancellation, failures.

Most tests use a stand-in engine on purpose: what they check is how the loop behaves when
`step` returns at once and the result arrives later (a GPU), which cannot happen on this
CPU-only machine. The stand-in's LazyTensor-like handles stay not-ready until the test
releases them; its rows encode which sequence they belong to, so misrouting would show.
`CompletedEngine` answers the way the CPU engine does (a completed LazyTensor). The real
engine behind the real server is covered by test_server_process.py. Every test runs its
event loop in asyncio's debug mode, which raises when another thread touches the loop's
objects (a callback or future set from the engine thread would fail the test).
"""

import asyncio
import itertools
import threading

import numpy as np
import pytest
import torch

from hedgerow.engine.lazy import LazyTensor
from hedgerow.errors import NotReadyError, OverloadedError
from hedgerow.server.engine_thread import EngineThread
from hedgerow.server.loop import DeadlineExceededError, EmbedLoop, EngineStepError
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server.scheduler import Scheduler

WIDTH = 4


def run(main):
    return asyncio.run(main(), debug=True)


class PendingResult:
    """Like a LazyTensor on a GPU: not ready until released; synchronize() blocks until then."""

    pinned = True

    def __init__(self, rows: torch.Tensor) -> None:
        self._rows = rows
        self._done = threading.Event()

    def release(self) -> None:
        self._done.set()

    def ready(self) -> bool:
        return self._done.is_set()

    def synchronize(self) -> torch.Tensor:
        if not self._done.wait(30):
            raise TimeoutError("test never released this result")
        return self._rows


class DeviceLikeEngine:
    """Records each step; row i of a batch is [first token of sequence i] * WIDTH."""

    def __init__(self, fail_on_token: int | None = None) -> None:
        self.batches: list[list[list[int]]] = []
        self.results: list[PendingResult] = []
        self.fail_on_token = fail_on_token
        self.open = threading.Event()  # `step` waits for it: a test can hold the engine thread
        self.open.set()

    def step(self, batch):
        assert self.open.wait(30), "test never let the engine thread go on"
        cu = batch.cu_seqlens.tolist()
        seqs = [batch.input_ids[a:b].tolist() for a, b in zip(cu[:-1], cu[1:])]
        if self.fail_on_token is not None and any(self.fail_on_token in s for s in seqs):
            raise RuntimeError("device fell over")
        self.batches.append(seqs)
        rows = torch.tensor([[float(s[0])] * WIDTH for s in seqs])
        result = PendingResult(rows)
        self.results.append(result)
        return result

    def release_all(self) -> None:
        for result in self.results:
            result.release()

    @property
    def tokens_seen(self) -> set[int]:
        return {t for batch in self.batches for seq in batch for t in seq}


class CompletedEngine:
    """Like the CPU engine: the result is complete when `step` returns."""

    def __init__(self) -> None:
        self.steps = 0

    def step(self, batch):
        self.steps += 1
        cu = batch.cu_seqlens.tolist()
        firsts = [float(batch.input_ids[a]) for a in cu[:-1]]
        return LazyTensor.completed(torch.tensor([[f] * WIDTH for f in firsts]))


def seq(*tokens: int) -> list[int]:
    return list(tokens)


def submit(loop: EmbedLoop, sequences: list[list[int]], deadline: float | None):
    """Submit token-id lists as one request, in the ragged layout the servicer hands over."""
    lengths = [len(s) for s in sequences]
    cu_seqlens = list(itertools.accumulate(lengths, initial=0))
    input_ids = np.asarray([t for s in sequences for t in s], dtype=np.int32)
    return loop.submit(input_ids, cu_seqlens, lengths, deadline)


async def until(condition, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.005)):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never held")


def make_loop(engine, *, tokens=4, seqs=8, inflight=1000, clock=None, depth=2,
              handoff_grace=0.5e-3) -> EmbedLoop:
    threads = EngineThread(depth=depth, handoff_grace=handoff_grace)
    threads.engine = engine
    scheduler = Scheduler(tokens, seqs, inflight)
    kwargs = {"clock": clock} if clock else {}
    return EmbedLoop(threads, scheduler, ServerMetrics(), **kwargs)


def test_batch_n_plus_1_is_launched_while_batch_n_is_pending():
    """The engine thread blocks on the oldest result only when `depth` are pending or nothing
    else is queued: B, queued behind A, is launched while A computes; C waits in the pool
    (two batches on the engine) and is launched once A is back, within the hand-off grace
    (long here, so that a busy machine cannot make the test miss it)."""
    async def main():
        engine = DeviceLikeEngine()
        engine.open.clear()                                # A's step waits until B is queued
        loop = make_loop(engine, tokens=4, handoff_grace=30.0)
        a = submit(loop, [seq(10, 1, 1, 1)], None)
        b = submit(loop, [seq(20, 2, 2, 2)], None)
        c = submit(loop, [seq(30, 3, 3, 3)], None)
        engine.open.set()
        await until(lambda: len(engine.batches) == 2)      # B launched, A still pending
        await asyncio.sleep(0.05)
        assert len(engine.batches) == 2 and not engine.results[0].ready()  # depth 2: C waits
        engine.results[0].release()
        rows_a = await loop.result(a)
        await until(lambda: len(engine.batches) == 3)      # A done: C launched
        engine.release_all()
        rows_b, rows_c = await loop.result(b), await loop.result(c)
        await loop.drain(5)
        await loop.close()
        return rows_a, rows_b, rows_c

    rows_a, rows_b, rows_c = run(main)
    assert rows_a.tolist() == [[10.0] * WIDTH]
    assert rows_b.tolist() == [[20.0] * WIDTH]
    assert rows_c.tolist() == [[30.0] * WIDTH]


def test_a_request_split_over_batches_gets_its_rows_in_its_own_order():
    async def main():
        engine = DeviceLikeEngine()
        loop = make_loop(engine, tokens=3, seqs=2)
        request = submit(loop, [seq(1, 0), seq(2), seq(3, 0), seq(4), seq(5, 0, 0)], None)
        while not request.handle.done():
            engine.release_all()
            await asyncio.sleep(0.005)
        rows = await loop.result(request)
        await loop.close()
        return rows, engine.batches

    rows, batches = run(main)
    assert [r[0] for r in rows.tolist()] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert len(batches) >= 3 and all(sum(len(s) for s in b) <= 3 for b in batches)


def test_cancelled_and_expired_requests_never_reach_the_engine():
    now = [0.0]

    async def main():
        engine = DeviceLikeEngine()
        engine.open.clear()                                # first's step waits for second
        loop = make_loop(engine, tokens=4, clock=lambda: now[0])
        first = submit(loop, [seq(10, 1, 1, 1)], None)
        second = submit(loop, [seq(20, 2, 2, 2)], None)
        engine.open.set()
        await until(lambda: len(engine.batches) == 2)      # both in flight, depth reached
        doomed = submit(loop, [seq(66, 6)], deadline=5.0)
        waiter = asyncio.ensure_future(loop.result(submit(loop, [seq(77, 7)], None)))
        await asyncio.sleep(0.01)
        waiter.cancel()                                    # the caller goes away
        kept = submit(loop, [seq(30, 3)], None)
        now[0] = 10.0                                      # doomed's deadline passes
        engine.release_all()
        await loop.result(first)
        await loop.result(second)
        while not kept.handle.done():
            engine.release_all()
            await asyncio.sleep(0.005)
        rows = await loop.result(kept)
        with pytest.raises(DeadlineExceededError):
            await loop.result(doomed)
        assert await loop.drain(5)
        await loop.close()
        return engine.tokens_seen, rows

    tokens_seen, rows = run(main)
    assert 66 not in tokens_seen and 77 not in tokens_seen
    assert rows.tolist() == [[30.0] * WIDTH]


def test_an_engine_failure_fails_only_its_batch_and_the_loop_keeps_serving():
    async def main():
        engine = DeviceLikeEngine(fail_on_token=99)
        engine.open.clear()                                # before's step waits for bad
        loop = make_loop(engine, tokens=2)
        before = submit(loop, [seq(4, 4)], None)           # in flight beside the bad batch
        bad = submit(loop, [seq(99, 9)], None)
        engine.open.set()
        with pytest.raises(EngineStepError, match="device fell over"):
            await loop.result(bad)
        engine.release_all()
        assert (await loop.result(before)).tolist() == [[4.0] * WIDTH]
        good = submit(loop, [seq(5, 5)], None)
        while not good.handle.done():
            engine.release_all()
            await asyncio.sleep(0.005)
        rows = await loop.result(good)
        await loop.close()
        return rows

    assert run(main).tolist() == [[5.0] * WIDTH]


def test_admission_and_shutdown_refuse_at_once():
    async def main():
        engine = DeviceLikeEngine()
        loop = make_loop(engine, tokens=4, inflight=6)
        held = submit(loop, [seq(1, 1, 1, 1)], None)
        with pytest.raises(OverloadedError):
            submit(loop, [seq(2, 2, 2)], None)
        loop.stop_admitting()
        with pytest.raises(NotReadyError, match="shutting down"):
            submit(loop, [seq(3)], None)
        drained_early = await loop.drain(0.05)             # held is not answered yet
        engine.release_all()
        drained = await loop.drain(5)
        rows = await loop.result(held)
        await loop.close()
        return drained_early, drained, rows

    drained_early, drained, rows = run(main)
    assert drained_early is False and drained is True
    assert rows.tolist() == [[1.0] * WIDTH]


def test_results_complete_when_step_returns_them_ready_as_on_cpu():
    async def main():
        engine = CompletedEngine()
        loop = make_loop(engine, tokens=3, seqs=2)
        requests = [submit(loop, [seq(10 * r + i, 0) for i in range(1 + r % 3)], None)
                    for r in range(7)]
        rows = [await loop.result(request) for request in requests]
        assert await loop.drain(5)
        await loop.close()
        return rows, engine.steps

    rows, steps = run(main)
    for r, got in enumerate(rows):
        assert [row[0] for row in got.tolist()] == [10.0 * r + i for i in range(1 + r % 3)]
    assert steps >= 7


class BrokenScheduler(Scheduler):
    def complete(self, batch, rows):
        raise RuntimeError("a bug in result assembly")


def test_a_crashed_loop_fails_pending_work_refuses_more_and_reports_the_crash():
    crashes = []

    async def main():
        threads = EngineThread(depth=2)
        threads.engine = CompletedEngine()
        loop = EmbedLoop(threads, BrokenScheduler(4, 8, 1000), ServerMetrics(),
                         on_crash=crashes.append)
        first = submit(loop, [seq(1, 1, 1, 1)], None)
        second = submit(loop, [seq(2, 2)], None)
        outcomes = []
        for request in (first, second):
            with pytest.raises(EngineStepError, match="scheduling loop failed") as error:
                await loop.result(request)
            outcomes.append(error.value)
        with pytest.raises(NotReadyError, match="server failed"):
            submit(loop, [seq(3)], None)
        await loop.close()
        return outcomes

    assert len(run(main)) == 2
    assert len(crashes) == 1 and "a bug in result assembly" in str(crashes[0])


class FreedWhereResult:
    """Not ready when `step` returns, ready at the first wait; records the thread it dies on."""

    pinned = True

    def __init__(self, rows: torch.Tensor, freed: list[str]) -> None:
        self._rows = rows
        self._freed = freed

    def ready(self) -> bool:
        return False

    def synchronize(self) -> torch.Tensor:
        return self._rows

    def __del__(self) -> None:
        self._freed.append(threading.current_thread().name)


class KeepsNothingEngine:
    """Device-like results the engine keeps no reference to (as the GPU engine's)."""

    def __init__(self) -> None:
        self.freed: list[str] = []

    def step(self, batch):
        first = float(batch.input_ids[0])
        return FreedWhereResult(torch.full((batch.num_seqs, WIDTH), first), self.freed)


def test_results_are_freed_on_the_engine_thread():
    """The loop gets a copy of the rows; the result itself (on a GPU: its pinned buffer) must
    die on the engine thread, where graphs are captured, never on the event loop's."""
    async def main():
        engine = KeepsNothingEngine()
        loop = make_loop(engine, tokens=4)
        rows = []
        for token in (5, 6, 7):
            rows.append((await loop.result(submit(loop, [seq(token, 1)], None))).tolist())
        await loop.drain(5)
        await loop.close()
        return engine.freed, rows

    freed, rows = run(main)
    assert rows == [[[5.0] * WIDTH], [[6.0] * WIDTH], [[7.0] * WIDTH]]
    assert len(freed) == 3
    assert all(name.startswith("hedgerow-engine") for name in freed), freed
