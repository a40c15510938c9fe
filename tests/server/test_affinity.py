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
