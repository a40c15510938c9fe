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

It also decides `--busy-poll auto`: whether this process has a CPU to spare for an event loop
that polls while the device computes (server/loop.py).
"""

import logging
import os
from typing import NamedTuple

from hedgerow.errors import ConfigError
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.server.affinity")

AUTO_MAX_CPUS = 4
# `--busy-poll auto` polls only where one CPU busy for it leaves at least three others.
BUSY_POLL_MIN_CPUS = 4
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "QUOTA PERIOD", or "max PERIOD"
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"  # cgroup v1: cpu.cfs_quota_us (-1: none), cpu.cfs_period_us


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


def busy_poll(setting: str, device: str) -> bool:
    """What `--busy-poll` (auto, on or off) resolves to for an engine on `device`: auto polls
    for a GPU, whose batches leave the event loop with nothing to do until they are back, on
    a process that may use at least BUSY_POLL_MIN_CPUS CPUs; never for a CPU model, whose
    threads need every core the loop would take."""
    if setting != "auto":
        return setting == "on"
    return str(device).startswith("cuda") and usable_cpus() >= BUSY_POLL_MIN_CPUS


def usable_cpus() -> float:
    """The CPUs this process may run on, bounded by its cgroup's CPU limit where it has one
    (a pod's `limits.cpu`, which the affinity mask does not show)."""
    cpus = float(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else 1.0
    limit = _cgroup_cpu_limit()
    return cpus if limit is None else min(cpus, limit)


def _cgroup_cpu_limit() -> float | None:
    """The cgroup's CPU quota over its period (v2, else v1); None where none is set or can be
    read."""
    def read(path: str) -> list[str]:
        with open(path) as file:
            return file.read().split()

    try:
        quota, period = read(CGROUP_CPU_MAX)[:2]
    except (OSError, ValueError):
        try:
            quota = read(f"{CGROUP_V1_CPU}/cpu.cfs_quota_us")[0]
            period = read(f"{CGROUP_V1_CPU}/cpu.cfs_period_us")[0]
        except (OSError, IndexError):
            return None
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None  # "max": no limit
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None
