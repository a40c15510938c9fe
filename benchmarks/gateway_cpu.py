"""Benchmark the gateway on CPU: its added latency for one short query, and tokenization speed.

    .venv/bin/python -P benchmarks/gateway_cpu.py [--requests 300] [--texts 20000]
    .venv/bin/python -P benchmarks/gateway_cpu.py --server 127.0.0.1:50051 --gateway http://127.0.0.1:8080

Unless `--server` and `--gateway` are given, starts `hedgerow server` (packaged all-MiniLM-L6-v2,
CPU) and `hedgerow gateway` in front of it on free loopback ports. Then measures:
  1. added latency: one short query, sequentially, `--requests` times each way, interleaved so
     drift hits both paths alike: straight to the server over gRPC (token ids already made) and
     through the gateway over HTTP (JSON, tokenization, routing, gRPC, JSON back); p50 and p99
     of each and of the difference. The HTTP client (httpx) is part of the gateway path.
  2. tokenization throughput of the gateway's tokenizer (HF `tokenizers`, batch encode, in this
     process): `--texts` texts of mixed length in batches of `--batch`; texts/s and tokens/s.
Client, gateway and server share this machine's cores: on a small or busy machine the numbers
are noisy and pessimistic.
"""

import argparse
import random
import sys
import time

import grpc
import httpx
import numpy as np

from hedgerow.bench.processes import free_port, grpc_serving, start, stop, wait
from hedgerow.defaults import default_model_path
from hedgerow.gateway.tokenizer import TextTokenizer
from hedgerow.wire import embed_pb2, embed_pb2_grpc

QUERY = "what do hedgerows shelter?"
MODEL = "all-MiniLM-L6-v2"
WORDS = ("hawthorn blackthorn hazel field margin wren robin bramble ditch bank lane oak ash "
         "elder holly rose ivy meadow sheep wall gate stile badger hedgehog").split()


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def percentiles(samples: list[float]) -> tuple[float, float]:
    values = np.asarray(samples) * 1000.0
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def added_latency(server: str, gateway: str, tokenizer: TextTokenizer, requests: int):
    ids = tokenizer.encode_sync([QUERY], "", 512, False).input_ids
    request = embed_pb2.EmbedRequest(
        input_ids=ids.astype("<i4").tobytes(),
        cu_seqlens=np.asarray([0, len(ids)], dtype="<i4").tobytes())
    body = {"model": MODEL, "input": QUERY}
    direct, through = [], []
    with grpc.insecure_channel(server) as channel, httpx.Client(base_url=gateway) as http:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        for _ in range(20):  # warm-up: connections, caches, the engine's first shapes
            stub.Embed(request, timeout=30)
            http.post("/v1/embeddings", json=body).raise_for_status()
        for _ in range(requests):
            started = time.perf_counter()
            stub.Embed(request, timeout=30)
            direct.append(time.perf_counter() - started)
            started = time.perf_counter()
            http.post("/v1/embeddings", json=body).raise_for_status()
            through.append(time.perf_counter() - started)
    return direct, through, len(ids)


def tokenization(tokenizer: TextTokenizer, count: int, batch: int) -> tuple[float, float, int]:
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 120)))
             for _ in range(count)]
    tokenizer.encode_sync(texts[:batch], "", 100_000, False)  # warm-up
    tokens = 0
    started = time.perf_counter()
    for first in range(0, count, batch):
        tokens += tokenizer.encode_sync(texts[first:first + batch], "", 100_000,
                                        False).total_tokens
    seconds = time.perf_counter() - started
    return count / seconds, tokens / seconds, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--server", help="a running server's gRPC host:port")
    parser.add_argument("--gateway", help="a running gateway's URL in front of --server")
    args = parser.parse_args()

    tokenizer = TextTokenizer(default_model_path(), threads=1)
    children = []
    try:
        server, gateway = args.server, args.gateway
        if not (server and gateway):
            port, http_port, gw_port = free_port(), free_port(), free_port()
            server, gateway = f"127.0.0.1:{port}", f"http://127.0.0.1:{gw_port}"
            children.append(start(["server", "--host", "127.0.0.1", "--port", str(port),
                                   "--http-port", str(http_port)]))
            wait("server", children[-1], lambda: grpc_serving(server))
            children.append(start(["gateway", "--servers", server, "--port", str(gw_port)]))
            wait("gateway", children[-1], lambda: ready(gateway))
        direct, through, query_tokens = added_latency(server, gateway, tokenizer, args.requests)
        texts_s, tokens_s, tokens = tokenization(tokenizer, args.texts, args.batch)
    finally:
        for child in reversed(children):
            stop(child)
        tokenizer.close()

    d50, d99 = percentiles(direct)
    g50, g99 = percentiles(through)
    a50, a99 = percentiles([t - d for t, d in zip(through, direct)])
    print(f"\nGateway on CPU, all-MiniLM-L6-v2, one query of {query_tokens} tokens, "
          f"{args.requests} sequential requests each way (noisy on a shared machine)\n")
    print("| path | p50 ms | p99 ms |\n| --- | ---: | ---: |")
    print(f"| straight to the server (gRPC, token ids) | {d50:.2f} | {d99:.2f} |")
    print(f"| through the gateway (HTTP JSON, text) | {g50:.2f} | {g99:.2f} |")
    print(f"| added by the gateway (paired difference) | {a50:.2f} | {a99:.2f} |")
    print(f"\nTokenization (HF tokenizers, batches of {args.batch}, one thread): "
          f"{args.texts} texts, {tokens} tokens\n")
    print(f"| texts/s | tokens/s |\n| ---: | ---: |\n| {texts_s:,.0f} | {tokens_s:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
