"""Benchmark the gateway on CPU: the latency it adds to one query, and tokenization speed.

    .venv/bin/python -P benchmarks/gateway_cpu.py [--requests 300] [--rounds 3] [--texts 20000]
    .venv/bin/python -P benchmarks/gateway_cpu.py --server 127.0.0.1:50051 --gateway http://127.0.0.1:8080
    .venv/bin/python -P benchmarks/gateway_cpu.py --stand-in-ms 0    # the gateway alone
    .venv/bin/python -P benchmarks/gateway_cpu.py --server-flags "--host-cpu off" -- --workers 1
    .venv/bin/python -P benchmarks/gateway_cpu.py --server 127.0.0.1:50051 \
        --gateway http://127.0.0.1:8080 --versus http://127.0.0.1:8081   # two gateways, paired

Unless `--server` and `--gateway` are given, starts `hedgerow server` (packaged all-MiniLM-L6-v2,
CPU, its defaults and any `--server-flags`) and `hedgerow gateway` in front of it (its defaults:
one worker per core, and any flags after --) on free loopback ports. With `--stand-in-ms MS`
the server is instead the stand-in of benchmarks/server_overhead.py, FOR TIMING ONLY (no
model: zeros, 1024 wide), answering MS ms after a request reaches its engine: at 0 the
gateway's own cost shows without the model's time and noise; at about the model's step time
(10) the same cost shows after the gateway has waited idle that long, as it does in front of
the real model. Then measures:
  1. added latency, for a short query (about 10 tokens) and a long one (about 200, or as
     `--long-words` says): each is sent
     `--requests` times each way per round, alternating request by request so drift hits both
     paths alike: straight to the server over gRPC (a sync grpc client, token ids already made)
     and through the gateway over HTTP (a keep-alive socket writing the request and reading the
     answer: JSON, tokenization, routing, gRPC, JSON back). The table gives p50 and p99 of each
     path and of the per-pair difference (what the gateway adds), pooled over `--rounds` rounds,
     and the median of the per-round difference p50s. The HTTP client is a few lines of socket
     code, so that the gateway's cost is not hidden behind a client library's; a third path,
     through the gateway with `http.client` and the JSON decoded (what a user's script sees),
     shows what such a client adds on top. With `--versus
     URL` a second gateway in front of the same server (another commit's, say) takes a turn in
     every pair too (the two alternate which goes first), and the table adds what it adds over
     the first, request by request.
  2. tokenization throughput of the gateway's tokenizer (HF `tokenizers`, batch encode, in this
     process): `--texts` texts of mixed length in batches of `--batch`; texts/s and tokens/s;
     and each query tokenized alone, back to back and after 10 ms of sleep each time.
Client, gateway and server share this machine's cores: on a small or busy machine the numbers
are noisy and pessimistic.
"""

import argparse
import http.client
import json
import random
import shlex
import socket
import sys
import time

import grpc
import httpx
import numpy as np

from hedgerow.bench.processes import at_least, free_port, grpc_serving, start, stop, wait
from hedgerow.bench.server_overhead import start as start_stand_in
from hedgerow.defaults import default_model_path
from hedgerow.gateway.tokenizer import TextTokenizer
from hedgerow.wire import embed_pb2, embed_pb2_grpc

SHORT = "what do hedgerows shelter?"
WORDS = ("hawthorn blackthorn hazel field margin wren robin bramble ditch bank lane oak ash "
         "elder holly rose ivy meadow sheep wall gate stile badger hedgehog").split()


def long_query(words: int) -> str:
    """The long query: WORDS' first eight repeated to `words` words (144: about 200 tokens)."""
    return " ".join(WORDS[i % 8] for i in range(words))


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class HttpConnection:
    """One keep-alive HTTP/1.1 connection that POSTs a fixed body and reads the answer."""

    def __init__(self, url: str, path: str, body: bytes) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=60)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._stream = self._sock.makefile("rb")
        self._request = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                         ).encode() + body

    def post(self) -> bytes:
        self._sock.sendall(self._request)
        status = self._stream.readline()
        length = 0
        while (line := self._stream.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = self._stream.read(length)
        if b" 200 " not in status:
            raise SystemExit(f"the gateway answered {status!r}: {body[:200]!r}")
        return body

    def close(self) -> None:
        self._stream.close()
        self._sock.close()


class UserClient:
    """What a user's script does: a keep-alive `http.client` connection, the JSON decoded."""

    def __init__(self, url: str, path: str, body: bytes) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self._connection = http.client.HTTPConnection(host, int(port), timeout=60)
        self._path, self._body = path, body

    def post(self) -> dict:
        self._connection.request("POST", self._path, self._body,
                                 {"Content-Type": "application/json"})
        return json.loads(self._connection.getresponse().read())

    def close(self) -> None:
        self._connection.close()


def paired(server: str, gateways: list[str], tokenizer: TextTokenizer, text: str,
           requests: int, rounds: int) -> dict:
    """Latencies (ms) straight to `server` and through each of `gateways`, request by request
    in turn (two gateways alternate which goes first); "added" is through the first gateway
    minus straight, "versus" through the second minus through the first."""
    ids = tokenizer.encode_sync([text], "", 100_000, False).input_ids
    request = embed_pb2.EmbedRequest(input_ids=ids.tobytes(),
                                      cu_seqlens=np.asarray([0, len(ids)], "<i4").tobytes())
    body = json.dumps({"input": text}).encode()
    https = [HttpConnection(url, "/v1/embeddings", body) for url in gateways]
    user = UserClient(gateways[0], "/v1/embeddings", body)
    direct, through, medians, users = [], [[] for _ in gateways], [], []
    try:
        with grpc.insecure_channel(server) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            for _ in range(20):  # warm-up: connections, caches, the engine's first shapes
                stub.Embed(request, timeout=60)
                for connection in https:
                    connection.post()
                user.post()
            for _ in range(rounds):
                first = len(direct)
                turns = list(zip(https, through))
                for i in range(requests):
                    began = time.perf_counter()
                    stub.Embed(request, timeout=60)
                    direct.append(time.perf_counter() - began)
                    # Gateways alternate in order, so neither always follows the gRPC call.
                    for connection, times in turns if i % 2 == 0 else turns[::-1]:
                        began = time.perf_counter()
                        connection.post()
                        times.append(time.perf_counter() - began)
                    began = time.perf_counter()
                    user.post()
                    users.append(time.perf_counter() - began)
                medians.append(float(np.median(np.subtract(through[0][first:], direct[first:]))))
    finally:
        for connection in https:
            connection.close()
        user.close()
    d, t = np.asarray(direct) * 1e3, [np.asarray(times) * 1e3 for times in through]
    u = np.asarray(users) * 1e3
    result = {"tokens": len(ids), "direct": d, "through": t[0], "added": t[0] - d,
              "user": u, "user_added": u - d, "round_medians": np.asarray(medians) * 1e3}
    if len(t) > 1:
        result.update(versus_through=t[1], versus_added=t[1] - d, versus=t[1] - t[0])
    return result


def one_text(tokenizer: TextTokenizer, text: str, pause: float, count: int = 300) -> float:
    """p50 µs to tokenize `text` alone, each call after `pause` seconds of sleep: after a pause
    the same call runs on a CPU whose caches the pause let go cold, as a gateway's does while
    it waits for a server."""
    times = []
    for _ in range(count):
        if pause:
            time.sleep(pause)
        began = time.perf_counter()
        tokenizer.encode_sync([text], "", 100_000, False)
        times.append(time.perf_counter() - began)
    return float(np.median(times)) * 1e6


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
    parser.add_argument("--requests", type=at_least(1), default=300,
                        help="requests each way, per text and round")
    parser.add_argument("--rounds", type=at_least(1), default=3)
    parser.add_argument("--texts", type=at_least(1), default=20000)
    parser.add_argument("--long-words", type=at_least(1), default=144, metavar="N",
                        help="words in the long query (144: about 200 tokens; 440: about 600, "
                             "which the gateway tokenizes in pieces)")
    parser.add_argument("--batch", type=at_least(1), default=256)
    parser.add_argument("--server", help="a running server's gRPC host:port")
    parser.add_argument("--gateway", help="a running gateway's URL in front of --server")
    parser.add_argument("--versus", metavar="URL",
                        help="a second running gateway in front of --server, paired with the "
                        "first request by request")
    parser.add_argument("--stand-in-ms", type=float, metavar="MS",
                        help="put the gateway in front of a stand-in server answering MS ms "
                        "after each request reaches it (timing only, no model)")
    parser.add_argument("--server-flags", type=shlex.split, default=[], metavar="FLAGS",
                        help="extra `hedgerow server` flags, in one quoted string (when the "
                        "model server is started here)")
    parser.add_argument("gateway_flags", nargs="*",
                        help="extra `hedgerow gateway` flags after -- (when it is started here)")
    args = parser.parse_args()
    if args.stand_in_ms is not None and (args.stand_in_ms < 0 or args.server):
        parser.error("--stand-in-ms takes a time >= 0, and starts its own server and gateway "
                     "(not with --server/--gateway)")
    if args.versus and not (args.server and args.gateway):
        parser.error("--versus needs --server and --gateway: both gateways in front of one "
                     "running server")
    if args.server_flags and (args.server or args.stand_in_ms is not None):
        parser.error("--server-flags applies to the model server started here (not with "
                     "--server or --stand-in-ms)")

    tokenizer = TextTokenizer(default_model_path(), threads=1)
    children = []
    long = long_query(args.long_words)
    try:
        server, gateway = args.server, args.gateway
        if not (server and gateway):
            port, http_port, gw_port = free_port(), free_port(), free_port()
            server, gateway = f"127.0.0.1:{port}", f"http://127.0.0.1:{gw_port}"
            if args.stand_in_ms is None:
                children.append(start(["server", "--host", "127.0.0.1", "--port", str(port),
                                       "--http-port", str(http_port), *args.server_flags]))
                wait("server", children[-1], lambda: grpc_serving(server))
            else:
                case = "device" if args.stand_in_ms > 0 else "instant"
                stand_in, server = start_stand_in(case, args.stand_in_ms, False, http_port)
                children.append(stand_in)
            children.append(start(["gateway", "--servers", server, "--port", str(gw_port),
                                   *args.gateway_flags]))
            wait("gateway", children[-1], lambda: ready(gateway))
        gateways = [gateway, *([args.versus] if args.versus else [])]
        results = [paired(server, gateways, tokenizer, text, args.requests, args.rounds)
                   for text in (SHORT, long)]
        texts_s, tokens_s, tokens = tokenization(tokenizer, args.texts, args.batch)
        alone = {(text, pause): one_text(tokenizer, text, pause)
                 for text in (SHORT, long) for pause in (0.0, 0.01)}
    finally:
        for child in reversed(children):
            stop(child)
        tokenizer.close()

    behind = ("all-MiniLM-L6-v2" if args.stand_in_ms is None else
              f"a stand-in server answering after {args.stand_in_ms:g} ms (no model)")
    print(f"\nGateway on CPU, {behind}, {args.rounds} rounds of {args.requests} "
          "sequential requests each way per query, alternating (noisy on a shared machine)\n")
    print("| query | path | p50 ms | p99 ms |\n| --- | --- | ---: | ---: |")
    for result in results:
        name = f"{result['tokens']} tokens"
        rows = [("straight to the server (gRPC, token ids)", "direct"),
                ("through the gateway (HTTP JSON, text)", "through"),
                ("added by the gateway (paired difference)", "added"),
                ("through the gateway, http.client + json.loads", "user"),
                ("added, with that client's own cost (paired)", "user_added")]
        if "versus" in result:
            rows += [("through --versus", "versus_through"),
                     ("added by --versus (paired difference)", "versus_added"),
                     ("--versus minus the gateway (paired difference)", "versus")]
        for label, key in rows:
            values = result[key]
            print(f"| {name} | {label} | {np.percentile(values, 50):.2f} | "
                  f"{np.percentile(values, 99):.2f} |")
    for result in results:
        medians = result["round_medians"]
        print(f"\n{result['tokens']} tokens: added p50 per round "
              f"{', '.join(f'{m:.2f}' for m in medians)} ms; median {np.median(medians):.2f} ms")
    print(f"\nTokenization (HF tokenizers, batches of {args.batch}, one thread): "
          f"{args.texts} texts, {tokens} tokens\n")
    print(f"| texts/s | tokens/s |\n| ---: | ---: |\n| {texts_s:,.0f} | {tokens_s:,.0f} |")
    print("\nOne text alone, p50 µs: back to back, and each after a 10 ms sleep\n")
    print("| query | back to back | after 10 ms idle |\n| --- | ---: | ---: |")
    for result, text in zip(results, (SHORT, long)):
        print(f"| {result['tokens']} tokens | {alone[text, 0.0]:.0f} | {alone[text, 0.01]:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
