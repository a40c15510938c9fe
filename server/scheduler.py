"""The request pool and the first-come-first-served, token-budget batch former.

Plain CPU code, data in and data out: requests go in with their sequences, `next_batch()`
hands out the next batch, `complete()` takes the batch's result rows back and reports which
requests are now whole. Sequences leave the pool in arrival order up to a token budget and a
sequence cap; no sorting, no priorities (latency tracks tokens, not sequences). A sequence
longer than the budget runs alone. Sequences of cancelled or expired requests are dropped
before they can reach the engine. Admission is bounded here too: the pool refuses a request
that would push the tokens it holds (waiting or on the engine) past `max_inflight_tokens`.

It knows nothing about asyncio, gRPC, torch or the engine: sequence payloads and result rows
are opaque objects, time is a number the caller passes in.
"""

from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

from hedgerow.errors import OverloadedError

# Request states. Only PENDING requests have sequences that may still be batched.
PENDING, DONE, CANCELLED, EXPIRED, FAILED = "pending", "done", "cancelled", "expired", "failed"


@dataclass(eq=False)
class Request:
    """One caller's request: its sequences in order and, once done, their rows in order.

    `payloads[i]` is what the engine needs for sequence i (e.g. an int32 token slice) and
    `lengths[i]` its token count. `deadline` is on the caller's clock; None means none.
    `handle` is the caller's (a future, say) and `ragged` what the engine needs for the whole
    request at once, when it rides in one batch; the scheduler never looks inside either.
    `batched` is when (on the caller's clock) its first sequence was put in a batch, set by
    the caller.
    """

    payloads: list[Any]
    lengths: list[int]
    deadline: float | None = None
    arrival: float = 0.0
    handle: Any = None
    ragged: Any = None
    batched: float | None = None
    state: str = PENDING
    rows: list[Any] = field(default_factory=list)
    remaining: int = 0          # sequences without a row yet
    queued_tokens: int = 0      # tokens of this request still waiting in the pool

    def __post_init__(self) -> None:
        if len(self.payloads) != len(self.lengths):
            raise ValueError("payloads and lengths must have the same length")
        if not self.lengths:
            raise ValueError("a request needs at least one sequence")
        self.rows = [None] * len(self.lengths)
        self.remaining = len(self.lengths)

    @property
    def num_tokens(self) -> int:
        return sum(self.lengths)

    @property
    def active(self) -> bool:
        return self.state == PENDING


class Entry(NamedTuple):
    """One sequence in a batch: which request, which of its sequences, its payload (a tuple:
    made per sequence, and a frozen dataclass's constructor costs several times more)."""

    request: Request
    index: int
    payload: Any
    length: int


@dataclass(eq=False)
class Batch:
    """What `next_batch` hands out: entries in pool order, and the requests it dropped."""

    entries: list[Entry]
    num_tokens: int
    dropped: list[Request] = field(default_factory=list)

    @property
    def num_seqs(self) -> int:
        return len(self.entries)

    @property
    def whole(self) -> Request | None:
        """The request this batch is, all of it and nothing else; None otherwise (sequences of
        one request stay together and in order in the pool)."""
        first = self.entries[0].request if self.entries else None
        if first is not None and len(self.entries) == len(first.lengths) \
                and self.entries[-1].request is first:
            return first
        return None


class Scheduler:
    """FCFS pool with a token budget, a sequence cap and a bound on tokens held."""

    def __init__(self, max_batch_tokens: int, max_batch_seqs: int, max_inflight_tokens: int):
        if min(max_batch_tokens, max_batch_seqs, max_inflight_tokens) < 1:
            raise ValueError("budgets must be positive")
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_seqs = max_batch_seqs
        self.max_inflight_tokens = max_inflight_tokens
        self._pool: deque[Entry] = deque()
        self.pool_tokens = 0      # tokens waiting in the pool (live requests only)
        self.engine_tokens = 0    # tokens handed out in batches not yet completed

    @property
    def inflight_tokens(self) -> int:
        """Tokens admitted and not yet answered: waiting plus on the engine."""
        return self.pool_tokens + self.engine_tokens

    @property
    def idle(self) -> bool:
        return self.inflight_tokens == 0

    def submit(self, request: Request) -> None:
        """Admit `request` and queue its sequences; raises OverloadedError past the bound."""
        tokens = request.num_tokens
        if self.inflight_tokens + tokens > self.max_inflight_tokens:
            raise OverloadedError(
                f"server is at its admission bound: {self.inflight_tokens} tokens in flight, "
                f"this request adds {tokens}, the bound is {self.max_inflight_tokens}; retry "
                "later or on another replica"
            )
        for index, (payload, length) in enumerate(zip(request.payloads, request.lengths)):
            self._pool.append(Entry(request, index, payload, length))
        request.queued_tokens = tokens
        self.pool_tokens += tokens

    def cancel(self, request: Request, state: str = CANCELLED) -> None:
        """Withdraw `request`: its waiting sequences will never be batched."""
        if not request.active:
            return
        request.state = state
        self.pool_tokens -= request.queued_tokens
        request.queued_tokens = 0

    def next_batch(self, now: float) -> Batch | None:
        """Take sequences first come, first served up to the budget and the cap.

        Sequences of cancelled requests, and of requests whose deadline is at or before
        `now`, are dropped on the way (expired requests are returned in `Batch.dropped`).
        Returns None when nothing live is waiting (and nothing was dropped).
        """
        entries: list[Entry] = []
        dropped: list[Request] = []
        tokens = 0
        pool = self._pool
        while pool and len(entries) < self.max_batch_seqs:
            entry = pool[0]
            request = entry.request
            if request.active and request.deadline is not None and request.deadline <= now:
                self.cancel(request, EXPIRED)
                dropped.append(request)
            if not request.active:
                pool.popleft()
                continue
            if entries and tokens + entry.length > self.max_batch_tokens:
                break
            pool.popleft()
            entries.append(entry)
            tokens += entry.length
            request.queued_tokens -= entry.length
        self.pool_tokens -= tokens
        self.engine_tokens += tokens
        if not entries and not dropped:
            return None
        return Batch(entries, tokens, dropped)

    def complete(self, batch: Batch, rows: Sequence[Any]) -> list[Request]:
        """Store each entry's result row; return the requests whose last row just arrived.

        `rows` is indexable in the batch's entry order (a [B, D] tensor, a list). Rows for
        requests that were cancelled or expired meanwhile are discarded. A request's `rows`
        end up in its own sequence order, whichever batches its sequences rode in.
        """
        if len(rows) != batch.num_seqs:
            raise ValueError(f"batch of {batch.num_seqs} sequences got {len(rows)} result rows")
        self.engine_tokens -= batch.num_tokens
        finished = []
        for position, entry in enumerate(batch.entries):
            request = entry.request
            if not request.active:
                continue
            request.rows[entry.index] = rows[position]
            request.remaining -= 1
            if request.remaining == 0:
                request.state = DONE
                finished.append(request)
        return finished

    def fail(self, batch: Batch) -> list[Request]:
        """The engine could not run `batch`: release its tokens, fail its live requests.

        Returns each failed request once; their other waiting sequences are dropped too.
        """
        self.engine_tokens -= batch.num_tokens
        failed = []
        for entry in batch.entries:
            request = entry.request
            if request.active:
                self.cancel(request, FAILED)
                failed.append(request)
        return failed
