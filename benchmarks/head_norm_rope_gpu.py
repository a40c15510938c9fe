"""Qwen3's per-head RMSNorm + RoPE of queries and keys: the Triton kernel against Inductor.

    python -P benchmarks/head_norm_rope_gpu.py [--out DIR] [--tokens 128,2048,8192]

Runs on a CUDA machine; the numbers in docs/benchmarks.md are one H200. Per token count, the
Qwen3-0.6B shape (16 query, 8 key and 8 value heads of 128), bf16, µs per call as the median of
CUDA-graph replays of 10 calls:

- `inductor`: what the compiled engine ran before the kernel (commit 75be816): RMSNorm of the
  query and key views, then the rotation with bf16 cos/sin [T, 1, D], under torch.compile
  (Inductor writes one kernel for the queries and one for the keys);
- `inductor f32`: the kernel's reference (float32 math, one rounding) under torch.compile;
- `kernel`: kernels/head_norm_rope.py;
- `copy`: copying the same query and key heads out of the fused projection into contiguous
  tensors, the floor for a pass that reads and writes those bytes once.

Each result's largest difference from the float64 formula is printed beside its time. Writes
OUT/head_norm_rope_gpu.json and prints a table last.
"""

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from hedgerow.bench.engine_gpu import graph_time_us
from hedgerow.kernels.head_norm_rope import head_norm_rope, head_norm_rope_reference

NUM_Q, NUM_K, NUM_V, DIM, EPS = 16, 8, 8, 128, 1e-6


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def before(qkv, qw, kw, cos, sin):
    """The engine's math before the kernel, with cos/sin as it passed them ([T, 1, D], bf16)."""
    q, k = qkv[:, :NUM_Q], qkv[:, NUM_Q:NUM_Q + NUM_K]
    q, k = F.rms_norm(q, (DIM,), qw, EPS), F.rms_norm(k, (DIM,), kw, EPS)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def cells(tokens: list[int]) -> list[dict]:
    inductor = torch.compile(before, dynamic=False)
    inductor_f32 = torch.compile(head_norm_rope_reference, dynamic=False)
    rows = []
    for t in tokens:
        torch.manual_seed(t)
        qkv = torch.randn(t, NUM_Q + NUM_K + NUM_V, DIM, device="cuda", dtype=torch.bfloat16)
        qw, kw = (torch.rand(2, DIM, device="cuda", dtype=torch.bfloat16) + 0.5).unbind(0)
        angles = torch.arange(t, device="cuda", dtype=torch.float32)[:, None] * \
            1e6 ** (-torch.arange(0, DIM, 2, device="cuda") / DIM)
        cos, sin = angles.cos(), angles.sin()
        cos_d = torch.cat((cos, cos), dim=-1).bfloat16()[:, None]
        sin_d = torch.cat((sin, sin), dim=-1).bfloat16()[:, None]
        truth = head_norm_rope_reference(qkv.double(), qw.double(), kw.double(), cos.double(),
                                         sin.double(), NUM_Q, NUM_K, EPS)
        qk_out = torch.empty(t, NUM_Q + NUM_K, DIM, device="cuda", dtype=torch.bfloat16)
        sides = {
            "inductor": lambda: inductor(qkv, qw, kw, cos_d, sin_d),
            "inductor f32": lambda: inductor_f32(qkv, qw, kw, cos, sin, NUM_Q, NUM_K, EPS),
            "kernel": lambda: head_norm_rope(qkv, qw, kw, cos, sin, NUM_Q, NUM_K, EPS),
        }
        row = {"tokens": t}
        for name, fn in sides.items():
            got = fn()
            row[name] = graph_time_us(fn, calls=10)
            row[name + " max diff"] = max((g.double() - w).abs().max().item()
                                          for g, w in zip(got, truth))
        row["copy"] = graph_time_us(lambda: qk_out.copy_(qkv[:, :NUM_Q + NUM_K]), calls=10)
        rows.append(row)
        print(f"{t} tokens done", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-out"))
    parser.add_argument("--tokens", default="128,2048,8192")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = cells([int(t) for t in args.tokens.split(",")])
    (args.out / "head_norm_rope_gpu.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'tokens':>6} {'inductor µs':>11} {'inductor f32':>12} {'kernel µs':>9} "
          f"{'copy µs':>8} {'speed-up':>8} {'max diff inductor / kernel':>27}")
    for r in rows:
        print(f"{r['tokens']:>6} {r['inductor']:>11.1f} {r['inductor f32']:>12.1f} "
              f"{r['kernel']:>9.1f} {r['copy']:>8.1f} {r['inductor'] / r['kernel']:>7.2f}x "
              f"{r['inductor max diff']:>13.4f} / {r['kernel max diff']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
