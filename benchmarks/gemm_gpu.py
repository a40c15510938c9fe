"""The MLP's products with their epilogues, as the engine runs them against QuACK's fused GEMMs.

    python -P benchmarks/gemm_gpu.py [--out DIR] [--tokens 128,512,...]
                                     [--tuned | --fp8 | --small-m | --l2]

Runs on a CUDA machine with `quack-kernels`; the numbers in docs/benchmarks.md are one H200.
Per token count M, bf16, random weights of the real shapes, µs per call as the median of
CUDA-graph replays (each side warmed, and so compiled, before capture):

- Qwen3-0.6B's gate/up product and SwiGLU (K 1,024, N 2 × 3,072): what the compiled engine
  runs (cuBLAS writes [M, 6,144], an Inductor kernel reads it back for `silu(gate) * up`)
  against QuACK's `gemm_act(..., activation="swiglu")`, which applies the gate in the product's
  epilogue and writes only [M, 3,072]. QuACK's gated epilogue pairs neighbouring columns, so its
  weight rows are gate and up interleaved (done once, at load, by whoever adopts it).
- BGE-M3's up product and GELU (K 1,024, N 4,096, with bias): the engine's cuBLASLt epilogue
  (`torch._addmm_activation(use_gelu=True)`, tanh GELU) against QuACK's
  `gemm_act(activation="gelu_tanh_approx")`.
- The plain products of both shapes (QKV, output, down) through cuBLAS and QuACK's `gemm`.

With `--fp8`, instead: every product of a layer of both shapes in bf16 against FP8 e4m3 with
row-wise scales (`torch._scaled_mm`, bf16 out, the activation already quantized), the time of
quantizing that activation as a kernel of its own (compiled), and FP8's relative error, also
with `use_fast_accum` (the sums kept in the tensor cores' own accumulator).

With `--small-m`, instead: BGE-M3's four products at the given (small) token counts, cuBLAS
against a plain Triton tile GEMM with its bias, the best of a dozen tile shapes, each side
reading its weights from HBM as in the model (CUDA-graph replays of 24 calls, each on its own
copy of the weights, as 24 layers): does a hand-built product beat cuBLAS's floor at M = 128?

With `--l2`, instead: BGE-M3's 24 layers of products at the given token counts as the engine
runs them (QKV, output + residual, up with the GELU epilogue, down + residual; attention and
norms left out), one CUDA graph per case: weights cold (24 copies, read from HBM), hot (one
copy 24 times, so read from L2: the bound for any prefetch), and cold with the next weights
prefetched into L2 (`cp.async.bulk.prefetch.L2`, which needs no registers and outlives its
kernel) at three points of each layer. Is a product at M = 128 slow because of HBM?

Each QuACK result is checked against the plain-torch formula first (max |difference| printed).
Also printed: the first call's time (QuACK compiles a kernel per configuration). Writes
OUT/gemm_gpu.json and prints a table last.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from hedgerow.bench import engine_gpu
from hedgerow.engine.cuda_linear import interleave_rows


def graph_time_us(fn) -> float:
    return engine_gpu.graph_time_us(fn, calls=10)


def first_call_s(fn) -> float:
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def cells(tokens: list[int], tuned: bool):
    from quack.gemm_interface import gemm, gemm_act

    def swiglu_engine(x, w):
        gate, up = F.linear(x, w).chunk(2, dim=-1)
        return F.silu(gate) * up

    swiglu_compiled = torch.compile(swiglu_engine, dynamic=False)
    rows = []
    dev = "cuda"
    for m in tokens:
        torch.manual_seed(m)
        x = torch.randn(m, 1024, device=dev, dtype=torch.bfloat16)
        # Qwen3-0.6B gate/up + SwiGLU
        w = torch.randn(6144, 1024, device=dev, dtype=torch.bfloat16) * 0.03
        wi = interleave_rows(w)
        ref = swiglu_engine(x.float(), w.float())

        def q_swiglu():
            return gemm_act(x, wi.t(), activation="swiglu", store_preact=False,
                            tuned=tuned)[1]
        first = first_call_s(q_swiglu)
        diff = (q_swiglu().float() - ref).abs().max().item()
        rows.append(dict(M=m, op="qwen3 gate_up+swiglu", engine=graph_time_us(
            lambda: swiglu_compiled(x, w)), quack=graph_time_us(q_swiglu), first_s=first,
            max_diff=diff, engine_diff=(swiglu_compiled(x, w).float() - ref).abs().max().item()))
        # BGE-M3 up + GELU (bias)
        w = torch.randn(4096, 1024, device=dev, dtype=torch.bfloat16) * 0.03
        b = torch.randn(4096, device=dev, dtype=torch.bfloat16) * 0.1
        ref = F.gelu(F.linear(x.float(), w.float(), b.float()), approximate="tanh")

        def q_gelu():
            return gemm_act(x, w.t(), bias=b, activation="gelu_tanh_approx",
                            store_preact=False, tuned=tuned)[1]
        first = first_call_s(q_gelu)
        diff = (q_gelu().float() - ref).abs().max().item()
        lt = lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True)  # noqa: E731
        rows.append(dict(M=m, op="bge-m3 up+gelu", engine=graph_time_us(lt),
                         quack=graph_time_us(q_gelu), first_s=first, max_diff=diff,
                         engine_diff=(lt().float() - ref).abs().max().item()))
        # plain products: (name, N, K)
        for name, n, k in (("bge-m3 qkv", 3072, 1024), ("bge-m3 down", 1024, 4096),
                           ("qwen3 qkv", 4096, 1024), ("qwen3 o", 1024, 2048),
                           ("qwen3 down", 1024, 3072)):
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.03
            ref = F.linear(a.float(), w.float())

            def q_plain(a=a, w=w):
                return gemm(a, w.t(), tuned=tuned)
            first = first_call_s(q_plain)
            rows.append(dict(M=m, op=name, engine=graph_time_us(lambda: F.linear(a, w)),
                             quack=graph_time_us(q_plain), first_s=first,
                             max_diff=(q_plain().float() - ref).abs().max().item(),
                             engine_diff=(F.linear(a, w).float() - ref).abs().max().item()))
        print(f"M={m} done", flush=True)
    return rows


# Each layer's products (name, K, N) of both shapes, for the FP8 comparison.
PRODUCTS = (("bge-m3 qkv", 1024, 3072), ("bge-m3 out", 1024, 1024), ("bge-m3 up", 1024, 4096),
            ("bge-m3 down", 4096, 1024), ("qwen3 qkv", 1024, 4096), ("qwen3 o", 2048, 1024),
            ("qwen3 gate_up", 1024, 6144), ("qwen3 down", 3072, 1024))
FP8 = torch.float8_e4m3fn


def quantize_rows(x):
    """Row-wise e4m3: (values [M, K], scales float32 [M, 1]) with x ~ values * scales."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / torch.finfo(FP8).max
    return (x / scale).to(FP8), scale


def fp8_cells(tokens: list[int]):
    """bf16 `F.linear` against `torch._scaled_mm` (e4m3, row-wise scales, bf16 out) with the
    activation already quantized, and what quantizing it costs as a kernel of its own."""
    quantize = torch.compile(quantize_rows, dynamic=False)
    # one compile per activation shape: past Dynamo's default limit of 8 it would run eagerly
    torch._dynamo.config.recompile_limit = 4 * len(PRODUCTS) * len(tokens)
    rows = []
    for m in tokens:
        for name, k, n in PRODUCTS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.03
            xq, xs = quantize(x)
            wq, ws = quantize_rows(w)
            ws = ws.t().contiguous()

            def fp8(xq=xq, xs=xs, wq=wq, ws=ws, fast=False):
                return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws,
                                        out_dtype=torch.bfloat16, use_fast_accum=fast)

            def fast(fp8=fp8):
                return fp8(fast=True)
            ref = F.linear(x.float(), w.float())
            rows.append(dict(M=m, op=name, bf16=graph_time_us(lambda x=x, w=w: F.linear(x, w)),
                             fp8=graph_time_us(fp8), fp8_fast=graph_time_us(fast),
                             quantize=graph_time_us(lambda x=x: quantize(x)),
                             fp8_diff=((fp8().float() - ref).norm() / ref.norm()).item(),
                             fast_diff=((fast().float() - ref).norm() / ref.norm()).item()))
        print(f"M={m} done", flush=True)
    return rows


def print_fp8(rows) -> None:
    print(f"\n{'op':16} {'M':>6} {'bf16 µs':>8} {'fp8 µs':>7} {'speed-up':>8} "
          f"{'fast µs':>7} {'quantize µs':>11} {'rel. error':>10} {'fast error':>10}")
    for r in rows:
        print(f"{r['op']:16} {r['M']:>6} {r['bf16']:>8.1f} {r['fp8']:>7.1f} "
              f"{r['bf16'] / r['fp8']:>7.2f}x {r['fp8_fast']:>7.1f} {r['quantize']:>11.1f} "
              f"{r['fp8_diff']:>10.4f} {r['fast_diff']:>10.4f}")


def print_quack(rows) -> None:
    print(f"\n{'op':24} {'M':>6} {'engine µs':>10} {'QuACK µs':>9} {'speed-up':>8} "
          f"{'first s':>8} {'|d| quack':>9} {'|d| eng':>8}")
    for r in rows:
        print(f"{r['op']:24} {r['M']:>6} {r['engine']:>10.1f} {r['quack']:>9.1f} "
              f"{r['engine'] / r['quack']:>7.2f}x {r['first_s']:>8.2f} {r['max_diff']:>9.4f} "
              f"{r['engine_diff']:>8.4f}")


LAYERS = 24  # --small-m: weight copies a replay cycles through, so each call reads HBM
TILES = ((128, 32, 128, 4, 4), (128, 64, 64, 4, 4), (128, 64, 128, 4, 3), (64, 64, 128, 4, 4),
         (64, 32, 128, 4, 5), (64, 32, 256, 4, 3), (32, 64, 128, 4, 4), (32, 32, 256, 4, 4),
         (64, 128, 64, 4, 4), (16, 64, 256, 4, 3), (16, 32, 512, 4, 3), (64, 64, 64, 4, 6))


@triton.jit
def _tile_linear(a_ptr, w_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr):
    """c = a w^T + b, one [BM, BN] tile a program; N and K multiples of the tile."""
    rows = tl.program_id(1) * BM + tl.arange(0, BM)
    cols = tl.program_id(0) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    a_at = a_ptr + rows[:, None] * K + ks[None, :]
    w_at = w_ptr + cols[None, :] * K + ks[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc = tl.dot(tl.load(a_at, mask=rows[:, None] < M, other=0.0), tl.load(w_at), acc)
        a_at += BK
        w_at += BK
    acc += tl.load(b_ptr + cols).to(tl.float32)[None, :]
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=rows[:, None] < M)


def tile_linear(x, w, b, tile):
    bm, bn, bk, warps, stages = tile
    out = x.new_empty((x.shape[0], w.shape[0]))
    _tile_linear[(w.shape[0] // bn, triton.cdiv(x.shape[0], bm))](
        x, w, b, out, x.shape[0], w.shape[0], x.shape[1], BM=bm, BN=bn, BK=bk,
        num_warps=warps, num_stages=stages)
    return out


def small_m_cells(tokens: list[int]):
    """cuBLAS against the best tile of `tile_linear`, weights read from HBM."""
    rows = []
    for m in tokens:
        for name, k, n in PRODUCTS[:4]:  # BGE-M3's
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
                  for _ in range(LAYERS)]
            bs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(LAYERS)]
            ref = F.linear(x.float(), ws[0].float(), bs[0].float())

            def timed(fn):  # µs a call, the calls cycling through the weight copies
                return engine_gpu.graph_time_us(
                    lambda: [fn(ws[i], bs[i]) for i in range(LAYERS)]) / LAYERS
            best = (float("inf"), None, None)
            for tile in TILES:
                diff = (tile_linear(x, ws[0], bs[0], tile).float() - ref).abs().max().item()
                t = timed(lambda w, b, tile=tile: tile_linear(x, w, b, tile))
                best = min(best, (t, tile, diff), key=lambda r: r[0])
            rows.append(dict(M=m, op=name, cublas=timed(lambda w, b: F.linear(x, w, b)),
                             triton=best[0], tile=best[1], max_diff=best[2]))
        print(f"M={m} done", flush=True)
    return rows


def print_small_m(rows) -> None:
    print(f"\n{'op':12} {'M':>5} {'cuBLAS µs':>9} {'Triton µs':>9} {'speed-up':>8}  best tile "
          f"(BM, BN, BK, warps, stages)  max diff")
    for r in rows:
        print(f"{r['op']:12} {r['M']:>5} {r['cublas']:>9.2f} {r['triton']:>9.2f} "
              f"{r['cublas'] / r['triton']:>7.2f}x  {str(r['tile']):34} {r['max_diff']:.4f}")


@triton.jit
def _prefetch_l2(table, SUB: tl.constexpr, THREADS: tl.constexpr):
    """Bulk-prefetch segment program_id(1) of `table` (int64 [segments, 2]: address, bytes)
    into L2, SUB bytes a thread; a hint, so a tail under 16 bytes is skipped."""
    base = tl.load(table + 2 * tl.program_id(1))
    nbytes = tl.load(table + 2 * tl.program_id(1) + 1)
    start = (tl.program_id(0).to(tl.int64) * (SUB * THREADS)
             + tl.arange(0, THREADS).to(tl.int64) * SUB)
    size = tl.minimum(tl.maximum(nbytes - start, 0), SUB).to(tl.int32) // 16 * 16
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [base + start, size], dtype=tl.int32, is_pure=False, pack=1)


def prefetcher(tensors):
    """A call that prefetches `tensors` (which must outlive it) into L2, one launch."""
    sub, threads = 4096, 128
    table = torch.tensor([[t.data_ptr(), t.numel() * t.element_size()] for t in tensors],
                         dtype=torch.int64, device="cuda")
    grid = (triton.cdiv(int(table[:, 1].max()), sub * threads), len(tensors))
    return lambda: _prefetch_l2[grid](table, SUB=sub, THREADS=threads, num_warps=threads // 32)


def l2_cells(tokens: list[int]):
    """µs for 24 layers of BGE-M3's products: cold, hot, and cold with prefetches."""
    h, qkv_n = PRODUCTS[0][1:]  # BGE-M3's hidden size and QKV width
    ff = PRODUCTS[2][2]         # and its MLP width

    def weights(n, k):
        return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02

    layers = [dict(qkv=weights(qkv_n, h), o=weights(h, h), up=weights(ff, h),
                   down=weights(h, ff), bias=torch.zeros(ff, device="cuda",
                                                         dtype=torch.bfloat16))
              for _ in range(LAYERS)]
    for i, w in enumerate(layers):
        after = layers[(i + 1) % LAYERS]
        w["rest"] = prefetcher([w["o"], w["up"], w["down"], after["qkv"]])
        w["first"] = prefetcher([w["o"], w["up"]])
        w["second"] = prefetcher([w["down"], after["qkv"]])
        w["next"] = prefetcher([after[k] for k in ("qkv", "o", "up", "down")])
    plans = {  # case: (layers, prefetch at layer start, prefetch after the output product)
        "cold": (layers, None, None),
        "hot (L2)": ([layers[0]] * LAYERS, None, None),
        "prefetch rest of layer + next QKV at start": (layers, "rest", None),
        "prefetch in two halves": (layers, "first", "second"),
        "prefetch whole next layer at start": (layers, "next", None)}
    rows = []
    for m in tokens:
        x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)

        def forward(plan):
            ws, at_start, after_out = plan
            y = x
            for w in ws:
                if at_start:
                    w[at_start]()
                q = F.linear(y, w["qkv"], w["bias"][:qkv_n])[:, :h]
                o = F.linear(q, w["o"], w["bias"][:h]) + y
                if after_out:
                    w[after_out]()
                u = torch._addmm_activation(w["bias"], o, w["up"].t(), use_gelu=True)
                y = F.linear(u, w["down"], w["bias"][:h]) + o
            return y
        same = all(torch.equal(forward(plans["cold"]), forward(plan))
                   for name, plan in plans.items() if name.startswith("prefetch"))
        times = {name: [] for name in plans}
        for _ in range(3):  # rounds, cases interleaved
            for name, plan in plans.items():
                times[name].append(engine_gpu.graph_time_us(lambda plan=plan: forward(plan)))
        cold = statistics.median(times["cold"])
        for name in plans:
            us = statistics.median(times[name])
            rows.append(dict(M=m, case=name, us=us, per_layer=us / LAYERS, vs_cold=cold / us,
                             same_output=same))
        print(f"M={m} done", flush=True)
    return rows


def print_l2(rows) -> None:
    print(f"\n{'M':>5} {'case':44} {'µs, 24 layers':>13} {'a layer':>8} {'cold / case':>11}")
    for r in rows:
        print(f"{r['M']:>5} {r['case']:44} {r['us']:>13.1f} {r['per_layer']:>8.2f} "
              f"{r['vs_cold']:>10.2f}x")
    print("outputs with prefetches equal to cold:", all(r["same_output"] for r in rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-out"))
    parser.add_argument("--tokens", default="128,512,1024,2048,4096,8192")
    parser.add_argument("--tuned", action="store_true",
                        help="let QuACK autotune each shape (slow first calls)")
    parser.add_argument("--fp8", action="store_true",
                        help="instead: every layer product in bf16 against FP8 (e4m3, row-wise "
                        "scales), and the cost of quantizing its activation")
    parser.add_argument("--small-m", action="store_true",
                        help="instead: BGE-M3's products, cuBLAS against a plain Triton tile "
                        "GEMM, weights read from HBM (use with --tokens 64,128)")
    parser.add_argument("--l2", action="store_true",
                        help="instead: BGE-M3's 24 layers of products with weights in HBM, in "
                        "L2, and prefetched into L2 ahead (use with --tokens 128,512)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tokens = [int(t) for t in args.tokens.split(",")]
    if args.l2:
        measure, name, show = l2_cells, "gemm_l2.json", print_l2
    elif args.small_m:
        measure, name, show = small_m_cells, "gemm_small_m.json", print_small_m
    elif args.fp8:
        measure, name, show = fp8_cells, "gemm_fp8.json", print_fp8
    else:
        measure, name, show = (lambda t: cells(t, args.tuned)), "gemm_gpu.json", print_quack
    rows = measure(tokens)
    (args.out / name).write_text(json.dumps(rows, indent=1))
    show(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
