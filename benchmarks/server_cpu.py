"""Benchmark the gRPC server on CPU with the default model; prints a table.

    .venv/bin/python -P benchmarks/server_cpu.py [--tokens 16] [--seconds 5] [--requests 200]
    .venv/bin/python -P benchmarks/server_cpu.py --address 127.0.0.1:50051   # a running server

Starts two `hedgerow server`s (packaged all-MiniLM-L6-v2, CPU) on free loopback ports, one with
the default `--dtype auto` and one with `--dtype float32`, and measures each over real gRPC in
`--rounds` interleaved rounds (or measures the one server at `--address`):
  1. sequential batch-1 latency: one client, one sequence of `--tokens` tokens per request,
     `--requests` requests after a warm-up; p50 and p99;
  2. throughput with 1, 4 and 16 concurrent clients, each sending batch-1 requests back to
     back for `--seconds`; requests/s, tokens/s, p50 and p99.
Each server's task comes from its Info (benchmarks/tasks.py): an embedding model is timed on
Embed calls, a sparse one (`-- --model DIR --task sparse`) on EmbedSparse calls of the same
sequences; a cross-encoder is refused (rerank-cpu times its Rerank calls).
The client runs on the same machine as the server and takes CPU from it: on a small machine
the numbers are a floor, and noisy when other work shares the cores. The last line compares
auto's choice against float32 from the same run.
"""

import argparse
import asyncio
import signal
import subprocess
import sys
import time

import grpc
import numpy as np

from hedgerow.bench import tasks
from hedgerow.bench.processes import at_least, free_port, grpc_serving, positive, start, wait
from hedgerow.bench.wire_requests import embed_request
from hedgerow.wire import embed_pb2_grpc

DTYPES = ["auto", "float32"]  # the server's default, and the exact one


def start_server(extra: list[str]) -> tuple[subprocess.Popen, str]:
    port, http_port = free_port(), free_port()
    proc = start(["server", "--host", "127.0.0.1", "--port", str(port), "--http-port",
                  str(http_port), *extra])
    address = f"127.0.0.1:{port}"
    wait("server", proc, lambda: grpc_serving(address))
    return proc, address


def percentiles(latencies: list[float]) -> tuple[float, float]:
    ms = np.asarray(latencies) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def timed_call(address: str) -> str:
    """The call to time on the server at `address`: its task's (Embed or EmbedSparse)."""
    _, task = tasks.server_task(address)
    tasks.refuse("server-cpu", task, ("embed", "sparse"),
                 "time its Rerank calls with rerank-cpu")
    return "EmbedSparse" if task == "sparse" else "Embed"


async def sequential(call, tokens: int, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        request = embed_request([tokens], i)
        start = time.perf_counter()
        await call(request)
        latencies.append(time.perf_counter() - start)
    return latencies


async def concurrent(call, tokens: int, clients: int, seconds: float
                     ) -> tuple[list[float], float]:
    end = time.perf_counter() + seconds
    latencies: list[float] = []

    async def client(c: int) -> None:
        i = 0
        while time.perf_counter() < end:
            request = embed_request([tokens], c * 7919 + i)
            start = time.perf_counter()
            await call(request)
            latencies.append(time.perf_counter() - start)
            i += 1

    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return latencies, time.perf_counter() - start


async def run(address: str, tokens: int, count: int, seconds: float) -> list[tuple]:
    rows = []
    method = timed_call(address)
    async with grpc.aio.insecure_channel(address) as channel:
        call = getattr(embed_pb2_grpc.EmbedderStub(channel), method)
        await sequential(call, tokens, 20)  # warm-up
        latencies = await sequential(call, tokens, count)
        p50, p99 = percentiles(latencies)
        total = sum(latencies)
        rows.append(("sequential", 1, len(latencies), len(latencies) / total,
                     len(latencies) * tokens / total, p50, p99))
        for clients in (1, 4, 16):
            latencies, elapsed = await concurrent(call, tokens, clients, seconds)
            p50, p99 = percentiles(latencies)
            rows.append(("concurrent", clients, len(latencies), len(latencies) / elapsed,
                         len(latencies) * tokens / elapsed, p50, p99))
    return rows


def table(rows: list[tuple]) -> None:
    print(f"{'mode':<11} {'clients':>7} {'requests':>9} {'req/s':>8} {'tokens/s':>9} "
          f"{'p50 ms':>8} {'p99 ms':>8}")
    for mode, clients, n, rps, tps, p50, p99 in rows:
        print(f"{mode:<11} {clients:>7} {n:>9} {rps:>8.1f} {tps:>9.0f} {p50:>8.2f} {p99:>8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", help="benchmark a running server instead of starting one")
    parser.add_argument("--tokens", type=at_least(2), default=16, help="tokens per request (>= 2)")
    parser.add_argument("--requests", type=at_least(1), default=200, help="sequential requests")
    parser.add_argument("--seconds", type=positive, default=5.0, help="seconds per concurrency")
    parser.add_argument("--rounds", type=at_least(1), default=3,
                        help="interleaved rounds over the two servers")
    parser.add_argument("server_flags", nargs="*", help="extra `hedgerow server` flags after --")
    args = parser.parse_args()
    if args.address:
        rows = asyncio.run(run(args.address, args.tokens, args.requests, args.seconds))
        print(f"server {args.address}, {timed_call(args.address)} calls, batch 1, "
              f"{args.tokens} tokens per request")
        table(rows)
        return 0
    servers: dict[str, tuple] = {}
    results: dict[str, list[list[tuple]]] = {}
    try:
        for dtype in DTYPES:
            servers[dtype] = start_server(["--dtype", dtype, *args.server_flags])
            results[dtype] = []
        for number in range(args.rounds):
            for dtype in DTYPES[number % 2:] + DTYPES[:number % 2]:
                results[dtype].append(asyncio.run(
                    run(servers[dtype][1], args.tokens, args.requests, args.seconds)))
    finally:
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    print(f"default model on CPU, batch 1, {args.tokens} tokens per request; medians of "
          f"{args.rounds} interleaved rounds")
    medians = {}
    for dtype, rounds in results.items():
        medians[dtype] = [(*row[:3], *np.median([r[i][3:] for r in rounds], axis=0))
                          for i, row in enumerate(rounds[0])]
        print(f"\n--dtype {dtype}")
        table(medians[dtype])
    auto, full = medians["auto"], medians["float32"]
    print(f"\nauto against float32: sequential p50 {auto[0][5] / full[0][5]:.2f}x, "
          f"16 clients {auto[-1][3] / full[-1][3]:.2f}x the req/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
