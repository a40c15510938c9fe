"""The CPU host-path benchmarks, the rerank and the start benchmarks end to end, tiny (numbers
meaningless): the stand-in server goes through the real `serve` and its loader contract, which
once changed without the benchmark noticing, and the start benchmark reads the server's log
events by name; these keep them runnable."""

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
                          "echo-aio,echo-hop,echo-wait,instant,device", "--rounds", "1",
                          "--requests", "20", "--seconds", "0.2")
    for case in ("echo-aio", "echo-hop", "echo-wait", "instant", "device"):
        assert any(line.startswith(case) for line in table.splitlines()), table
    assert "16 clients req/s / echo-aio's" in table
    # the device case is held against the floor that waits as it does
    assert any(line.split()[:4] == ["device", "p50", "-", "echo-wait"]
               for line in table.splitlines()), table


def test_gateway_benchmark_runs_in_front_of_the_stand_in(subprocess_env):
    table = run_benchmark(subprocess_env, "gateway-cpu", "--stand-in-ms", "1",
                          "--requests", "10", "--rounds", "1", "--texts", "10")
    assert "a stand-in server answering after 1 ms" in table
    assert "| 9 tokens | added by the gateway (paired difference) |" in table


def test_start_benchmark_splits_a_start_and_compares_the_first_window(subprocess_env):
    table = run_benchmark(subprocess_env, "server-start", "--starts", "1",
                          "--first-seconds", "0.5", "--steady-seconds", "0.5")
    header = next(line for line in table.splitlines() if line.lstrip().startswith("start"))
    assert header.split() == ["start", "cache", "listen", "load", "space", "hot", "set",
                              "SERVING"], table
    row = next(line for line in table.splitlines() if line.split()[:2] == ["1", "-"])
    assert all(float(cell) >= 0 for cell in row.split()[2:]), table
    assert "first p99 / steady p99" in table


def test_rerank_benchmark_ranks_the_same_through_the_gateway_and_straight(subprocess_env):
    # The benchmark itself refuses to print when the two paths rank differently.
    table = run_benchmark(subprocess_env, "rerank-cpu", "--requests", "1", "--documents", "4",
                          "--tokens", "16", "--top-n", "2")
    assert "Rerank on cpu, all-MiniLM-L6-v2: 1 query x 4 documents of 16 tokens" in table
    assert "| one Score call straight to a server (token ids) |" in table


def test_rerank_benchmark_times_a_cross_encoders_rerank_calls(subprocess_env, tmp_path):
    from tests.conftest import write_cross_encoder

    model = write_cross_encoder(tmp_path / "ce")
    table = run_benchmark(subprocess_env, "rerank-cpu", "--model", str(model), "--requests",
                          "1", "--documents", "4", "--tokens", "16", "--top-n", "2")
    assert "a cross-encoder (task rerank)" in table
    assert "| one Rerank call straight to a server (pair token ids and types) |" in table
    assert "| path | p50 ms | p99 ms | pairs/s at p50 |" in table


def test_server_benchmark_refuses_a_cross_encoder_naming_the_one_that_times_it(subprocess_env,
                                                                              tmp_path):
    from hedgerow.bench.processes import free_port, grpc_serving, start, stop, wait
    from tests.conftest import write_cross_encoder

    model = write_cross_encoder(tmp_path / "ce")
    address = f"127.0.0.1:{free_port()}"
    server = start(["server", "--model", str(model), "--host", "127.0.0.1", "--port",
                    address.split(":")[1], "--http-port", str(free_port())])
    try:
        wait("server", server, lambda: grpc_serving(address))
        done = subprocess.run(hedgerow_command("bench", "server-cpu", "--address", address,
                                               "--requests", "1"),
                              env=subprocess_env, capture_output=True, text=True, timeout=300)
    finally:
        stop(server)
    assert done.returncode == 2, done.stderr
    assert "server-cpu times the calls of a model of task embed or sparse; this model is of " \
        "task rerank: time its Rerank calls with rerank-cpu" in done.stderr


def test_server_benchmark_times_a_sparse_models_embed_sparse_calls(subprocess_env, tmp_path):
    from hedgerow.bench.processes import free_port, grpc_serving, start, stop, wait
    from tests.conftest import write_lexical_model

    model = write_lexical_model(tmp_path / "lexical")
    address = f"127.0.0.1:{free_port()}"
    server = start(["server", "--model", str(model), "--task", "sparse", "--host", "127.0.0.1",
                    "--port", address.split(":")[1], "--http-port", str(free_port())])
    try:
        wait("server", server, lambda: grpc_serving(address))
        table = run_benchmark(subprocess_env, "server-cpu", "--address", address, "--requests",
                              "5", "--seconds", "0.2")
    finally:
        stop(server)
    assert f"server {address}, EmbedSparse calls, batch 1, 16 tokens per request" in table
    assert any(line.split()[:2] == ["concurrent", "16"] for line in table.splitlines()), table


def test_fp8_gate_benchmark_measures_float8_against_float32(subprocess_env):
    table = run_benchmark(subprocess_env, "fp8-gate")
    assert "all-MiniLM-L6-v2, 32 probe texts, cpu: cosine to float32" in table
    rows = {line.split()[0]: [float(cell) for cell in line.split()[1:]]
            for line in table.splitlines() if line.startswith(("bfloat16 ", "float8 "))}
    assert rows["bfloat16"][0] > 0.9999 > rows["float8"][0] > 0.99, table
