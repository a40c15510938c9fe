"""Hedgerow against Infinity on the same model, same machine, same client: a table of ratios.

    .venv/bin/python -P benchmarks/peer_infinity.py [--rounds 5] [--seconds 5] [--requests 100]

Infinity (`infinity-emb` 0.0.78, FastAPI, torch engine) is installed on first use into its own
virtual environment, .bench/infinity (CPU torch 2.13.0 first, from the same file the project
uses, then `infinity-emb[server,torch]==0.0.78`); where it cannot be installed the benchmark says
why and stops. Both serve the packaged all-MiniLM-L6-v2 directory on CPU with one torch thread
each (Hedgerow's server takes one by default on a 2-core machine; Infinity gets OMP_NUM_THREADS=1),
offline. Three contenders run side by side on loopback: the local stack as `hedgerow serve` runs
it (one server, its default `--dtype auto`; the gateway with its default workers), the same stack
with `--dtype float32` (like for like with Infinity's float32), and Infinity with its defaults.

Every contender gets the same requests from the same client (a keep-alive HTTP/1.1 socket per
client thread, OpenAI's embeddings body): batch-1 latency for a short query (~10 tokens) and a
~128-token one (p50 of `--requests` sequential requests), throughput with 8 clients sending 16
texts of ~40 tokens each (embeddings/s over `--seconds`), and bulk requests of 64 such texts
from one client (embeddings/s). Rounds interleave the contenders (the order rotating), so a
noisy moment on a shared machine lands on all of them; the table gives each figure's median
over rounds and each Hedgerow row's ratio to Infinity, round by round: median [range].
"""

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from hedgerow.bench.clients import threads_until
from hedgerow.bench.processes import at_least, free_port, grpc_serving, positive, start, stop, wait
from hedgerow.defaults import default_model_path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".bench" / "infinity"
INFINITY = "infinity-emb[server,torch]==0.0.78"
TORCH = "torch==2.13.0"
MODEL = "all-MiniLM-L6-v2"
WORDS = ("hawthorn blackthorn hazel field margin wren robin bramble ditch bank lane oak ash "
         "elder holly rose ivy meadow sheep wall gate stile badger hedgehog").split()
SHORT = "what do hedgerows shelter?"


def words(count: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def install_infinity() -> Path:
    """The infinity_emb executable, installed on first use; SystemExit saying why not."""
    executable = VENV / "bin" / "infinity_emb"
    if executable.exists():
        return executable
    print(f"installing {INFINITY} into {VENV.relative_to(ROOT)} (once; a few minutes)",
          file=sys.stderr)
    python = VENV / "bin" / "python"
    steps = [[sys.executable, "-P", "-m", "venv", str(VENV)],
             [str(python), "-P", "-m", "pip", "install", "--quiet", TORCH],
             [str(python), "-P", "-m", "pip", "install", "--quiet", INFINITY]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"Infinity cannot be installed here, so there is nothing to compare "
                             f"against: `{' '.join(step[2:])}` failed:\n{done.stderr[-1500:]}")
    return executable


class Client:
    """One keep-alive HTTP/1.1 connection POSTing JSON bodies."""

    def __init__(self, url: str, path: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=120)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._stream = self._sock.makefile("rb")
        self._head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"

    def post(self, body: bytes) -> None:
        self._sock.sendall(f"{self._head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        status = self._stream.readline()
        length, chunked = 0, False
        while (line := self._stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
            elif name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        body = self._read_chunked() if chunked else self._stream.read(length)
        if b" 200 " not in status:
            raise SystemExit(f"answered {status!r}: {body[:300]!r}")

    def _read_chunked(self) -> bytes:
        parts = []
        while (size := int(self._stream.readline().split(b";")[0], 16)):
            parts.append(self._stream.read(size))
            self._stream.readline()
        self._stream.readline()
        return b"".join(parts)

    def close(self) -> None:
        self._stream.close()
        self._sock.close()


class Contender:
    def __init__(self, name: str, url: str, path: str, procs: list[subprocess.Popen]) -> None:
        self.name, self.url, self.path, self.procs = name, url, path, procs
        self.results: list[dict[str, float]] = []

    def body(self, texts: list[str] | str) -> bytes:
        return json.dumps({"model": MODEL, "input": texts}).encode()

    def latency_ms(self, text: str, requests: int) -> float:
        client = Client(self.url, self.path)
        body = self.body([text])
        try:
            for _ in range(10):
                client.post(body)
            times = []
            for _ in range(requests):
                began = time.perf_counter()
                client.post(body)
                times.append(time.perf_counter() - began)
        finally:
            client.close()
        return statistics.median(times) * 1e3

    def throughput(self, clients: int, texts: list[str], seconds: float) -> float:
        """Embeddings per second with `clients` threads sending `texts` back to back."""
        body = self.body(texts)

        def run(c: int, end: float) -> int:
            client = Client(self.url, self.path)
            try:
                client.post(body)  # warm-up, not counted
                calls = 0
                while time.perf_counter() < end:
                    client.post(body)
                    calls += 1
                return calls
            finally:
                client.close()

        calls, elapsed = threads_until(clients, seconds, run)
        return calls * len(texts) / elapsed

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop(proc)


def hedgerow(name: str, dtype_flags: list[str]) -> Contender:
    port, http_port, gateway_port = free_port(), free_port(), free_port()
    server = start(["server", "--host", "127.0.0.1", "--port", str(port), "--http-port",
                    str(http_port), *dtype_flags])
    address = f"127.0.0.1:{port}"
    wait(f"{name} server", server, lambda: grpc_serving(address))
    gateway = start(["gateway", "--servers", address, "--port", str(gateway_port)])
    url = f"http://127.0.0.1:{gateway_port}"
    wait(f"{name} gateway", gateway, lambda: _answers(url + "/readyz"))
    return Contender(name, url, "/v1/embeddings", [server, gateway])


def infinity(executable: Path) -> Contender:
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HEDGEROW_")},
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [str(executable), "v2", "--model-id", str(default_model_path()), "--served-model-name",
         MODEL, "--port", str(port), "--host", "127.0.0.1", "--engine", "torch", "--device",
         "cpu", "--log-level", "warning", "--no-model-warmup"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait("infinity", proc, lambda: _answers(url + "/health"), timeout=300)
    return Contender("infinity-emb 0.0.78 (float32)", url, "/embeddings", [proc])


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def measure(contender: Contender, args, texts: dict) -> None:
    contender.results.append({
        "short_ms": contender.latency_ms(texts["short"], args.requests),
        "long_ms": contender.latency_ms(texts["long"], args.requests),
        "c8x16": contender.throughput(8, texts["sixteen"], args.seconds),
        "bulk64": contender.throughput(1, texts["sixty_four"], args.seconds),
    })


FIGURES = (("short_ms", "batch 1, ~10 tokens: p50 ms", False),
           ("long_ms", "batch 1, ~128 tokens: p50 ms", False),
           ("c8x16", "8 clients x 16 texts: emb/s", True),
           ("bulk64", "1 client x 64 texts: emb/s", True))


def report(contenders: list[Contender], args) -> None:
    print(f"\nall-MiniLM-L6-v2 on CPU, one torch thread each, {args.rounds} interleaved rounds "
          f"(texts of ~40 tokens in the throughput rows); medians over rounds\n")
    print("| figure | " + " | ".join(c.name for c in contenders) + " |")
    print("| --- |" + " ---: |" * len(contenders))
    for key, label, _ in FIGURES:
        cells = [f"{statistics.median(r[key] for r in c.results):,.2f}" for c in contenders]
        print(f"| {label} | " + " | ".join(cells) + " |")
    peer = contenders[-1]
    print("\nHedgerow against Infinity, per round: median [range] (latency: ours / theirs, "
          "lower is better; throughput: ours / theirs, higher is better)\n")
    print("| figure | " + " | ".join(c.name for c in contenders[:-1]) + " |")
    print("| --- |" + " ---: |" * (len(contenders) - 1))
    for key, label, _ in FIGURES:
        cells = []
        for ours in contenders[:-1]:
            ratios = [mine[key] / theirs[key] for mine, theirs in zip(ours.results, peer.results)]
            cells.append(f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=at_least(1), default=5)
    parser.add_argument("--seconds", type=positive, default=5.0,
                        help="seconds per throughput figure, per contender and round")
    parser.add_argument("--requests", type=at_least(1), default=100,
                        help="sequential requests per latency figure, per contender and round")
    args = parser.parse_args()
    executable = install_infinity()
    rng = random.Random(20261201)
    texts = {"short": SHORT, "long": words(100, rng),
             "sixteen": [words(30, rng) for _ in range(16)],
             "sixty_four": [words(30, rng) for _ in range(64)]}
    contenders: list[Contender] = []
    try:
        contenders.append(hedgerow("hedgerow (auto dtype)", []))
        contenders.append(hedgerow("hedgerow (float32)", ["--dtype", "float32"]))
        contenders.append(infinity(executable))
        for number in range(args.rounds):
            order = contenders[number % 3:] + contenders[:number % 3]
            for contender in order:
                measure(contender, args, texts)
    finally:
        for contender in contenders:
            contender.stop()
    report(contenders, args)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
