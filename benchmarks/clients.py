"""Closed-loop client threads for the benchmarks: each calls back to back until a deadline."""

import threading
import time
from typing import Callable


def threads_until(clients: int, seconds: float, worker: Callable[[int, float], int]
                  ) -> tuple[int, float]:
    """Run `worker(c, end)` for c in 0..clients-1 on as many threads at once; each calls until
    time.perf_counter() passes `end` and returns how many calls it made. Returns (the calls of
    all threads, the seconds from their start to the last one's end)."""
    end = time.perf_counter() + seconds
    counts = [0] * clients

    def run(c: int) -> None:
        counts[c] = worker(c, end)

    began = time.perf_counter()
    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts), time.perf_counter() - began
