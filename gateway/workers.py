"""Several gateway worker processes on one listening socket, started and stopped together.

The parent binds the socket, then forks `count` workers, each of which builds its own app and
serves the shared socket (the kernel hands each new connection to one of them). SIGTERM and
SIGINT are passed on to every worker, which drains as a single gateway does; the parent exits
when all have. A worker that dies while the others serve is replaced, unless it died within
STARTUP_S of starting, which means its set-up fails (all workers stop then, and the parent
exits with the dead worker's status). `on_reaped(pid)` is called for every worker that ended
(multiprocess metrics drop its live gauges). Knows nothing about HTTP.
"""

import logging
import os
import signal
import time
from typing import Callable

from hedgerow.logs import fields

log = logging.getLogger("hedgerow.gateway.workers")

STARTUP_S = 5.0
# prometheus-client's multiprocess mode: workers write their samples under this directory.
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _fork(serve_one: Callable[[], int]) -> int:
    pid = os.fork()
    if pid == 0:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        code = 1
        try:
            code = serve_one()
        except BaseException:  # its last word: a worker's failure must not pass silently
            log.exception("%s", fields(event="gateway.worker_failed", pid=os.getpid()))
        finally:
            os._exit(code)  # never return into the parent's code
    return pid


def run_workers(count: int, serve_one: Callable[[], int],
                on_reaped: Callable[[int], None]) -> int:
    """Run `serve_one` in `count` forked processes; returns the exit status."""
    started: dict[int, float] = {}
    stopping = False
    status = 0

    def stop(signum: int, frame) -> None:
        nonlocal stopping
        stopping = True
        for pid in started:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        for _ in range(count):
            started[_fork(serve_one)] = time.monotonic()
        log.info("%s", fields(event="gateway.workers", workers=count, pids=",".join(
            str(pid) for pid in started)))
        while started:
            pid, wait_status = os.wait()
            born = started.pop(pid, None)
            if born is None:
                continue
            on_reaped(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            if stopping:
                status = max(status, code if code > 0 else 0)
                continue
            log.error("%s", fields(event="gateway.worker_died", pid=pid, status=code))
            if time.monotonic() - born < STARTUP_S:
                status = code if code > 0 else 1
                stop(signal.SIGTERM, None)
                continue
            started[_fork(serve_one)] = time.monotonic()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return status
