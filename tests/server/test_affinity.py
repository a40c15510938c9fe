"""Where the server's threads run (server/affinity.py): its I/O on one CPU, the engine on the
rest. The plan on CPU sets handed to it, then real server processes, whose placement is read
back from /proc."""

import logging
import os
from pathlib import Path

import pytest

from hedgerow.errors import ConfigError
from hedgerow.server import affinity

ALLOWED = os.sched_getaffinity(0)
several_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs or more")


def test_off_pins_nothing():
    assert affinity.plan("off") is None


def test_auto_gives_the_io_one_cpu_and_the_engine_the_others(monkeypatch):
    cpus = {0, 1, 2}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cpus)
    io, engine = affinity.plan("auto")
    assert len(io) == 1 and io <= cpus
    assert engine == cpus - io


@pytest.mark.parametrize("count", [1, affinity.AUTO_MAX_CPUS + 1, 64])
def test_auto_pins_nothing_on_one_cpu_or_on_a_large_set(monkeypatch, count):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(count)))
    assert affinity.plan("auto") is None


@several_cpus
def test_a_cpu_number_is_taken_as_given():
    cpu = max(ALLOWED)
    assert affinity.plan(str(cpu)) == ({cpu}, ALLOWED - {cpu})


def test_a_cpu_this_process_may_not_use_is_refused_by_name():
    outside = max(ALLOWED) + 1
    with pytest.raises(ConfigError, match=f"--host-cpu {outside} is not one of the CPUs"):
        affinity.plan(str(outside))


def cpus_and_limit(monkeypatch, tmp_path, count: int, cpu_max: str | None,
                   v1: tuple[str, str] | None = None) -> None:
    """This process may use `count` CPUs, under a cgroup v2 cpu.max of `cpu_max`, or else
    cgroup v1's (quota, period) files `v1` (None: no such file to read)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(count)))
    limit = tmp_path / "cpu.max"
    if cpu_max is not None:
        limit.write_text(cpu_max + "\n")
    monkeypatch.setattr(affinity, "CGROUP_CPU_MAX", str(limit))
    if v1 is not None:
        (tmp_path / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    monkeypatch.setattr(affinity, "CGROUP_V1_CPU", str(tmp_path))


@pytest.mark.parametrize("count, cpu_max, v1, usable", [
    (16, None, None, 16), (16, "max 100000", None, 16), (16, "250000 100000", None, 2.5),
    (2, "800000 100000", None, 2), (16, "garbled", None, 16),
    (16, None, ("300000", "100000"), 3), (16, None, ("-1", "100000"), 16),
])
def test_the_usable_cpus_are_the_affinity_bounded_by_the_cgroup_limit(
        monkeypatch, tmp_path, count, cpu_max, v1, usable):
    cpus_and_limit(monkeypatch, tmp_path, count, cpu_max, v1)
    assert affinity.usable_cpus() == usable


@pytest.mark.parametrize("count, cpu_max, device, expected", [
    (16, None, "cuda", True), (16, None, "cuda:1", True), (4, None, "cuda", True),
    (3, None, "cuda", False),                  # a CPU for the poll would leave two
    (16, "300000 100000", "cuda", False),      # a pod limited to 3 CPUs on a large node
    (16, None, "cpu", False),                  # a CPU model needs every core
])
def test_auto_busy_polls_for_a_gpu_with_cpus_to_spare(monkeypatch, tmp_path, count, cpu_max,
                                                      device, expected):
    cpus_and_limit(monkeypatch, tmp_path, count, cpu_max)
    assert affinity.busy_poll("auto", device) is expected


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_on_and_off_busy_poll_as_asked(monkeypatch, tmp_path, device):
    cpus_and_limit(monkeypatch, tmp_path, 1, None)
    assert affinity.busy_poll("on", device) is True
    assert affinity.busy_poll("off", device) is False


def test_a_refused_pin_leaves_the_thread_where_it_was_and_says_so(monkeypatch, caplog):
    def refuse(pid, cpus):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    with caplog.at_level(logging.WARNING):  # whatever level an earlier test configured
        assert affinity.pin({0}) is False
    assert "server.cpus_not_pinned" in caplog.text and "not permitted" in caplog.text


def cpus_of_threads(pid: int) -> dict[int, frozenset[int]]:
    """Each thread of `pid`: the CPUs it may run on (/proc lists them as "0-3,6")."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                cpus = set()
                for part in line.split(":", 1)[1].strip().split(","):
                    first, _, last = part.partition("-")
                    cpus.update(range(int(first), int(last or first) + 1))
                out[int(task.name)] = frozenset(cpus)
    return out


@several_cpus
def test_a_serving_server_keeps_its_event_loop_on_one_cpu_and_the_engine_off_it(start_server):
    server = start_server("--host-cpu", str(max(ALLOWED)))
    threads = cpus_of_threads(server.proc.pid)
    io = max(ALLOWED)
    assert threads.pop(server.proc.pid) == {io}  # the main thread runs the event loop
    assert ALLOWED - {io} in threads.values(), f"no engine thread off CPU {io}: {threads}"
    assert "server.cpus" in server.log_text()


@several_cpus
def test_off_leaves_every_thread_where_the_os_puts_it(start_server):
    server = start_server("--host-cpu", "off")
    assert len(set(cpus_of_threads(server.proc.pid).values())) == 1
    assert "server.cpus" not in server.log_text()
