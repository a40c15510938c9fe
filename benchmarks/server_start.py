"""How fast a new server is SERVING, where its start goes, and how its first minute compares.

    python -P benchmarks/server_start.py [--model DIR] [--device cuda] [--starts 3]
        [--compile-cache DIR] [--first-seconds 60] [--steady-seconds 60] [-- SERVER FLAGS]

Starts `hedgerow server` `--starts` times, one after the other, each until it reports
grpc.health.v1 SERVING (polled every 20 ms), and splits each start by its own log's events:
`listen` (imports, ports), `load` (weights onto the device; with `--dtype auto` on CPU also
a second load and the speed probe), `space` (the fingerprint's probe, the rest of the weights
digest; on a GPU the first compile happens here), `hot set` (the CUDA-graph capture of the hot
set) and the total. On a CUDA device each start gets a compile cache: by
default a new empty directory per start (as a new pod without a volume), or with
`--compile-cache DIR` the same directory every time (as pods sharing a volume: the first start
fills it, the next reuse it); the table says whether it was empty. On CPU there is no cache.

After the last start, one client sends batch-1-to-16 requests of mixed sizes back to back
(the same cycle of shapes, each sequence cut to the model's longest): `--first-seconds` right
from SERVING, then `--steady-seconds` more. Shapes outside the hot set have their graphs
captured on first use, which is what a new replica's first minute pays; the last line gives
the first window's p99 against the steady one's.
"""

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import grpc
import numpy as np

from hedgerow.bench.processes import at_least, free_port, grpc_serving, positive, start, stop
from hedgerow.bench.wire_requests import embed_request
from hedgerow.wire import embed_pb2, embed_pb2_grpc

# (sequences, tokens each): inside and outside the default hot set (1x64 ... 1x512).
SHAPES = ((1, 16), (1, 128), (1, 300), (4, 128), (1, 512), (16, 64), (1, 1000), (8, 256))
# Each phase ends at the last of its events in the log and starts where the one before ended
# (the first at the process's start), so together they are the whole start. With `--dtype
# auto` on CPU the engine loads twice, then times both: all of it counts as `load`.
PHASES = (("listen", ("server.listening",)), ("load", ("engine.load.done", "engine.dtype_auto")),
          ("space", ("server.space",)), ("hot set", ("server.serving",)))
POLL_S = 0.02
START_TIMEOUT_S = 600.0


def events(log: Path) -> dict[str, float]:
    """Each event's last time in the server's JSON log (seconds since the epoch)."""
    times: dict[str, float] = {}
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            times[record.get("event", "")] = datetime.fromisoformat(record["time"]).timestamp()
    return times


def start_once(args, number: int, cache: Path | None) -> dict:
    """One start until SERVING: its phases in seconds; the process and address for the last."""
    port, http_port = free_port(), free_port()
    log = args.work / f"start-{number}.log"
    flags = ["server", "--host", "127.0.0.1", "--port", str(port), "--http-port", str(http_port),
             "--device", args.device, "--log-format", "json", *args.server_flags]
    if args.model:
        flags += ["--model", args.model]
    if cache is not None:
        flags += ["--compile-cache", str(cache)]
    cache_state = "-" if cache is None else ("filled" if any(cache.iterdir()) else "empty")
    began = time.time()
    proc = start(flags, log_path=log, log_level="info")
    address = f"127.0.0.1:{port}"
    while not grpc_serving(address):
        if proc.poll() is not None or time.time() - began > START_TIMEOUT_S:
            stop(proc)
            raise SystemExit(f"start {number} did not reach SERVING:\n{log.read_text()[-3000:]}")
        time.sleep(POLL_S)
    total = time.time() - began
    seen = events(log)
    phases, since = {}, began
    for name, ends in PHASES:
        end = max((seen[event] for event in ends if event in seen), default=None)
        if end is not None:
            phases[name], since = end - since, end
    return {"number": number, "cache": cache_state, "total": total, **phases,
            "proc": proc, "address": address}


def first_minute(address: str, first: float, steady: float) -> tuple[list[float], list[float]]:
    """Latencies (ms) of mixed-size requests sent back to back: the first `first` seconds,
    then the next `steady` seconds."""
    with grpc.insecure_channel(address) as channel:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        longest = stub.Info(embed_pb2.InfoRequest(), timeout=30).max_tokens
        requests = [embed_request([min(tokens, longest)] * seqs, salt)
                    for salt, (seqs, tokens) in enumerate(SHAPES)]
        early: list[float] = []
        later: list[float] = []
        began = time.perf_counter()
        number = 0
        while (now := time.perf_counter()) - began < first + steady:
            stub.Embed(requests[number % len(requests)], timeout=120)
            (early if now - began < first else later).append((time.perf_counter() - now) * 1e3)
            number += 1
    return early, later


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="model directory (default: the packaged model)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--starts", type=at_least(1), default=3, help="starts, one after another")
    parser.add_argument("--compile-cache", type=Path,
                        help="one compile-cache directory for every start (CUDA; default: a new "
                             "empty one per start)")
    parser.add_argument("--first-seconds", type=positive, default=60.0,
                        help="the first window after the last start's SERVING")
    parser.add_argument("--steady-seconds", type=positive, default=60.0,
                        help="the window after it, taken as steady")
    parser.add_argument("server_flags", nargs="*", help="extra `hedgerow server` flags after --")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hedgerow-start-") as work:
        args.work = Path(work)
        for number in range(1, args.starts + 1):
            cache = None
            if args.device != "cpu":
                cache = args.compile_cache or args.work / f"compile-cache-{number}"
                cache.mkdir(parents=True, exist_ok=True)
            rows.append(start_once(args, number, cache))
            if number < args.starts:
                stop(rows[-1]["proc"])
        last = rows[-1]
        try:
            early, steady = first_minute(last["address"], args.first_seconds, args.steady_seconds)
        finally:
            stop(last["proc"])
    print(f"hedgerow server starts on {args.device}, model {args.model or 'packaged'}; seconds")
    names = [name for name, _ in PHASES]
    print(f"{'start':>5} {'cache':>7} " + " ".join(f"{n:>8}" for n in names) + f" {'SERVING':>8}")
    for row in rows:
        cells = " ".join(f"{row[n]:>8.2f}" if n in row else f"{'-':>8}" for n in names)
        print(f"{row['number']:>5} {row['cache']:>7} {cells} {row['total']:>8.2f}")
    if not early or not steady:
        print("\nno requests in one of the windows: lengthen --first-seconds/--steady-seconds")
        return 0
    p99 = [float(np.percentile(window, 99)) for window in (early, steady)]
    print(f"\nmixed requests back to back after the last start, ms: first {args.first_seconds:g} s "
          f"p50 {np.median(early):.2f} p99 {p99[0]:.2f} ({len(early)} requests); next "
          f"{args.steady_seconds:g} s p50 {np.median(steady):.2f} p99 {p99[1]:.2f} "
          f"({len(steady)}); first p99 / steady p99 {p99[0] / p99[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
