"""The GELU and row-wise FP8 quantization of an up product: the Triton kernel against Inductor,
and BGE-M3's whole MLP in FP8 against bf16.

    python -P benchmarks/gelu_quantize_gpu.py [--out DIR] [--tokens 2048,8192,16384]

Runs on a CUDA machine with FP8 tensor cores (compute capability 8.9 or newer). Per token count,
BGE-M3's MLP shape (hidden 1,024, intermediate 4,096), bf16 in, µs per call as the median of
CUDA-graph replays of 10 calls:

- `inductor`: the reference (GELU, then quantize_rows) under torch.compile: what the first
  FP8 MLP ran, fused by Inductor;
- `kernel`: kernels/gelu_quantize.py;
- `cast`: a plain e4m3 cast of the same [T, 4,096] bf16 tensor, which reads and writes the same
  bytes once: the floor;
- `mlp bf16`: the engine's bf16 MLP (the up product with cuBLASLt's bias + GELU epilogue, the
  down product with its bias), under torch.compile;
- `mlp fp8`: engine/fp8_linear.py's Fp8Mlp from the quantization of its input on, under
  torch.compile (which fuses that quantization into one kernel; in the engine it joins the
  LayerNorm's).

The kernel's bytes are checked against the reference's before timing. Writes
OUT/gelu_quantize_gpu.json and prints a table last.
"""

import argparse
import json
from pathlib import Path

import torch
from torch import nn

from hedgerow.bench.engine_gpu import graph_time_us
from hedgerow.engine.cuda_linear import LinearGelu
from hedgerow.engine.fp8_linear import Fp8Mlp
from hedgerow.kernels.gelu_quantize import gelu_quantize_rows, gelu_quantize_rows_reference

HIDDEN, INTERMEDIATE = 1024, 4096


def cells(tokens: list[int]) -> list[dict]:
    inductor = torch.compile(gelu_quantize_rows_reference, dynamic=False)
    torch.manual_seed(0)
    up = LinearGelu(nn.Linear(HIDDEN, INTERMEDIATE).cuda().bfloat16())
    down = nn.Linear(INTERMEDIATE, HIDDEN).cuda().bfloat16()
    # compiled, as the engine runs them: Inductor fuses the input's quantization into one kernel
    mlp_bf16 = torch.compile(lambda x: down(up(x)), dynamic=False)
    mlp_fp8 = torch.compile(Fp8Mlp(up, down, min_tokens=1), dynamic=False)
    rows = []
    for t in tokens:
        y = torch.randn(t, INTERMEDIATE, device="cuda", dtype=torch.bfloat16) * 3
        x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.bfloat16)
        got, want = gelu_quantize_rows(y, "tanh"), gelu_quantize_rows_reference(y, "tanh")
        differ = (got[0].view(torch.uint8) != want[0].view(torch.uint8)).float().mean().item()
        row = {"tokens": t, "bytes differing": differ}
        with torch.inference_mode():
            for name, fn in {
                "inductor": lambda: inductor(y, "tanh"),
                "kernel": lambda: gelu_quantize_rows(y, "tanh"),
                "cast": lambda: y.to(torch.float8_e4m3fn),
                "mlp bf16": lambda: mlp_bf16(x),
                "mlp fp8": lambda: mlp_fp8(x),
            }.items():
                row[name] = graph_time_us(fn, calls=10)
        rows.append(row)
        print(f"{t} tokens done", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-out"))
    parser.add_argument("--tokens", default="2048,8192,16384")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = cells([int(t) for t in args.tokens.split(",")])
    (args.out / "gelu_quantize_gpu.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'tokens':>6} {'inductor µs':>11} {'kernel µs':>9} {'cast µs':>7} "
          f"{'mlp bf16 µs':>11} {'mlp fp8 µs':>10} {'mlp ratio':>9} {'bytes differing':>15}")
    for r in rows:
        print(f"{r['tokens']:>6} {r['inductor']:>11.1f} {r['kernel']:>9.1f} {r['cast']:>7.1f} "
              f"{r['mlp bf16']:>11.1f} {r['mlp fp8']:>10.1f} "
              f"{r['mlp bf16'] / r['mlp fp8']:>8.2f}x {r['bytes differing']:>15.5f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
