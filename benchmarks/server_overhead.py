"""Measure the server's own host overhead per request on CPU, with an engine that costs nothing.

    .venv/bin/python -P benchmarks/server_overhead.py [--requests 2000] [--seconds 3]
        [--device-ms 1.0] [--only echo-aio,instant,device] [--profile instant]

What runs: each case starts a server in a child process on loopback and a sync gRPC client
(int32 bytes, one sequence of `--tokens` tokens, 1024-wide float32 answer) in this process:
  echo-aio   a bare grpc.aio servicer on uvloop answering Embed with a fixed 4 KiB response:
             the floor (what gRPC itself costs, no server code at all);
  echo-sync  the same with a sync grpc.server and a thread pool, to compare the two models;
  instant    the REAL server stack (`hedgerow.server.app.serve`: servicer, decoding and
             validation, admission, the scheduling loop, the engine thread, postprocessing,
             encoding, metrics) with a STAND-IN ENGINE, FOR TIMING ONLY: its `step` returns a
             completed LazyTensor of zeros float32 [B, 1024] at once (no model runs), and
             `validate` is the real Engine.validate. The difference to echo-aio is the
             server's host overhead;
  device     the same stand-in, but its result becomes ready `--device-ms` after `step`
             returns (like a GPU's LazyTensor), so the device-wait path is exercised; the
             difference to instant + device-ms is what that path costs.
For each: sequential batch-1 latency p50/p99 (µs) over `--requests` calls after a warm-up,
then 4 and 16 concurrent client threads for `--seconds` each (requests/s).
For the server cases it also reads the server's own histograms over the sequential phase:
`handler` is hedgerow_request_seconds (the servicer's whole handler: decode, checks, queue,
engine, encode), `queue` and `step` the loop's; the rest of the client's latency is gRPC.
`--profile CASE` runs that case's server under cProfile (event-loop thread only; slower) and
prints the top functions by own time.

The client shares the machine with the server: on a small or shared machine the numbers are
noisy; compare cases from the same run.
"""

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow.bench.processes import at_least, free_port, grpc_serving, wait
from hedgerow.wire import embed_pb2, embed_pb2_grpc

WIDTH = 1024
CASES = ("echo-aio", "echo-sync", "instant", "device")


# --- the child: one server per case ----------------------------------------------------------

class DelayedResult:
    """Like a GPU LazyTensor: ready `delay` seconds after `step`; synchronize() sleeps (GIL
    released, as a CUDA event wait does) until then."""

    def __init__(self, rows, delay: float) -> None:
        self._rows = rows
        self._due = time.perf_counter() + delay

    def ready(self) -> bool:
        return time.perf_counter() >= self._due

    def synchronize(self):
        remaining = self._due - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        return self._rows


class StandInEngine:
    """FOR TIMING ONLY, not a model: `step` costs nothing and answers zeros float32 [B, 1024].

    `validate` is the real engine's (it reads only `info`), so request checks cost what
    they cost in production.
    """

    def __init__(self, delay: float) -> None:
        from hedgerow.engine.engine import Engine, ModelInfo

        self.info = ModelInfo(name="stand-in", architecture="xlm-roberta", dimensions=WIDTH,
                              max_tokens=8192, vocab_size=250002, pooling="cls",
                              normalize=True)
        self._validate = Engine.validate
        self._delay = delay

    def validate(self, batch) -> None:
        self._validate(self, batch)

    def warmup(self) -> None:
        pass

    def warmup_report(self) -> dict:
        return {"loaded": True, "coverage": 1.0}

    def step(self, batch):
        import torch

        from hedgerow.engine.lazy import LazyTensor

        rows = torch.zeros(batch.cu_seqlens.numel() - 1, WIDTH)
        if self._delay <= 0:
            return LazyTensor.completed(rows)
        return DelayedResult(rows, self._delay)


class EchoAio(embed_pb2_grpc.EmbedderServicer):
    def __init__(self) -> None:
        self._response = embed_pb2.EmbedResponse(embeddings=bytes(4 * WIDTH), shape=[1, WIDTH],
                                                 prompt_tokens=128)

    async def Embed(self, request, context):
        return self._response


class EchoSync(embed_pb2_grpc.EmbedderServicer):
    def __init__(self) -> None:
        self._response = embed_pb2.EmbedResponse(embeddings=bytes(4 * WIDTH), shape=[1, WIDTH],
                                                 prompt_tokens=128)

    def Embed(self, request, context):
        return self._response


def _serving_health(server) -> None:
    from grpc_health.v1 import health

    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)


async def _echo_aio(port: int, stop: asyncio.Event) -> int:
    from grpc_health.v1._async import HealthServicer

    server = grpc.aio.server()
    embed_pb2_grpc.add_EmbedderServicer_to_server(EchoAio(), server)
    health = HealthServicer()
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    running = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        running.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(1)
    return 0


def child(case: str, port: int, http_port: int, device_ms: float, profile: bool) -> int:
    import uvloop

    from hedgerow import logs
    from hedgerow.server.app import serve
    from hedgerow.server.settings import ServerSettings

    logs.configure("warning")
    if case == "echo-sync":
        from concurrent.futures import ThreadPoolExecutor

        server = grpc.server(ThreadPoolExecutor(16))
        embed_pb2_grpc.add_EmbedderServicer_to_server(EchoSync(), server)
        _serving_health(server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        done.wait()
        server.stop(1)
        return 0

    async def main() -> int:
        stop = asyncio.Event()
        if case == "echo-aio":
            return await _echo_aio(port, stop)
        delay = device_ms / 1e3 if case == "device" else 0.0
        settings = ServerSettings(host="127.0.0.1", port=port, http_port=http_port,
                                  device="cpu", inflight_batches=2 if case == "device" else 0,
                                  log_level="warning")
        return await serve(settings, stop=stop, loader=lambda s, g: StandInEngine(delay))

    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        code = runner.run(main())
    if profiler:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        sys.stdout.write(out.getvalue())
        sys.stdout.flush()
    return code


# --- the parent: clients and the table -------------------------------------------------------

def request_for(tokens: int, salt: int) -> embed_pb2.EmbedRequest:
    ids = [0] + [1000 + (salt + i) % 20000 for i in range(tokens - 2)] + [2]
    return embed_pb2.EmbedRequest(
        input_ids=np.asarray(ids, dtype="<i4").tobytes(),
        cu_seqlens=np.asarray([0, tokens], dtype="<i4").tobytes(),
    )


def start(case: str, device_ms: float, profile: bool, http_port: int
          ) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-P", os.path.abspath(__file__), "--child", case, "--port", str(port),
         "--http-port", str(http_port), "--device-ms", str(device_ms)]
        + (["--profile", case] if profile else []),
        env={k: v for k, v in os.environ.items() if not k.startswith("HEDGEROW_")})
    address = f"127.0.0.1:{port}"
    wait(f"{case} server", proc, lambda: grpc_serving(address), timeout=120)
    return proc, address


def sequential(stub, requests: list, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        request = requests[i % len(requests)]
        began = time.perf_counter()
        stub.Embed(request)
        latencies.append(time.perf_counter() - began)
    return latencies


def concurrent(stub, requests: list, clients: int, seconds: float) -> float:
    """Requests per second with `clients` threads calling back to back."""
    counts = [0] * clients
    end = time.perf_counter() + seconds

    def client(c: int) -> None:
        i = c
        while time.perf_counter() < end:
            stub.Embed(requests[i % len(requests)])
            counts[c] += 1
            i += clients

    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - began)


_HISTOGRAMS = {"handler": "hedgerow_request_seconds", "queue": "hedgerow_queue_seconds",
               "step": "hedgerow_step_seconds"}


def server_sums(http_port: int) -> dict[str, float]:
    """The server's histogram sums and counts (seconds), from /metrics."""
    url = f"http://127.0.0.1:{http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.endswith("_sum") or name.endswith("_count"):
            values[name] = float(value)
    return values


def means_us(before: dict, after: dict) -> dict[str, float]:
    out = {}
    for label, metric in _HISTOGRAMS.items():
        count = after[metric + "_count"] - before[metric + "_count"]
        total = after[metric + "_sum"] - before[metric + "_sum"]
        out[label] = total / count * 1e6 if count else float("nan")
    return out


def measure(case: str, args) -> dict:
    http_port = free_port()
    proc, address = start(case, args.device_ms, args.profile == case, http_port)
    server = not case.startswith("echo")
    try:
        with grpc.insecure_channel(address) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            requests = [request_for(args.tokens, salt) for salt in range(64)]
            sequential(stub, requests, 200)  # warm-up
            before = server_sums(http_port) if server else {}
            us = np.asarray(sequential(stub, requests, args.requests)) * 1e6
            row = {"case": case, "p50": float(np.percentile(us, 50)),
                   "p99": float(np.percentile(us, 99))}
            if server:
                row.update(means_us(before, server_sums(http_port)))
            for clients in (4, 16):
                row[f"rps{clients}"] = concurrent(stub, requests, clients, args.seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per concurrency")
    parser.add_argument("--tokens", type=at_least(2), default=128,
                        help="tokens per request (>= 2)")
    parser.add_argument("--device-ms", type=float, default=1.0,
                        help="the device case's stand-in step time, milliseconds")
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--profile", choices=CASES, help="run this case's server under cProfile")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--http-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.port, args.http_port, args.device_ms,
                     args.profile is not None)
    cases = [case for case in args.only.split(",") if case]
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {', '.join(CASES)}")
    rows = [measure(case, args) for case in cases]
    print(f"batch 1, {args.tokens} tokens, float32 [1, {WIDTH}] answer, sync gRPC client on "
          f"loopback; stand-in engine (no model); device case: ready after {args.device_ms} ms")
    print(f"{'case':<10} {'p50 µs':>8} {'p99 µs':>8} {'4 clients req/s':>16} "
          f"{'16 clients req/s':>17}   server means, µs: {'handler':>8} {'queue':>6} {'step':>6}")
    for row in rows:
        inside = "".join(f" {row[k]:>{w}.0f}" if k in row else f" {'-':>{w}}"
                         for k, w in (("handler", 8), ("queue", 6), ("step", 6)))
        print(f"{row['case']:<10} {row['p50']:>8.0f} {row['p99']:>8.0f} {row['rps4']:>16.0f} "
              f"{row['rps16']:>17.0f}   {'':>17}{inside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
