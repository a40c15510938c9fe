"""Admission: whether a request can be served in time, decided before any of it is sent.

Owns each replica's measured throughput (`Throughput`: tokens this gateway's calls turned over
per second of time the replica had work from it, recent work weighing most) and the rule
(`refusal`): a request whose tokens, queued behind everything this gateway has sent and is
holding back, would not be done before its deadline, or would wait longer than
--max-queue-seconds to start, is refused at once with how long to wait before retrying. Until a
replica has been measured, the rule falls back to tokens: a request is refused when this
gateway already holds more than twice what the servers admit at once (their admission bounds).
A request that is admitted is never refused later. Pure arithmetic, no I/O; the router calls it.
"""

import math

# A replica's estimate forgets old work: each completed call scales the past by this much.
DECAY = 0.95
# Below this much measured busy time the estimate is not trusted yet.
MIN_BUSY_S = 0.05
# Without an estimate: refuse past this many times the servers' summed admission bounds.
UNMEASURED_BOUNDS = 2


class Throughput:
    """Tokens per second one replica turns over while it has work from this gateway."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.seconds = 0.0
        self._unpaired = 0.0    # busy seconds since the last call that ended well
        self._last = 0.0        # time of the last change of in-flight work
        self._busy = False

    def change(self, now: float, busy_after: bool, done_tokens: int = 0) -> None:
        """Record a change of in-flight work at `now` (monotonic seconds): whether the
        replica still has work from this gateway after it, and the tokens a call that ended
        successfully carried."""
        if self._busy:
            self._unpaired += now - self._last
        if done_tokens:
            self.tokens = self.tokens * DECAY + done_tokens
            self.seconds = self.seconds * DECAY + self._unpaired
            self._unpaired = 0.0
        self._last, self._busy = now, busy_after

    @property
    def rate(self) -> float | None:
        """Tokens per second, or None before enough work was seen."""
        if self.seconds < MIN_BUSY_S or self.tokens <= 0:
            return None
        return self.tokens / self.seconds


def refusal(tokens: int, queued_tokens: int, rates: list[float | None], bounds: list[int],
            remaining_s: float, max_queue_s: float) -> float | None:
    """Seconds a client should wait before retrying, or None to admit.

    `tokens`: the request's; `queued_tokens`: this gateway's, sent and waiting; `rates`: each
    ready replica's measured throughput (None unmeasured); `bounds`: their admission bounds in
    tokens (0: none); `remaining_s`: until the request's deadline; `max_queue_s`: 0 admits all.
    """
    if max_queue_s <= 0:
        return None
    if rates and all(rate is not None for rate in rates):
        rate = sum(rates)
        start_s = queued_tokens / rate
        finish_s = start_s + tokens / rate
        if finish_s > remaining_s or start_s > max_queue_s:
            return max(1.0, math.ceil(start_s))
        return None
    limit = UNMEASURED_BOUNDS * sum(bounds)
    if all(bounds) and queued_tokens and queued_tokens + tokens > limit:
        return 1.0
    return None
