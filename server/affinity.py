"""Where the server's threads run: its I/O on one CPU, the engine on the others.

The event loop and gRPC's own threads hand every request to one another several times. Kept on
one CPU, each hand-off is a switch on a warm core; spread by the OS, it is often a wake-up of
another core, and on a virtual machine that costs tens of microseconds (docs/server.md has the
measure). The engine thread, and the torch threads it starts, get the other CPUs: a CPU model
computes beside the I/O rather than under it, and a GPU's waits never take the I/O's core.
`auto` does this only for a process that may use 2 to AUTO_MAX_CPUS CPUs: where it was measured
to pay (2 CPUs), and where a pod's CPUs are usually its own; on a 16-CPU GPU host, pinning
doubled the context switches and cost a fifth of the 16-client throughput (docs/benchmarks.md).
`off` leaves all placement to the OS. Linux only; elsewhere nothing is pinned.
"""

import logging
import os
from typing import NamedTuple

from hedgerow.errors import ConfigError
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.server.affinity")

AUTO_MAX_CPUS = 4


class CpuPlan(NamedTuple):
    io: set[int]       # the event loop, gRPC's threads, the HTTP side
    engine: set[int]   # the engine thread and what it starts


def plan(host_cpu: str) -> CpuPlan | None:
    """The plan for `--host-cpu` (auto, off or a CPU number) on this process's CPUs; None when
    nothing is pinned (off; auto outside 2 to AUTO_MAX_CPUS CPUs; no affinity calls here)."""
    if host_cpu == "off" or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    if host_cpu == "auto":
        if not 2 <= len(allowed) <= AUTO_MAX_CPUS:
            return None
        cpu = _current_cpu(allowed)
    else:
        cpu = int(host_cpu)
        if cpu not in allowed:
            raise ConfigError(f"--host-cpu {cpu} is not one of the CPUs this process may use "
                              f"({', '.join(map(str, sorted(allowed)))})")
    return CpuPlan(io={cpu}, engine=(allowed - {cpu}) or {cpu})


def pin(cpus: set[int]) -> bool:
    """Keep the calling thread, and the threads it starts from now on, on `cpus`. A system
    that refuses (a sandbox's syscall filter, say) leaves it where it was, with a warning."""
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as error:
        log.warning("%s", fields(event="server.cpus_not_pinned", cpus=sorted(cpus),
                                 error=str(error)))
        return False
    return True


def _current_cpu(allowed: set[int]) -> int:
    """The CPU this thread runs on now, where the OS placed the process: servers started on a
    shared node spread over its CPUs instead of all taking the same one."""
    try:
        with open("/proc/thread-self/stat") as stat:
            cpu = int(stat.read().rsplit(")", 1)[1].split()[36])  # field 39, `processor`
    except (OSError, IndexError, ValueError):
        return max(allowed)
    return cpu if cpu in allowed else max(allowed)
