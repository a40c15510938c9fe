"""Does the server's memory level off under sustained load of mixed request sizes?

    .venv/bin/python -P benchmarks/server_memory.py [--rounds 5] [--seconds 20] [--clients 4]
        [-- extra hedgerow server flags]

Starts `hedgerow server` (packaged all-MiniLM-L6-v2, CPU, its defaults) on free loopback ports
and runs `--rounds` identical rounds: `--clients` concurrent clients send requests back to back
for `--seconds`, each request 1 to 32 sequences of 2 to 256 tokens drawn from a fixed seed, so
every round sends the same mix in the same order. After each round (the load stopped) it reads
the server's resident memory (VmRSS). A server whose memory is bounded ends round 5 within a
few percent of round 1; the last line gives that ratio. Idle RSS before the first round is
printed for reference.
"""

import argparse
import random
import signal
import sys
import time
from pathlib import Path

import grpc
import numpy as np

from hedgerow.bench.clients import threads_until
from hedgerow.bench.processes import at_least, free_port, grpc_serving, positive, start, wait
from hedgerow.wire import embed_pb2, embed_pb2_grpc

SEED = 20261201


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def mixed_requests(count: int, seed: int) -> list[embed_pb2.EmbedRequest]:
    """`count` requests of 1-32 sequences of 2-256 tokens ([CLS] ... [SEP] of ordinary ids)."""
    rng = random.Random(seed)
    requests = []
    for _ in range(count):
        lengths = [rng.randint(2, 256) for _ in range(rng.randint(1, 32))]
        ids = [token for n in lengths
               for token in [101, *(rng.randint(1000, 29000) for _ in range(n - 2)), 102]]
        cu = np.cumsum([0, *lengths])
        requests.append(embed_pb2.EmbedRequest(input_ids=np.asarray(ids, "<i4").tobytes(),
                                               cu_seqlens=np.asarray(cu, "<i4").tobytes()))
    return requests


def load_round(address: str, clients: int, seconds: float, requests: list) -> int:
    """Send `requests` round-robin from `clients` threads for `seconds`; returns how many."""
    def client(c: int, end: float) -> int:
        calls, i = 0, c
        with grpc.insecure_channel(address) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            while time.perf_counter() < end:
                stub.Embed(requests[i % len(requests)], timeout=60)
                calls, i = calls + 1, i + clients
        return calls

    return threads_until(clients, seconds, client)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=at_least(2), default=5)
    parser.add_argument("--seconds", type=positive, default=20.0, help="seconds of load per round")
    parser.add_argument("--clients", type=at_least(1), default=4)
    parser.add_argument("server_flags", nargs="*", help="extra `hedgerow server` flags after --")
    args = parser.parse_args()
    port = free_port()
    proc = start(["server", "--host", "127.0.0.1", "--port", str(port), "--http-port",
                  str(free_port()), *args.server_flags])
    address = f"127.0.0.1:{port}"
    rows = []
    try:
        wait("server", proc, lambda: grpc_serving(address))
        idle = rss_mib(proc.pid)
        requests = mixed_requests(256, SEED)
        for number in range(1, args.rounds + 1):
            sent = load_round(address, args.clients, args.seconds, requests)
            time.sleep(1.0)  # let the last answers go out
            rows.append((number, sent, rss_mib(proc.pid)))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    print(f"server RSS under {args.rounds} identical rounds of {args.seconds:g} s, "
          f"{args.clients} clients, requests of 1-32 sequences x 2-256 tokens")
    print(f"idle before load: {idle:.0f} MiB")
    print(f"{'round':>5} {'requests':>9} {'RSS MiB':>8} {'vs round 1':>11}")
    for number, sent, rss in rows:
        print(f"{number:>5} {sent:>9} {rss:>8.0f} {rss / rows[0][2]:>10.2f}x")
    print(f"round {rows[-1][0]} against round 1: {rows[-1][2] / rows[0][2]:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
