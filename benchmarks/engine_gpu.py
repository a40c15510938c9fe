"""The GPU engine alone against `transformers` eager, random weights of real shapes, bf16.

    python -P benchmarks/engine_gpu.py [--out DIR] [--models DIR] [--attention-sweep]
                                       [--compile [--compiled-only]] [--variant NAME]...
                                       [--analysis] [--only bge-m3] [--quick]

Runs on any CUDA machine; the issue's targets are for one H200. In order:

1. `--attention-sweep`: each CUDA attention backend (FA2 varlen, FlashAttention 4, flash-attn,
   padded SDPA, and cuDNN on uniform batches) per attention shape (BGE-M3: 16 heads of 64,
   bidirectional; Qwen3-0.6B: 16/8 heads of 128, causal and bidirectional) over (batch,
   length) cells, each call timed as a CUDA-graph replay with the `max_seqlen` the engine's
   graphs would give it; writes the choice table to OUT/attention_table.json and into the
   installed package, so the engine below uses it.
2. Per model shape (directories written by benchmarks/models.py, bf16, random weights), the
   engine with graphs and without torch.compile first:
   - a correctness gate first: our pooled embeddings (bf16, one ragged batch) against
     `transformers` in float32 on the same weights, one sequence at a time; cosine >= 0.999;
   - hot-set warmup: capture time and graph memory;
   - batch-1 latency p50/p99 at 128, 512 and 4096 tokens, from `step()` to the embedding in host
     memory (`synchronize()`), and the same for `transformers` eager (bf16, sdpa) including
     `.cpu()`;
   - 100 x 512 bulk throughput (embeddings/s): the engine fed back to back on token budgets
     of 8192 and 2048 (graphs) and as one 51,200-token batch (eager), and `transformers` as one
     [100, 512] batch;
   - overlap: CUDA events on the engine stream around 50 back-to-back 1 x 512 steps and the
     8192-budget bulk run give the device's idle time between steps;
   - with `--analysis`: sequence-count buckets against exact counts (the same batch in a
     graph with B slots and with the next power of two);
   - with `--compile`, after both models: the engine as served (torch.compile under the
     graphs) in each `--variant` (VARIANTS below: `fa2` the engine before FlashAttention 4
     and cuDNN, `auto` the measured table, `auto+gelu` with the GELU epilogue too,
     `auto+gelu+quack` with QuACK's fused MLP products too (the defaults),
     `max-autotune` Inductor's GEMM templates, `float8` the defaults with `--dtype float8`,
     `float8-qkv` that with only the QKV products in FP8, `float8-fast` / `float8-promoted`
     `float8` with the FP8 products' sums in the tensor cores' own accumulator / promoted to
     float32), `resident` the defaults with BERT-family layers at up to 128 tokens as one
     kernel launch (engine/resident.py)):
     gate (also on the gate's sequences three times over, 2,946 tokens, a batch wide enough
     for FP8, and on each sequence alone, the small batches' path), compile time, latency, a
     16 x 512 scoring step and 8192-budget bulk throughput; with `--analysis` also the kernels one
     graph replay launches (count, per layer, each kernel's time) at 1 x 128 and 16 x 512.
     `--compiled-only` skips the uncompiled engine and `transformers` (step 2 but its gate).
Writes OUT/engine_gpu.json and prints a table last. Numbers depend on the GPU and its clocks.
"""

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

import torch

from hedgerow.bench import models as shapes  # noqa: E402
EMBEDDING_SHAPES = tuple(s for s in shapes.SHAPES if s not in shapes.RERANKERS)

from hedgerow.engine import attention_cuda, fp8_linear, resident  # noqa: E402
from hedgerow.engine.attention_cuda import AttentionTable, Cell, shape_key  # noqa: E402
from hedgerow.engine.batch import RaggedBatch  # noqa: E402
from hedgerow.engine.engine import Engine  # noqa: E402
from hedgerow.engine.gpu import stepper_for  # noqa: E402
from hedgerow.engine.loader import load_model  # noqa: E402
from hedgerow.gpu_settings import GpuSettings  # noqa: E402
from hedgerow.kernels.ragged_attention import reference_attention  # noqa: E402

TARGETS = {  # the targets for the engine alone on one H200
    "bge-m3": {"p50_128": 0.8, "p50_512": 1.2, "p50_4096": 8.0, "bulk": 1700},
    "qwen3-0.6b": {"p50_128": 1.2, "p50_512": 2.0, "p50_4096": 14.0, "bulk": 1000},
}
ATTENTION_SHAPES = [(16, 16, 64, False), (16, 8, 128, True), (16, 8, 128, False)]
HOT_SET = ("1x128", "1x512", "1x4096", "16x8192", "4x2048", "1x64", "2x1024")


def log(*parts) -> None:
    print(*parts, flush=True)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def graph_time_us(fn, reps: int = 20, calls: int = 1) -> float:
    """Median microseconds of one call of `fn`, timed as CUDA-graph replays of `calls` calls
    (more than one spreads a replay's launch over short kernels)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    return statistics.median(times)


# -- 1. attention sweep -----------------------------------------------------------------------

def _check_backends(backends, q_heads, kv_heads, head_dim, causal, key):
    """The backends that agree with the float64 reference on this shape: ragged ones on a
    ragged batch with an empty sequence, uniform-only ones on a uniform batch."""
    correct = {}
    for name, fn in backends.items():
        lengths = [77, 77, 77] if name in attention_cuda.UNIFORM_ONLY else [5, 0, 77, 128, 1]
        bound = 77 if name in attention_cuda.UNIFORM_ONLY else 256
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
        q = torch.randn(sum(lengths), q_heads, head_dim, dtype=torch.bfloat16)
        k = torch.randn(sum(lengths), kv_heads, head_dim, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        ref = reference_attention(q.double(), k.double(), v.double(), cu, max(lengths), causal)
        try:
            out = fn(q.cuda(), k.cuda(), v.cuda(), cu.cuda(), bound, causal).cpu().double()
            error = ((out - ref).norm() / ref.norm()).item()
        except RuntimeError as failure:
            error = float("inf")
            log(f"  {key} {name}: failed the check ({failure})")
        log(f"  {key} {name}: relative error vs float64 {error:.2e}")
        if error < 2e-2:
            correct[name] = fn
    return correct


def sweep_bound(name: str, batch: int, length: int, grid_max: int = 8192) -> int:
    """The `max_seqlen` the engine gives a backend for this cell: a uniform configuration's
    exact length; in a grid configuration the bucket's token count (BGE-M3 and Qwen3 accept
    sequences that long); past the grid, the batch's own longest."""
    total = batch * length
    if name in attention_cuda.UNIFORM_ONLY or total > grid_max:
        return length
    return total


def cell_time_us(fn) -> float:
    """One call's time as the engine sees it: a short call (under 100 µs) is timed as one of 20
    in a graph, since a lone call's launch (about 10-18 µs) would hide its kernel; in a model's
    graph each layer's call follows the previous kernel at once."""
    alone = graph_time_us(fn)
    return graph_time_us(fn, calls=20) if alone < 100 else alone


def attention_sweep(quick: bool) -> AttentionTable:
    backends = attention_cuda.available_backends()
    batches = [1, 2, 4, 8, 16, 64] if not quick else [1, 16]
    lengths = [64, 128, 512, 2048, 4096] if not quick else [128, 512]
    table: dict[str, list[Cell]] = {}
    for q_heads, kv_heads, head_dim, causal in ATTENTION_SHAPES:
        key = shape_key(q_heads, kv_heads, head_dim, causal)
        cells = []
        correct = _check_backends(backends, q_heads, kv_heads, head_dim, causal, key)
        for batch in batches:
            for length in lengths:
                if batch * length > 65536:
                    continue
                total = batch * length
                q = torch.randn(total, q_heads, head_dim, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(total, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)
                cu = torch.arange(0, total + 1, length, dtype=torch.int32, device="cuda")
                times = {}
                for name, fn in correct.items():
                    if name in attention_cuda.UNIFORM_ONLY and batch == 1:
                        continue  # one sequence always runs in a grid configuration
                    bound = sweep_bound(name, batch, length)
                    try:
                        times[name] = round(cell_time_us(
                            lambda: fn(q, k, v, cu, bound, causal)), 2)
                    except (RuntimeError, torch.OutOfMemoryError) as error:
                        log(f"  {key} {batch}x{length} {name}: failed ({error})")
                cells.append(Cell(batch, length, times))
                log(f"  attention {key:28s} batch {batch:3d} len {length:5d} " +
                    " ".join(f"{n}={t:.1f}us" for n, t in times.items()))
        table[key] = cells
    # What a graph's fixed max_seqlen costs: 16 x 512 with max_seqlen 512 against 8192.
    q = torch.randn(8192, 16, 64, device="cuda", dtype=torch.bfloat16)
    cu = torch.arange(0, 8193, 512, dtype=torch.int32, device="cuda")
    for name, fn in backends.items():
        if name == "sdpa" or name in attention_cuda.UNIFORM_ONLY:
            continue
        try:
            tight = graph_time_us(lambda: fn(q, q, q, cu, 512, False))
            loose = graph_time_us(lambda: fn(q, q, q, cu, 8192, False))
        except RuntimeError as error:
            log(f"  max_seqlen cost, {name}: failed ({error})")
            continue
        log(f"  max_seqlen cost, {name} 16 x 512 d64: max_seqlen 512 {tight:.1f} us, "
            f"8192 {loose:.1f} us")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d"), "unit": "microseconds per call, median of "
            "20 CUDA-graph replays (of 20 calls below 100 us); ragged backends with the "
            "max_seqlen the engine's graphs give them (the bucket's tokens up to 8192), cudnn "
            "on uniform batches only",
            "command": "python -P benchmarks/engine_gpu.py --attention-sweep"}
    return AttentionTable(table, meta)


# -- 2. per model -----------------------------------------------------------------------------

def random_sequences(lengths, vocab, seed):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]


def reference_pooled(model, sequences, pooling):
    """transformers, one sequence at a time (no padding), pooled like ours; float32 [B, H]."""
    rows = []
    with torch.inference_mode():
        for seq in sequences:
            ids = torch.tensor([seq], device="cuda")
            hidden = model(input_ids=ids).last_hidden_state[0].float()
            rows.append({"cls": hidden[0], "last": hidden[-1], "mean": hidden.mean(0)}[pooling])
    return torch.stack(rows).cpu()


def time_engine(engine, batch, iters):
    """(p50, p99) ms from step() to the embedding in host memory."""
    for _ in range(5):
        engine.step(batch).synchronize()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        engine.step(batch).synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return percentile(times, 50), percentile(times, 99)


def time_parts(engine, batch, iters=50):
    """Median host microseconds for step() to return, and median device ms of the captured
    graph's replay alone (events around `graph.replay()`), for a batch already captured."""
    stepper = engine._gpu
    config = stepper.cache.grid.config_for(batch.num_seqs, batch.num_tokens)
    host = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start = time.perf_counter()
        lazy = engine.step(batch)
        host.append((time.perf_counter() - start) * 1e6)
        lazy.synchronize()
    static = stepper._static.get(config)
    if static is None or static.graph is None:
        return statistics.median(host), float("nan")
    replay = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stepper.stream):
            start.record()
            static.graph.replay()
            end.record()
        end.synchronize()
        replay.append(start.elapsed_time(end))
    return statistics.median(host), statistics.median(replay)


def time_transformers(model, ids, pooling, iters):
    def once():
        with torch.inference_mode():
            hidden = model(input_ids=ids).last_hidden_state
            pooled = hidden[:, 0] if pooling == "cls" else hidden[:, -1]
            return pooled.float().cpu()
    for _ in range(3):
        once()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        once()
        times.append((time.perf_counter() - start) * 1e3)
    return percentile(times, 50), percentile(times, 99)


def bulk_engine(engine, sequences, budget_tokens, events=None):
    """Embeddings/s for all `sequences` fed back to back on a token budget."""
    per_step = max(1, budget_tokens // len(sequences[0]))
    batches = [RaggedBatch.from_sequences(sequences[i:i + per_step])
               for i in range(0, len(sequences), per_step)]

    def run(record):
        lazies = []
        for batch in batches:
            if record is not None:
                before = torch.cuda.Event(enable_timing=True)
                before.record(engine._gpu.stream)
            lazies.append(engine.step(batch))
            if record is not None:
                after = torch.cuda.Event(enable_timing=True)
                after.record(engine._gpu.stream)
                record.append((before, after))
        return [lazy.synchronize() for lazy in lazies]

    for _ in range(3):  # warm: eager, capture, replay
        run(None)
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        run(None)
        times.append(time.perf_counter() - start)
    if events is not None:
        run(events)
    return len(sequences) / statistics.median(times)


def idle_between(pairs):
    """Device idle (ms) between consecutive steps: (total, max) over the recorded pairs."""
    gaps = [max(0.0, pairs[i][1].elapsed_time(pairs[i + 1][0])) for i in range(len(pairs) - 1)]
    busy = sum(b.elapsed_time(a) for b, a in pairs)
    return sum(gaps), max(gaps) if gaps else 0.0, busy


def overlap_small_steps(engine, sequence, count=50):
    batch = RaggedBatch.from_sequences([sequence])
    for _ in range(3):
        engine.step(batch).synchronize()
    pairs, lazies = [], []
    torch.cuda.synchronize()
    for _ in range(count):
        before = torch.cuda.Event(enable_timing=True)
        before.record(engine._gpu.stream)
        lazies.append(engine.step(batch))
        after = torch.cuda.Event(enable_timing=True)
        after.record(engine._gpu.stream)
        pairs.append((before, after))
    for lazy in lazies:
        lazy.synchronize()
    # the first step's start is behind nothing; gaps after it say whether the host kept up
    return idle_between(pairs)


def seq_bucket_cost(directory, vocab):
    """Replay ms of one batch in a graph with exactly B slots vs the next power of two."""
    loaded = load_model(directory, device="cuda", dtype="bfloat16")
    exact = stepper_for(loaded, GpuSettings(graph_seq_buckets=(), graph_hot_set=(),
                                            compile=False))
    bucketed = stepper_for(loaded, GpuSettings(graph_hot_set=(), compile=False))
    rows = []
    for total in (512, 4096):
        for count in (3, 5, 12, 33):
            per = total // count
            batch = RaggedBatch.from_sequences(random_sequences([per] * count, vocab, count))
            result = {"tokens": per * count, "seqs": count}
            for name, stepper in (("exact", exact), ("bucketed", bucketed)):
                for _ in range(3):
                    stepper.step(batch).synchronize()
                times = []
                for _ in range(20):
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record(stepper.stream)
                    stepper.step(batch)
                    end.record(stepper.stream)
                    end.synchronize()
                    times.append(start.elapsed_time(end))
                result[name + "_ms"] = round(statistics.median(times), 4)
            rows.append(result)
            log(f"  seq buckets: {count:2d} seqs {per * count:5d} tokens exact "
                f"{result['exact_ms']:.3f} ms, bucketed {result['bucketed_ms']:.3f} ms")
    return rows


def kernel_profile(directory, seqs, length, vocab, settings: GpuSettings):
    """Kernels one forward launches as the engine serves it (`settings`: compiled or not,
    under a CUDA graph), for `seqs` sequences of `length` tokens: the count, the count per
    layer and every kernel's time. Profiles the fourth step, a replay of the captured graph
    (the profiler sees each kernel of a replayed graph)."""
    from torch.profiler import ProfilerActivity, profile

    loaded = load_model(directory, device="cuda", dtype="bfloat16")
    layers = len(loaded.model.layers)
    stepper = stepper_for(loaded, replace(settings, graph_hot_set=()))
    batch = RaggedBatch.from_sequences(random_sequences([length] * seqs, vocab, 9))
    for _ in range(3):  # eager, capture + replay, replay
        stepper.step(batch).synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        stepper.step(batch).synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    by_name: dict[str, list[float]] = {}
    for event in kernels:
        spent = getattr(event, "device_time", None)
        if spent is None:
            spent = event.cuda_time
        by_name.setdefault(event.name[:70], []).append(spent)
    total = sum(sum(v) for v in by_name.values())
    by_time = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    del stepper, loaded
    torch.cuda.empty_cache()
    return {"seqs": seqs, "length": length, "tokens": seqs * length, "kernels": len(kernels),
            "layers": layers,
            "per_layer": round(len(kernels) / layers, 2), "device_us": round(total, 1),
            "by_time": [{"name": n, "count": len(v), "us": round(sum(v), 1)} for n, v in by_time]}


def gate_reference(directory, vocab, pooling):
    """The gate's sequences and `transformers`' float32 embeddings of them, [B, H]."""
    import transformers

    reference = transformers.AutoModel.from_pretrained(
        str(directory), dtype=torch.float32, attn_implementation="sdpa").cuda().eval()
    gate_seqs = random_sequences([128, 37, 512, 5, 300], vocab, 1)
    ref = reference_pooled(reference, gate_seqs, pooling)
    del reference
    torch.cuda.empty_cache()
    return ref, gate_seqs


def model_facts(directory):
    """(vocab size, pooling) of a model directory written by benchmarks/models.py."""
    from hedgerow.model_files import read_sentence_transformers

    vocab = json.loads((directory / "config.json").read_text())["vocab_size"]
    return vocab, read_sentence_transformers(directory).pooling or "cls"


def bench_model(name, directory, args, results):
    import transformers

    row = {"model": name}
    results[name] = row
    engine = Engine.load(directory, device="cuda", dtype="bfloat16",
                         gpu_settings=GpuSettings(graph_hot_set=HOT_SET, compile=False))
    vocab, pooling = engine.info.vocab_size, engine.info.pooling

    # correctness gate first
    ref, gate_seqs = gate_reference(directory, vocab, pooling)
    cosines = []
    for _ in range(3):  # the graph cache's three states: eager, capture + replay, replay
        ours = engine.step(RaggedBatch.from_sequences(gate_seqs)).synchronize()
        cosines.append(torch.nn.functional.cosine_similarity(ours, ref, dim=-1))
    cosine = torch.cat(cosines)
    row["gate_min_cosine"] = round(cosine.min().item(), 6)
    row["gate_passed"] = bool(cosine.min().item() >= 0.999)
    log(f"{name}: correctness gate min cosine {row['gate_min_cosine']} "
        f"({'pass' if row['gate_passed'] else 'FAIL'})")

    start = time.perf_counter()
    engine.warmup()
    row["warmup_s"] = round(time.perf_counter() - start, 2)
    report = engine.warmup_report()
    row["warmup_report"] = {k: report[k] for k in ("captured", "hot_set_captured",
                                                    "graph_memory_bytes", "attention",
                                                    "capture_seconds_total")}
    log(f"{name}: warmup {row['warmup_s']} s, {report['captured']} graphs, "
        f"{report['graph_memory_bytes'] / 2**20:.0f} MiB, attention {report['attention']}")

    hf = transformers.AutoModel.from_pretrained(
        str(directory), dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    for length, iters in ((128, 300), (512, 300), (4096, 60)):
        seq = random_sequences([length], vocab, length)
        p50, p99 = time_engine(engine, RaggedBatch.from_sequences(seq), iters)
        hp50, hp99 = time_transformers(hf, torch.tensor(seq, device="cuda"), pooling,
                                       max(20, iters // 5))
        row[f"p50_{length}"], row[f"p99_{length}"] = round(p50, 3), round(p99, 3)
        row[f"hf_p50_{length}"], row[f"hf_p99_{length}"] = round(hp50, 3), round(hp99, 3)
        host_us, replay_ms = time_parts(engine, RaggedBatch.from_sequences(seq))
        row[f"host_us_{length}"], row[f"replay_ms_{length}"] = round(host_us, 1), round(
            replay_ms, 3)
        log(f"{name}: batch 1 x {length}: step() returns after {host_us:.0f} us on the host; "
            f"graph replay alone {replay_ms:.3f} ms on the device")
        log(f"{name}: batch 1 x {length}: engine p50 {p50:.3f} p99 {p99:.3f} ms; "
            f"transformers p50 {hp50:.3f} p99 {hp99:.3f} ms")

    bulk = random_sequences([512] * 100, vocab, 100)
    events: list = []
    row["bulk"] = round(bulk_engine(engine, bulk, 8192, events), 1)
    idle, worst, busy = idle_between(events)
    row["bulk_idle_ms"], row["bulk_max_gap_ms"] = round(idle, 4), round(worst, 4)
    row["bulk_busy_ms"] = round(busy, 3)
    row["bulk_2048"] = round(bulk_engine(engine, bulk, 2048), 1)
    row["bulk_one_batch"] = round(bulk_engine(engine, bulk, 51200), 1)
    with torch.inference_mode():
        ids = torch.tensor(bulk, device="cuda")
        for _ in range(2):
            hf(input_ids=ids).last_hidden_state[:, 0].float().cpu()
        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            start = time.perf_counter()
            hf(input_ids=ids).last_hidden_state[:, 0].float().cpu()
            times.append(time.perf_counter() - start)
    row["hf_bulk"] = round(100 / statistics.median(times), 1)
    log(f"{name}: 100 x 512: engine {row['bulk']} emb/s (8192-token steps; idle between "
        f"steps {idle:.3f} ms of {busy:.1f} ms busy, max gap {worst:.3f} ms), "
        f"{row['bulk_2048']} (2048-token steps), {row['bulk_one_batch']} (one batch, eager); "
        f"transformers {row['hf_bulk']}")
    del hf
    torch.cuda.empty_cache()

    idle, worst, busy = overlap_small_steps(engine, random_sequences([512], vocab, 5)[0])
    row["overlap_1x512"] = {"idle_ms": round(idle, 4), "max_gap_ms": round(worst, 4),
                            "busy_ms": round(busy, 3), "steps": 50}
    log(f"{name}: 50 back-to-back 1 x 512 steps: device idle {idle:.4f} ms between steps "
        f"(max gap {worst:.4f} ms) over {busy:.2f} ms busy")

    if args.analysis:
        row["seq_buckets"] = seq_bucket_cost(directory, vocab)
    row["engine_report"] = {k: v for k, v in engine.warmup_report().items()
                            if k not in ("attention",)}
    del engine
    torch.cuda.empty_cache()
    return ref, gate_seqs


# The served engine (torch.compile under the graphs) in variants that add one setting each,
# so one run compares them: `fa2` is the engine before FlashAttention 4 and cuDNN (FA2
# everywhere), `auto` the measured attention table, `auto+gelu` that plus the GELU epilogue,
# `auto+gelu+quack` that plus QuACK's fused MLP products (today's defaults).
_BARE = {"gelu_epilogue": False, "quack_mlp": False}
VARIANTS = {
    "fa2": {**_BARE, "attention_backend": "varlen"},
    "auto": _BARE,
    "auto+gelu": {**_BARE, "gelu_epilogue": True},
    "auto+gelu+quack": {"gelu_epilogue": True, "quack_mlp": True},
    "max-autotune": {"compile_mode": "max-autotune-no-cudagraphs"},
    "float8": {"gelu_epilogue": True, "quack_mlp": True},
    "float8-qkv": {"gelu_epilogue": True, "quack_mlp": True},
    "float8-fast": {"gelu_epilogue": True, "quack_mlp": True},
    "float8-promoted": {"gelu_epilogue": True, "quack_mlp": True},
    "resident": {"gelu_epilogue": True, "quack_mlp": True},
}
# Variants whose engine loads in another dtype than bfloat16.
VARIANT_DTYPES = {"float8": "float8", "float8-qkv": "float8", "float8-fast": "float8",
                  "float8-promoted": "float8"}
# Variants whose FP8 takes other products than engine/fp8_linear.py's FP8_PRODUCTS: the QKV
# products alone, its first version, measured beside the MLPs in FP8.
VARIANT_FP8_PRODUCTS = {"float8-qkv": ("qkv",)}
# Variants that set fp8_linear.FP8_FAST_ACCUM (the others take its default): whether the FP8
# products sum in the tensor cores' own accumulator or promote their sums to float32.
VARIANT_FP8_FAST_ACCUM = {"float8-fast": True, "float8-promoted": False}


def bench_compiled(name, directory, ref, gate_seqs, row, variant, analysis):
    """The engine as served (torch.compile under the graphs) with one variant's settings."""
    out = {}
    row.setdefault("variants", {})[variant] = out
    label = f"{name} [{variant}]"
    settings = GpuSettings(graph_hot_set=HOT_SET, compile=True, **VARIANTS[variant])
    start = time.perf_counter()
    try:
        dtype = VARIANT_DTYPES.get(variant, "bfloat16")
        products = VARIANT_FP8_PRODUCTS.get(variant, fp8_linear.FP8_PRODUCTS)
        fast = VARIANT_FP8_FAST_ACCUM.get(variant, fp8_linear.FP8_FAST_ACCUM)
        with mock.patch.object(fp8_linear, "FP8_PRODUCTS", products), \
                mock.patch.object(fp8_linear, "FP8_FAST_ACCUM", fast), \
                mock.patch.object(resident, "RESIDENT_LAYERS", variant == "resident"):
            engine = Engine.load(directory, device="cuda", dtype=dtype, gpu_settings=settings)
        vocab = engine.info.vocab_size
        cosines, wide = [], []
        for _ in range(3):
            ours = engine.step(RaggedBatch.from_sequences(gate_seqs)).synchronize()
            cosines.append(torch.nn.functional.cosine_similarity(ours, ref, dim=-1))
            # the same sequences three times over: past FP8_MIN_TOKENS, FP8's path
            ours = engine.step(RaggedBatch.from_sequences(gate_seqs * 3)).synchronize()
            wide.append(torch.nn.functional.cosine_similarity(ours, ref.repeat(3, 1), dim=-1))
        # each sequence alone: the small batches' path (the resident layers' up to 128 tokens)
        alone = torch.cat([engine.step(RaggedBatch.from_sequences([seq])).synchronize()
                           for seq in gate_seqs])
        engine.warmup()
    except (RuntimeError, ValueError, TypeError, AssertionError) as error:
        # reported in the results and the table: a variant may not run on this machine
        out["error"] = f"{type(error).__name__}: {error}"[:500]
        log(f"{label}: failed: {out['error']}")
        return
    out["compile_and_warmup_s"] = round(time.perf_counter() - start, 1)
    out["gate_min_cosine"] = round(torch.cat(cosines).min().item(), 6)
    out["gate_min_cosine_wide"] = round(torch.cat(wide).min().item(), 6)
    out["gate_min_cosine_alone"] = round(
        torch.nn.functional.cosine_similarity(alone, ref, dim=-1).min().item(), 6)
    log(f"{label}: gate min cosine {out['gate_min_cosine']} (wide batch "
        f"{out['gate_min_cosine_wide']}, each sequence alone {out['gate_min_cosine_alone']}), "
        f"compile + warmup {out['compile_and_warmup_s']} s")
    for length, iters in ((128, 300), (512, 300), (4096, 60)):
        batch = RaggedBatch.from_sequences(random_sequences([length], vocab, length))
        p50, p99 = time_engine(engine, batch, iters)
        host_us, replay_ms = time_parts(engine, batch)
        out[f"p50_{length}"], out[f"p99_{length}"] = round(p50, 3), round(p99, 3)
        out[f"replay_ms_{length}"] = round(replay_ms, 3)
        log(f"{label}: batch 1 x {length}: p50 {p50:.3f} p99 {p99:.3f} ms, replay "
            f"{replay_ms:.3f} ms, host {host_us:.0f} us")
    # a scoring request's step: 16 documents of 512 tokens (uniform: cuDNN where it wins)
    batch = RaggedBatch.from_sequences(random_sequences([512] * 16, vocab, 16))
    p50, p99 = time_engine(engine, batch, 100)
    out["p50_16x512"], out["p99_16x512"] = round(p50, 3), round(p99, 3)
    bulk = random_sequences([512] * 100, vocab, 100)
    out["bulk"] = round(bulk_engine(engine, bulk, 8192), 1)
    out["attention"] = engine.warmup_report()["attention"]
    log(f"{label}: 16 x 512 p50 {p50:.3f} ms; 100 x 512: {out['bulk']} emb/s (8192-token "
        f"steps); attention {out['attention']}")
    del engine
    torch.cuda.empty_cache()
    if analysis:
        # batch 1 at 128 tokens, and the scoring and bulk step (16 x 512, 8,192 tokens)
        out["profile"] = [kernel_profile(directory, b, n, vocab, settings)
                          for b, n in ((1, 128), (16, 512))]
        for prof in out["profile"]:
            log(f"{label}: graph replay at {prof['seqs']} x {prof['length']}: "
                f"{prof['kernels']} kernels ({prof['per_layer']} per layer), "
                f"{prof['device_us']} us device")
            for k in prof["by_time"][:12]:
                log(f"    {k['us']:9.1f} us {k['count']:4d}x {k['name']}")


def print_table(results):
    log("")
    log(f"{'model':11s} {'metric':26s} {'hedgerow':>18s} {'transformers':>18s} "
        f"{'target':>8s} met")
    for name, row in results.items():
        targets = TARGETS[name]
        if "p50_128" in row:  # not with --compiled-only
            print_uncompiled(name, row, targets)
        for variant, compiled in row.get("variants", {}).items():
            if "p50_128" not in compiled:
                log(f"{name:11s} {variant + ' failed':26s} {compiled.get('error', '')[:60]}")
                continue
            for length in (128, 512, 4096):
                target = targets[f"p50_{length}"]
                value, tail = compiled[f"p50_{length}"], compiled[f"p99_{length}"]
                metric = f"{variant} 1x{length} p50/p99"
                pair = f"{value:.3f} / {tail:.3f}"
                log(f"{name:11s} {metric:26s} {pair:>18s} {'':>18s} {target:>8} "
                    f"{'yes' if value <= target else 'no'}")
            pair = f"{compiled['p50_16x512']:.3f} / {compiled['p99_16x512']:.3f}"
            log(f"{name:11s} {variant + ' 16x512 p50/p99':26s} {pair:>18s}")
            met = "yes" if compiled["bulk"] >= targets["bulk"] else "no"
            log(f"{name:11s} {variant + ' 100x512 emb/s':26s} {compiled['bulk']:>18} "
                f"{row.get('hf_bulk', '-'):>18} {targets['bulk']:>8} {met}")
            log(f"{name:11s} {variant + ' gate min cosine':26s} "
                f"{compiled['gate_min_cosine']:>18}")
            log(f"{name:11s} {variant + ' gate, wide batch':26s} "
                f"{compiled['gate_min_cosine_wide']:>18}")
            log(f"{name:11s} {variant + ' gate, one a step':26s} "
                f"{compiled['gate_min_cosine_alone']:>18}")
            log(f"{name:11s} {variant + ' compile+warmup s':26s} "
                f"{compiled['compile_and_warmup_s']:>18}")
            for prof in compiled.get("profile", []):
                shape = f"{prof['seqs']}x{prof['length']}"
                log(f"{name:11s} {variant + ' kernels/layer ' + shape:26s} "
                    f"{prof['per_layer']:>18}")


def print_uncompiled(name, row, targets):
    """The table's rows for the uncompiled engine and `transformers` (not with
    --compiled-only)."""
    log(f"{name:11s} {'gate min cosine':26s} {row['gate_min_cosine']:>18} {'fp32 ref':>18s} "
        f"{'0.999':>8s} {'yes' if row['gate_passed'] else 'NO'}")
    for length in (128, 512, 4096):
        ours = f"{row[f'p50_{length}']:.3f} / {row[f'p99_{length}']:.3f}"
        theirs = f"{row[f'hf_p50_{length}']:.3f} / {row[f'hf_p99_{length}']:.3f}"
        target = targets[f"p50_{length}"]
        met = "yes" if row[f"p50_{length}"] <= target else "no"
        log(f"{name:11s} {f'graphs 1x{length} p50/p99 ms':26s} {ours:>18s} {theirs:>18s} "
            f"{target:>8} {met}")
    met = "yes" if row["bulk"] >= targets["bulk"] else "no"
    log(f"{name:11s} {'graphs 100x512 emb/s 8192':26s} {row['bulk']:>18} "
        f"{row['hf_bulk']:>18} {targets['bulk']:>8} {met}")
    log(f"{name:11s} {'100x512 emb/s (2048 steps)':26s} {row['bulk_2048']:>18}")
    log(f"{name:11s} {'100x512 emb/s (one batch)':26s} {row['bulk_one_batch']:>18}")
    o = row["overlap_1x512"]
    log(f"{name:11s} {'idle between 50 1x512 ms':26s} {o['idle_ms']:>18} "
        f"{'of ' + str(o['busy_ms']) + ' busy':>18s}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-out"))
    parser.add_argument("--models", type=Path, default=Path("/tmp/hedgerow-bench-models"))
    parser.add_argument("--attention-sweep", action="store_true")
    parser.add_argument("--only", choices=EMBEDDING_SHAPES, action="append")
    parser.add_argument("--sweep-only", action="store_true",
                        help="with --attention-sweep: stop after the sweep")
    parser.add_argument("--quick", action="store_true", help="fewer attention cells")
    parser.add_argument("--analysis", action="store_true",
                        help="also: sequence-bucket cost and kernel profiles")
    parser.add_argument("--compile", action="store_true",
                        help="also: the engine with torch.compile under the graphs")
    parser.add_argument("--compiled-only", action="store_true",
                        help="with --compile: skip the uncompiled engine and transformers' "
                        "timings (the gate's float32 reference still runs)")
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS),
                        help="with --compile: the served-engine variants to measure, in turn "
                        "(repeatable; default: auto)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        log("needs a CUDA device")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    import inspect
    from torch.nn.attention import varlen
    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "varlen_attn": str(inspect.signature(varlen.varlen_attn)),
           "backends": list(attention_cuda.available_backends()),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    log(json.dumps(env))
    results: dict = {"env": env}
    gates: dict = {}
    if args.attention_sweep:
        table = attention_sweep(args.quick)
        table.save(args.out / "attention_table.json")
        table.save(attention_cuda.TABLE_PATH)  # the installed package's table
        results["attention_table"] = str(args.out / "attention_table.json")
        if args.sweep_only:
            return 0
    for name in args.only or EMBEDDING_SHAPES:
        directory = args.models / name
        if not (directory / "config.json").is_file():
            start = time.perf_counter()
            shapes.write_model(name, directory)
            log(f"wrote {directory} in {time.perf_counter() - start:.1f} s")
        if args.compile and args.compiled_only:
            results[name] = {"model": name}
            gates[name] = gate_reference(directory, *model_facts(directory))
        else:
            gates[name] = bench_model(name, directory, args, results)
        (args.out / "engine_gpu.json").write_text(json.dumps(results, indent=1))
    if args.compile:
        for name, (ref, gate_seqs) in gates.items():
            for variant in args.variant or ["auto"]:
                bench_compiled(name, args.models / name, ref, gate_seqs, results[name], variant,
                               args.analysis)
                (args.out / "engine_gpu.json").write_text(json.dumps(results, indent=1))
    print_table({k: v for k, v in results.items() if k in EMBEDDING_SHAPES})
    return 0


if __name__ == "__main__":
    sys.exit(main())
