"""The server-overhead benchmark end to end, tiny (numbers meaningless): its stand-in engine
goes through the real `serve` and its loader contract, which changed once without the
benchmark noticing; this keeps it runnable."""

import subprocess

import pytest

from tests.conftest import hedgerow_command

pytestmark = pytest.mark.slow


def test_server_overhead_benchmark_runs_every_server_case(subprocess_env):
    done = subprocess.run(
        hedgerow_command("bench", "server-overhead", "--only", "echo-aio,echo-hop,instant,device",
                         "--rounds", "1", "--requests", "20", "--seconds", "0.2"),
        env=subprocess_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout
    for case in ("echo-aio", "echo-hop", "instant", "device"):
        assert any(line.startswith(case) for line in table.splitlines()), table
    assert "16 clients req/s / echo's" in table
