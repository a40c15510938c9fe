"""Admission's arithmetic: the throughput estimate and the refusal rule, on made-up numbers."""

import pytest

from hedgerow.gateway.admission import MIN_BUSY_S, Throughput, refusal


def test_throughput_counts_busy_time_only_and_favours_recent_work():
    measured = Throughput()
    assert measured.rate is None
    measured.change(0.0, busy_after=True)
    measured.change(0.5, busy_after=False, done_tokens=500)       # 1000 tokens/s
    measured.change(10.0, busy_after=True)                        # idle time is not counted
    measured.change(10.5, busy_after=False, done_tokens=500)
    assert measured.rate == pytest.approx(1000, rel=1e-6)
    for start in range(20, 40):                                   # now 100 tokens/s
        measured.change(float(start), busy_after=True)
        measured.change(start + 1.0, busy_after=False, done_tokens=100)
    assert 100 < measured.rate < 300


def test_a_replica_seen_too_briefly_has_no_estimate():
    measured = Throughput()
    measured.change(0.0, busy_after=True)
    measured.change(MIN_BUSY_S / 2, busy_after=False, done_tokens=10)
    assert measured.rate is None


def test_a_request_that_cannot_finish_in_time_is_refused_with_the_wait():
    # 1000 tokens/s over two replicas; 9000 queued: a 1000-token request finishes in 10 s.
    assert refusal(1000, 9000, [600.0, 400.0], [0, 0], remaining_s=11, max_queue_s=30) is None
    assert refusal(1000, 9000, [600.0, 400.0], [0, 0], remaining_s=9, max_queue_s=30) == 9
    assert refusal(1000, 9000, [600.0, 400.0], [0, 0], remaining_s=60, max_queue_s=5) == 9
    assert refusal(100, 0, [1.0], [0], remaining_s=0.5, max_queue_s=5) == 1  # never below 1 s


def test_before_any_measure_only_holding_past_twice_the_bounds_is_refused():
    assert refusal(5000, 0, [None], [4096], remaining_s=1, max_queue_s=10) is None  # idle
    assert refusal(4000, 4000, [None, 100.0], [4096, 4096], 60, 10) is None
    assert refusal(4000, 16000, [None, 100.0], [4096, 4096], 60, 10) == 1
    assert refusal(4000, 10**9, [None], [0], 60, 10) is None  # no bound: no basis to refuse


def test_a_zero_queue_bound_admits_everything():
    assert refusal(10**6, 10**9, [1.0], [1], remaining_s=0.001, max_queue_s=0) is None
