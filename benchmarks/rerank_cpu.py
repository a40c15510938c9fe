"""Benchmark /v1/rerank end to end: 1 query x 100 documents of 128 tokens; prints a table.

    .venv/bin/python -P benchmarks/rerank_cpu.py [--requests 30] [--documents 100] [--servers 1]
        [--model DIR] [--task auto] [--device cuda]
    .venv/bin/python -P benchmarks/rerank_cpu.py --server 127.0.0.1:50051 \
        --gateway http://127.0.0.1:8080

It follows the model's task (benchmarks/tasks.py: a running server's Info, else `--task`, else
the checkpoint's): an embedding model ranks by cosine (Score calls), a cross-encoder (task
rerank) scores each query-document pair (Rerank calls, the pairs encoded with the tokenizer's
pair template and token types); a sparse model has no ranking and is refused, as is a `--task`
the server does not serve.

Unless `--server` and `--gateway` are given, starts `--servers` `hedgerow server` processes
(`--model`, by default the packaged all-MiniLM-L6-v2, on `--device`, by default the CPU) and
one `hedgerow gateway` (default chunk budget, 2048 tokens, so 100 x 128 tokens travel as
several Score calls spread over the servers) on free loopback ports. The model's tokenizer
must split the words below into one token each (BERT's WordPiece vocabulary does). Every
document tokenizes to exactly `--tokens` tokens (special tokens included; the texts are
single-token words, checked with the gateway's tokenizer). Then, after
a warm-up, `--requests` sequential requests each way, interleaved so drift hits both alike:
  - through the gateway: POST /v1/rerank with the texts (JSON, tokenization, chunking, Score
    calls, merge, JSON back), top_n 10; the HTTP client (httpx) is part of the path;
  - straight to one server: one Score call with all the token ids (a cross-encoder: one Rerank
    call with every pair's ids and token types; no gateway, no chunking).
Reports p50 and p99 of each, and the pairs (documents) scored per second at the p50. Client,
gateway and servers share this machine's cores: on a small or busy machine the numbers are
noisy and pessimistic.
"""

import argparse
import sys
import time
from pathlib import Path

import grpc
import httpx
import numpy as np

from hedgerow.bench import tasks
from hedgerow.bench.processes import at_least, free_port, grpc_serving, start, stop, wait
from hedgerow.defaults import default_model_path
from hedgerow.gateway.tokenizer import TextTokenizer
from hedgerow.wire import embed_pb2, embed_pb2_grpc

MODEL = "all-MiniLM-L6-v2"
QUERY = "which shrubs make a good hedge for nesting birds?"
WORDS = ("hawthorn hazel field margin robin ditch bank lane oak ash holly rose meadow sheep "
         "wall gate badger bird nest tree green water stone river hill road farm").split()


def ready(url: str, replicas: int) -> bool:
    try:
        answer = httpx.get(url + "/readyz", timeout=1)
    except httpx.HTTPError:
        return False
    return answer.status_code == 200 and len(answer.json()["ready_replicas"]) >= replicas


def documents(tokenizer: TextTokenizer, count: int, tokens: int) -> list[str]:
    """`count` texts of exactly `tokens` tokens each (single-token words), all different."""
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=tokens - 2)) for _ in range(count)]
    lengths = np.asarray(tokenizer.encode_sync(texts, "", 100_000, False).lengths)
    if not (lengths == tokens).all():
        raise SystemExit(f"documents tokenize to {sorted(set(lengths.tolist()))} tokens, "
                         f"not {tokens}: a word in WORDS is not a single token")
    return texts


def percentiles(samples: list[float]) -> tuple[float, float]:
    values = np.asarray(samples) * 1000.0
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def score_request(tokenizer: TextTokenizer, texts: list[str], top_n: int):
    """An embedding model's Score call: the query, then the documents; and its token count."""
    query = tokenizer.encode_sync([QUERY], "", 512, False)
    docs = tokenizer.encode_sync(texts, "", 512, False)
    ids = np.concatenate([np.asarray(query.input_ids), np.asarray(docs.input_ids)]).astype("<i4")
    lengths = np.concatenate([query.lengths, docs.lengths])
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype("<i4")
    return embed_pb2.ScoreRequest(input_ids=ids.tobytes(), cu_seqlens=cu.tobytes(),
                                  top_n=top_n), int(lengths.sum())


def rerank_request(tokenizer: TextTokenizer, texts: list[str], top_n: int):
    """A cross-encoder's Rerank call: each (query, document) pair as the gateway encodes it;
    and its token count."""
    pairs = tokenizer.encode_pairs_sync(QUERY, texts, 512, False)
    cu = np.asarray(pairs.starts(), dtype="<i4")
    return embed_pb2.RerankRequest(
        input_ids=np.asarray(pairs.input_ids, dtype="<i4").tobytes(), cu_seqlens=cu.tobytes(),
        token_type_ids=np.asarray(pairs.type_ids, dtype="<i4").tobytes(),
        top_n=top_n), pairs.total_tokens


def measure(server: str, gateway: str, tokenizer: TextTokenizer, texts: list[str],
            requests: int, top_n: int, task: str):
    request, tokens = (rerank_request if task == "rerank" else score_request)(
        tokenizer, texts, top_n)
    body = {"model": MODEL, "query": QUERY, "documents": texts, "top_n": top_n}
    direct, through = [], []
    with grpc.insecure_channel(server, options=[("grpc.max_send_message_length", -1)]) as channel, \
            httpx.Client(base_url=gateway, timeout=300) as http:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        call = stub.Rerank if task == "rerank" else stub.Score
        for _ in range(3):  # warm-up: connections, caches, the engine's first shapes
            want = list(call(request, timeout=300).indices)
            answer = http.post("/v1/rerank", json=body)
            answer.raise_for_status()
        got = [result["index"] for result in answer.json()["results"]]
        if got != want:
            raise SystemExit(f"gateway ranked {got}, the server alone {want}")
        for _ in range(requests):
            started = time.perf_counter()
            call(request, timeout=300)
            direct.append(time.perf_counter() - started)
            started = time.perf_counter()
            http.post("/v1/rerank", json=body).raise_for_status()
            through.append(time.perf_counter() - started)
    return direct, through, tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=at_least(1), default=30)
    parser.add_argument("--documents", type=at_least(1), default=100)
    parser.add_argument("--tokens", type=at_least(2), default=128, help="tokens per document")
    parser.add_argument("--top-n", type=at_least(1), default=10)
    parser.add_argument("--servers", type=at_least(1), default=1, help="servers to start")
    parser.add_argument("--cpu-threads", type=at_least(0), default=0,
                        help="--cpu-threads of each started server (0: torch's default)")
    parser.add_argument("--model", type=Path, help="model directory (default: the packaged model)")
    parser.add_argument("--task", choices=tasks.CHOICES, default="auto",
                        help="the model's task (auto: a running --server's, else the "
                             "checkpoint's); the started servers get it as --task")
    parser.add_argument("--device", default="cpu", help="the started servers' device")
    parser.add_argument("--server", help="a running server's gRPC host:port")
    parser.add_argument("--gateway", help="a running gateway's URL in front of --server")
    args = parser.parse_args()

    model = args.model or default_model_path()
    running = args.server if args.server and args.gateway else None
    task = tasks.resolve(args.task, model, running)
    tasks.refuse("rerank-cpu", task, ("embed", "rerank"),
                 "it serves lexical weights, no ranking (time its EmbedSparse calls with "
                 "server-cpu)")
    tokenizer = TextTokenizer(model, threads=1)
    texts = documents(tokenizer, args.documents, args.tokens)
    children = []
    try:
        server, gateway = args.server, args.gateway
        if not (server and gateway):
            addresses = []
            for _ in range(args.servers):
                port, http_port = free_port(), free_port()
                addresses.append(f"127.0.0.1:{port}")
                children.append(start(["server", "--model", str(model), "--task", task,
                                       "--device", args.device,
                                       "--host", "127.0.0.1", "--port", str(port),
                                       "--http-port", str(http_port), "--cpu-threads",
                                       str(args.cpu_threads)]))
                wait("server", children[-1], lambda: grpc_serving(addresses[-1]))
            server, gw_port = addresses[0], free_port()
            gateway = f"http://127.0.0.1:{gw_port}"
            children.append(start(["gateway", "--model", str(model), "--served-model-name",
                                   MODEL, "--servers", ",".join(addresses), "--port",
                                   str(gw_port)]))
            wait("gateway", children[-1], lambda: ready(gateway, len(addresses)))
        direct, through, tokens = measure(server, gateway, tokenizer, texts, args.requests,
                                          args.top_n, task)
    finally:
        for child in reversed(children):
            stop(child)
        tokenizer.close()

    d50, d99 = percentiles(direct)
    g50, g99 = percentiles(through)
    where = f"{args.servers} server(s)" if not args.server else "the given server"
    name = args.model.name if args.model else MODEL
    kind = "a cross-encoder (task rerank)" if task == "rerank" else "cosine (task embed)"
    call = "Rerank" if task == "rerank" else "Score"
    print(f"\nRerank on {args.device}, {name}: 1 query x {args.documents} documents of "
          f"{args.tokens} tokens ({tokens} tokens), top_n {args.top_n}, {where}, "
          f"{kind}, {args.requests} sequential requests each way (noisy on a shared machine)\n")
    print("| path | p50 ms | p99 ms | pairs/s at p50 |\n| --- | ---: | ---: | ---: |")
    print(f"| POST /v1/rerank through the gateway (texts, chunked {call} calls, merge) "
          f"| {g50:.1f} | {g99:.1f} | {args.documents / g50 * 1000:.0f} |")
    ids = "pair token ids and types" if task == "rerank" else "token ids"
    print(f"| one {call} call straight to a server ({ids}) | {d50:.1f} | {d99:.1f} "
          f"| {args.documents / d50 * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
