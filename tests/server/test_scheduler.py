"""The FCFS token-budget scheduler, driven with factories: no model, no engine, no asyncio."""

import itertools
import random

import pytest

from hedgerow.errors import OverloadedError
from hedgerow.server.scheduler import (
    CANCELLED, DONE, EXPIRED, FAILED, PENDING, Request, Scheduler,
)

_ids = itertools.count()


def make_request(*lengths: int, deadline: float | None = None, name: str | None = None) -> Request:
    """A request whose sequence payloads name themselves: (request name, sequence index)."""
    name = name or f"r{next(_ids)}"
    return Request(
        payloads=[(name, i) for i in range(len(lengths))],
        lengths=list(lengths),
        deadline=deadline,
        handle=name,
    )


def make_scheduler(tokens=512, seqs=64, inflight=1_000_000) -> Scheduler:
    return Scheduler(max_batch_tokens=tokens, max_batch_seqs=seqs, max_inflight_tokens=inflight)


def drain(scheduler: Scheduler, now: float = 0.0):
    """Run the pool dry, answering each sequence with its own payload; return the batches."""
    batches = []
    while (batch := scheduler.next_batch(now)) is not None:
        batches.append(batch)
        scheduler.complete(batch, [entry.payload for entry in batch.entries])
    return batches


def test_a_short_query_that_arrives_first_rides_in_the_first_batch():
    scheduler = make_scheduler(tokens=512)
    query = make_request(9, name="query")
    reindex = make_request(512, 512, 512, name="reindex")
    rerank = make_request(180, 180, 180, 180, name="rerank")
    for request in (query, reindex, rerank):
        scheduler.submit(request)
    batches = drain(scheduler)
    shapes = [[(e.request.handle, e.length) for e in b.entries] for b in batches]
    assert shapes == [
        [("query", 9)],
        [("reindex", 512)],
        [("reindex", 512)],
        [("reindex", 512)],
        [("rerank", 180), ("rerank", 180)],
        [("rerank", 180), ("rerank", 180)],
    ]


def test_sequences_leave_in_arrival_order_across_requests():
    scheduler = make_scheduler(tokens=10_000)
    requests = [make_request(3, 1, 2) for _ in range(5)]
    for request in requests:
        scheduler.submit(request)
    (batch,) = drain(scheduler)
    expected = [(r.handle, i) for r in requests for i in range(3)]
    assert [entry.payload for entry in batch.entries] == expected


@pytest.mark.parametrize("seed", range(20))
def test_budget_and_cap_are_never_exceeded_and_nothing_is_lost(seed):
    rng = random.Random(seed)
    budget, cap = rng.choice([16, 64, 100, 512]), rng.choice([1, 3, 8, 64])
    scheduler = make_scheduler(tokens=budget, seqs=cap)
    requests = [make_request(*[rng.randint(1, budget - 1) for _ in range(rng.randint(1, 7))])
                for _ in range(30)]
    for request in requests:
        scheduler.submit(request)
    batches = drain(scheduler)
    for batch in batches:
        assert 1 <= batch.num_seqs <= cap
        assert batch.num_tokens <= budget
        assert batch.num_tokens == sum(entry.length for entry in batch.entries)
    handed_out = [entry.payload for batch in batches for entry in batch.entries]
    assert handed_out == [p for r in requests for p in r.payloads]
    assert all(r.state == DONE for r in requests)
    assert scheduler.idle


def test_a_sequence_longer_than_the_budget_runs_alone():
    scheduler = make_scheduler(tokens=100)
    scheduler.submit(make_request(5, name="before"))
    scheduler.submit(make_request(300, name="huge"))
    scheduler.submit(make_request(7, name="after"))
    batches = drain(scheduler)
    assert [[e.request.handle for e in b.entries] for b in batches] == [
        ["before"], ["huge"], ["after"],
    ]
    assert batches[1].num_tokens == 300


def test_a_request_spanning_several_batches_completes_with_its_last_sequence():
    scheduler = make_scheduler(tokens=10)
    big = make_request(6, 6, 6, name="big")
    scheduler.submit(big)
    finished_per_batch = []
    while (batch := scheduler.next_batch(0.0)) is not None:
        rows = [f"row{entry.index}" for entry in batch.entries]
        finished_per_batch.append([r.handle for r in scheduler.complete(batch, rows)])
    assert finished_per_batch == [[], [], ["big"]]
    assert big.rows == ["row0", "row1", "row2"]


def test_rows_are_assembled_in_the_requests_own_order():
    # Two requests interleave in batches of two; each gets its rows back in its own order.
    scheduler = make_scheduler(tokens=4, seqs=2)
    a = make_request(2, 2, 2, name="a")
    b = make_request(1, 1, name="b")
    scheduler.submit(a)
    scheduler.submit(b)
    batches = drain(scheduler)
    assert len(batches) == 3
    assert a.rows == [("a", 0), ("a", 1), ("a", 2)]
    assert b.rows == [("b", 0), ("b", 1)]


def test_cancelled_requests_are_never_batched():
    scheduler = make_scheduler(tokens=1000)
    keep1, gone, keep2 = make_request(4, 4), make_request(5, 5, 5), make_request(6)
    for request in (keep1, gone, keep2):
        scheduler.submit(request)
    scheduler.cancel(gone)
    assert scheduler.pool_tokens == 14
    batches = drain(scheduler)
    batched = {entry.request.handle for batch in batches for entry in batch.entries}
    assert gone.handle not in batched
    assert gone.state == CANCELLED and gone.rows == [None, None, None]
    assert keep1.state == keep2.state == DONE
    assert scheduler.idle


def test_a_request_cancelled_while_partly_on_the_engine_drops_the_rest():
    scheduler = make_scheduler(tokens=4)
    request = make_request(4, 4, 4)
    scheduler.submit(request)
    first = scheduler.next_batch(0.0)
    scheduler.cancel(request)
    assert scheduler.pool_tokens == 0 and scheduler.engine_tokens == 4
    assert scheduler.complete(first, ["late row"]) == []
    assert scheduler.next_batch(0.0) is None
    assert scheduler.idle


def test_expired_requests_are_dropped_before_the_engine_and_reported():
    scheduler = make_scheduler(tokens=1000)
    late = make_request(3, 3, deadline=5.0)
    fresh = make_request(2, deadline=50.0)
    forever = make_request(1)
    for request in (late, fresh, forever):
        scheduler.submit(request)
    batch = scheduler.next_batch(now=10.0)
    assert [entry.request for entry in batch.entries] == [fresh, forever]
    assert batch.dropped == [late]
    assert late.state == EXPIRED
    assert scheduler.pool_tokens == 0


def test_a_pool_of_only_expired_requests_yields_an_empty_batch_with_the_drops():
    scheduler = make_scheduler()
    late = make_request(3, deadline=1.0)
    scheduler.submit(late)
    batch = scheduler.next_batch(now=2.0)
    assert batch.entries == [] and batch.num_tokens == 0 and batch.dropped == [late]
    assert scheduler.next_batch(now=2.0) is None
    assert scheduler.idle


def test_admission_is_bounded_by_tokens_in_flight():
    scheduler = make_scheduler(tokens=8, inflight=20)
    first = make_request(8, 8)
    scheduler.submit(first)
    with pytest.raises(OverloadedError, match="admission bound"):
        scheduler.submit(make_request(5))
    scheduler.submit(make_request(4))           # exactly at the bound is fine
    batch = scheduler.next_batch(0.0)           # moving to the engine frees nothing yet
    with pytest.raises(OverloadedError):
        scheduler.submit(make_request(1))
    scheduler.complete(batch, ["row"])          # an answer frees its tokens
    scheduler.submit(make_request(8))
    assert scheduler.inflight_tokens == 20


def test_a_failed_batch_fails_each_live_request_once_and_frees_everything():
    scheduler = make_scheduler(tokens=100)
    a, b = make_request(3, 3), make_request(2)
    scheduler.submit(a)
    scheduler.submit(b)
    batch = scheduler.next_batch(0.0)
    assert scheduler.fail(batch) == [a, b]
    assert a.state == b.state == FAILED
    assert scheduler.idle


def test_completing_with_the_wrong_number_of_rows_is_an_error():
    scheduler = make_scheduler()
    scheduler.submit(make_request(2, 2))
    batch = scheduler.next_batch(0.0)
    with pytest.raises(ValueError, match="2 sequences got 1"):
        scheduler.complete(batch, ["only one"])


def test_requests_start_pending_with_no_rows():
    request = make_request(1, 2)
    assert request.state == PENDING and request.remaining == 2 and request.num_tokens == 3
    with pytest.raises(ValueError):
        Request(payloads=[], lengths=[])
