"""Measure the server's own host overhead per request on CPU, with an engine that costs nothing.

    .venv/bin/python -P benchmarks/server_overhead.py [--rounds 5] [--requests 500]
        [--seconds 1] [--device-ms 1.0] [--only echo-aio,instant,device] [--profile instant]
        [--host-cpu auto]

What runs: each case starts a server in a child process on loopback and a sync gRPC client
(int32 bytes, one sequence of `--tokens` tokens, 1024-wide float32 answer) in this process:
  echo-aio   a bare grpc.aio servicer on uvloop answering Embed with a fixed 4 KiB response:
             the floor (what gRPC itself costs, no server code at all);
  echo-sync  the same with a sync grpc.server and a thread pool, to compare the two models;
  echo-hop   echo-aio plus one round trip through a worker thread per call (a SimpleQueue put,
             `call_soon_threadsafe` back), as the server's engine thread makes: the floor of
             a design whose device calls all run on one thread;
  echo-wait  echo-hop whose worker waits `--device-ms` as the device case's stand-in does: the
             floor for the device case, since threads that slept through the wait wake slower
             than hot ones (on some virtual machines by hundreds of microseconds a request);
  instant    the REAL server stack (`hedgerow.server.app.serve`: servicer, decoding and
             validation, admission, the scheduling loop, the engine thread, postprocessing,
             encoding, metrics) with a STAND-IN ENGINE, FOR TIMING ONLY: its `step` returns a
             completed LazyTensor of zeros float32 [B, 1024] at once (no model runs). The
             difference to echo-aio is the server's host overhead;
  device     the same stand-in, but its result becomes ready `--device-ms` after `step`
             returns (like a GPU's LazyTensor), so the device-wait path is exercised; the
             difference to echo-wait is what the server costs around a device wait.
Every case's server runs for the whole benchmark; each of `--rounds` rounds measures every
case in turn (the order rotating), so a noisy moment of a shared machine lands on all of them.
Per case and round: sequential batch-1 latency p50/p99 (µs) over `--requests` calls and the
server process's CPU time per request over them (all its threads: less at the mercy of a noisy
machine than latency), then 4 and 16 concurrent client threads for `--seconds` each
(requests/s; at 16, also the server's CPU time and context switches per request, all threads:
the switches count hand-offs between threads, and vary far less than time does). The table
gives medians over rounds, then each case against its floor round by round: p50 above the
floor's (plus the stand-in device time where the floor does not wait: echo-wait against the
echo, and the device case when echo-wait did not run), and the 16-client throughput as a share
of the echo's.
For the server cases it also reads the server's own histograms over the sequential phase:
`handler` is hedgerow_server_request_seconds (the servicer's whole handler: decode, checks, queue,
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
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow.bench.clients import threads_until
from hedgerow.bench.processes import at_least, free_port, grpc_serving, positive, wait
from hedgerow.bench.wire_requests import embed_request
from hedgerow.wire import embed_pb2, embed_pb2_grpc

WIDTH = 1024
CASES = ("echo-aio", "echo-sync", "echo-hop", "echo-wait", "instant", "device")
WAITING = ("echo-wait", "device")  # the cases whose step takes --device-ms


# --- the child: one server per case ----------------------------------------------------------

class DelayedResult:
    """Like a GPU LazyTensor: ready `delay` seconds after `step`; synchronize() waits with the
    GIL released, as a CUDA event wait does, until then: it sleeps to within SPIN_S of the
    moment and spins the rest on sched_yield, which releases the GIL and returns in about a
    microsecond (a plain sleep overshoots by 50-150 µs, and so does a spin on sleep(0), whose
    every call waits out the kernel's timer slack: that would be counted as the server's)."""

    SPIN_S = 200e-6

    def __init__(self, rows, delay: float) -> None:
        self._rows = rows
        self._due = time.perf_counter() + delay
        self.pinned = True  # as on a GPU: the engine thread copies the rows out

    def ready(self) -> bool:
        return time.perf_counter() >= self._due

    def synchronize(self):
        remaining = self._due - time.perf_counter()
        if remaining > self.SPIN_S:
            time.sleep(remaining - self.SPIN_S)
        while time.perf_counter() < self._due:
            os.sched_yield()
        return self._rows


class StandInEngine:
    """FOR TIMING ONLY, not a model: `step` costs nothing and answers zeros float32 [B, 1024].
    The server checks requests against its `info` as it does a real engine's."""

    def __init__(self, delay: float) -> None:
        from hedgerow.engine.engine import ModelInfo

        self.info = ModelInfo(name="stand-in", architecture="xlm-roberta", dimensions=WIDTH,
                              max_tokens=8192, vocab_size=250002, pooling="cls",
                              normalize=True)
        self._delay = delay
        self._rows: dict = {}

    def warmup(self) -> None:
        pass

    def warmup_report(self) -> dict:
        return {"loaded": True, "coverage": 1.0}

    def step(self, batch):
        import torch

        from hedgerow.engine.lazy import LazyTensor

        count = batch.cu_seqlens.numel() - 1
        if count not in self._rows:  # made once per batch size: the stand-in costs nothing
            self._rows[count] = torch.zeros(count, WIDTH)
        if self._delay <= 0:
            return LazyTensor.completed(self._rows[count])
        return DelayedResult(self._rows[count], self._delay)


class EchoAio(embed_pb2_grpc.EmbedderServicer):
    def __init__(self) -> None:
        self._response = embed_pb2.EmbedResponse(embeddings=bytes(4 * WIDTH), shape=[1, WIDTH],
                                                 prompt_tokens=128)

    async def Embed(self, request, context):
        return self._response


class EchoHop(EchoAio):
    """EchoAio, but each call waits for a worker thread to hand it back (one round trip), after
    `delay` seconds waited as the device case's stand-in waits."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self._delay = delay
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while True:
            loop, future = self._jobs.get()
            if self._delay > 0:
                DelayedResult(None, self._delay).synchronize()
            loop.call_soon_threadsafe(future.set_result, None)

    async def Embed(self, request, context):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future))
        await future
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


async def _echo_aio(port: int, stop: asyncio.Event, servicer: EchoAio) -> int:
    from grpc_health.v1._async import HealthServicer

    server = grpc.aio.server()
    embed_pb2_grpc.add_EmbedderServicer_to_server(servicer, server)
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


def child(case: str, port: int, http_port: int, device_ms: float, profile: bool,
          host_cpu: str) -> int:
    import uvloop

    from hedgerow import logs
    from hedgerow.server.app import serve
    from hedgerow.server.space import Space
    from hedgerow.server_settings import ServerSettings

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
        delay = device_ms / 1e3 if case in WAITING else 0.0
        if case.startswith("echo"):
            servicer = EchoAio() if case == "echo-aio" else EchoHop(delay)
            return await _echo_aio(port, stop, servicer)
        # No idle probe: the stand-in's rows of zeros have no direction, so the probe's
        # cosine is NaN and would fail the engine after 30 s without requests.
        # model: only the metrics' name; no model is read, so no package is needed.
        settings = ServerSettings(host="127.0.0.1", port=port, http_port=http_port,
                                  model="stand-in", device="cpu",
                                  inflight_batches=2 if case == "device" else 0,
                                  host_cpu=host_cpu, log_level="warning", probe_interval=0)
        stand_in = Space(fingerprint="stand-in", facts={})  # nothing to fingerprint
        return await serve(settings, stop=stop,
                           loader=lambda *_: (StandInEngine(delay), stand_in, None))

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

def start(case: str, device_ms: float, profile: bool, http_port: int, host_cpu: str = "auto"
          ) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-P", os.path.abspath(__file__), "--child", case, "--port", str(port),
         "--http-port", str(http_port), "--host-cpu", host_cpu]
        # Only the waiting cases wait; the others take the flag's default (0 is not a valid one).
        + (["--device-ms", str(device_ms)] if case in WAITING else [])
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


def concurrent(stub, requests: list, clients: int, seconds: float) -> tuple[int, float]:
    """(calls made, seconds taken) by `clients` threads calling back to back."""
    def client(c: int, end: float) -> int:
        calls, i = 0, c
        while time.perf_counter() < end:
            stub.Embed(requests[i % len(requests)])
            calls, i = calls + 1, i + clients
        return calls

    return threads_until(clients, seconds, client)


_HISTOGRAMS = {"handler": "hedgerow_server_request_seconds", "queue": "hedgerow_server_queue_seconds",
               "step": "hedgerow_server_step_seconds"}


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


class Case:
    """One running server and its client; `round()` measures it once more."""

    def __init__(self, name: str, args) -> None:
        self.name = name
        self.http_port = free_port()
        self.proc, address = start(name, args.device_ms, args.profile == name, self.http_port,
                                   args.host_cpu)
        self.channel = grpc.insecure_channel(address)
        self.stub = embed_pb2_grpc.EmbedderStub(self.channel)
        self.requests = [embed_request([args.tokens], salt) for salt in range(64)]
        self.server = not name.startswith("echo")
        self.rounds: list[dict] = []
        sequential(self.stub, self.requests, 200)  # warm-up

    def round(self, args) -> None:
        before = server_sums(self.http_port) if self.server else {}
        cpu = cpu_seconds(self.proc.pid)
        us = np.asarray(sequential(self.stub, self.requests, args.requests)) * 1e6
        row = {"p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99)),
               "cpu": (cpu_seconds(self.proc.pid) - cpu) / args.requests * 1e6}
        if self.server:
            row.update(means_us(before, server_sums(self.http_port)))
        calls, elapsed = concurrent(self.stub, self.requests, 4, args.seconds)
        row["rps4"] = calls / elapsed
        cpu, switches = cpu_seconds(self.proc.pid), context_switches(self.proc.pid)
        calls, elapsed = concurrent(self.stub, self.requests, 16, args.seconds)
        row["rps16"] = calls / elapsed
        row["cpu16"] = (cpu_seconds(self.proc.pid) - cpu) / calls * 1e6
        row["switches16"] = (context_switches(self.proc.pid) - switches) / calls
        self.rounds.append(row)

    def median(self, key: str) -> float:
        return float(np.median([row[key] for row in self.rounds]))

    def stop(self) -> None:
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system, all threads) process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def context_switches(pid: int) -> int:
    """Context switches (voluntary and not) of all of process `pid`'s live threads so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        total += sum(int(line.split()[1]) for line in status.splitlines()
                     if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))
    return total


def spread(values: list[float], fmt: str) -> str:
    """median [min-max] of per-round values."""
    return (f"{np.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]")


def report(cases: dict[str, Case], args) -> None:
    print(f"batch 1, {args.tokens} tokens, float32 [1, {WIDTH}] answer, sync gRPC client on "
          f"loopback; stand-in engine (no model); device case: ready after {args.device_ms} ms; "
          f"{args.rounds} interleaved rounds, medians over rounds")
    print(f"{'case':<10} {'p50 µs':>8} {'p99 µs':>8} {'CPU µs/req':>11} {'4 clients req/s':>16} "
          f"{'16 clients req/s':>17} {'16: CPU µs/req':>15} {'16: switches/req':>17}   "
          f"server means, µs: {'handler':>8} {'queue':>6} {'step':>6}")
    for name, case in cases.items():
        inside = "".join(f" {case.median(k):>{w}.0f}" if case.server else f" {'-':>{w}}"
                         for k, w in (("handler", 8), ("queue", 6), ("step", 6)))
        print(f"{name:<10} {case.median('p50'):>8.0f} {case.median('p99'):>8.0f} "
              f"{case.median('cpu'):>11.0f} {case.median('rps4'):>16.0f} "
              f"{case.median('rps16'):>17.0f} {case.median('cpu16'):>15.0f} "
              f"{case.median('switches16'):>17.1f}   {'':>17}{inside}")
    if "echo-aio" not in cases:
        return
    print("\nagainst a floor, per round: median [range]")
    wait_us = args.device_ms * 1e3
    # (case, its floor, what the floor lacks): the device case against echo-wait where it ran
    device_floor = ("echo-wait", 0.0) if "echo-wait" in cases else ("echo-aio", wait_us)
    pairs = [("echo-hop", "echo-aio", 0.0), ("echo-wait", "echo-aio", wait_us),
             ("instant", "echo-aio", 0.0), ("device", *device_floor)]
    for name, floor_name, missing in pairs:
        if name not in cases:
            continue
        rows, floor = cases[name].rounds, cases[floor_name].rounds
        above = [row["p50"] - base["p50"] - missing for row, base in zip(rows, floor)]
        share = [row["rps16"] / base["rps16"] for row, base in zip(rows, floor)]
        cpu = [row["cpu"] - base["cpu"] for row, base in zip(rows, floor)]
        what = f"p50 - {floor_name} p50" + (f" - {args.device_ms:g} ms" if missing else "")
        # echo-wait's one worker waits for each call in turn: no throughput floor
        throughput = ("" if floor_name == "echo-wait" else
                      f";   16 clients req/s / {floor_name}'s {spread(share, '.2f')}")
        print(f"  {name:<9} {what:<30} {spread(above, '.0f')} µs;   "
              f"CPU per request - {floor_name}'s {spread(cpu, '.0f')} µs{throughput}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=at_least(1), default=5,
                        help="interleaved rounds over every case")
    parser.add_argument("--requests", type=at_least(1), default=500,
                        help="sequential requests per case and round")
    parser.add_argument("--seconds", type=positive, default=1.0,
                        help="seconds per concurrency level, per case and round")
    parser.add_argument("--tokens", type=at_least(2), default=128,
                        help="tokens per request (>= 2)")
    parser.add_argument("--device-ms", type=positive, default=1.0,
                        help="the device and echo-wait cases' stand-in step time, milliseconds")
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--profile", choices=CASES, help="run this case's server under cProfile")
    parser.add_argument("--host-cpu", default="auto",
                        help="the servers' --host-cpu (auto, off or a CPU number)")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--http-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.port, args.http_port, args.device_ms,
                     args.profile is not None, args.host_cpu)
    names = [case for case in args.only.split(",") if case]
    unknown = set(names) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {', '.join(CASES)}")
    cases: dict[str, Case] = {}
    try:
        for name in names:
            cases[name] = Case(name, args)
        for number in range(args.rounds):
            order = names[number % len(names):] + names[:number % len(names)]
            for name in order:
                cases[name].round(args)
    finally:
        for case in cases.values():
            case.stop()
    report(cases, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
