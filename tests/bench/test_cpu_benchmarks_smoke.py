"""The CPU host-path benchmarks end to end, tiny (numbers meaningless): their stand-in server
goes through the real `serve` and its loader contract, which once changed without the
benchmark noticing; these keep them runnable."""

import subprocess

import pytest

from tests.conftest import hedgerow_command

pytestmark = pytest.mark.slow


def run_benchmark(subprocess_env, *args: str) -> str:
    done = subprocess.run(hedgerow_command("bench", *args), env=subprocess_env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_server_overhead_benchmark_runs_every_server_case(subprocess_env):
    table = run_benchmark(subprocess_env, "server-overhead", "--only",
                          "echo-aio,echo-hop,instant,device", "--rounds", "1",
                          "--requests", "20", "--seconds", "0.2")
    for case in ("echo-aio", "echo-hop", "instant", "device"):
        assert any(line.startswith(case) for line in table.splitlines()), table
    assert "16 clients req/s / echo's" in table


def test_gateway_benchmark_runs_in_front_of_the_stand_in(subprocess_env):
    table = run_benchmark(subprocess_env, "gateway-cpu", "--stand-in-ms", "1",
                          "--requests", "10", "--rounds", "1", "--texts", "10")
    assert "a stand-in server answering after 1 ms" in table
    assert "| 9 tokens | added by the gateway (paired difference) |" in table
