"""An FP8 GELU MLP's up product with the GELU and the quantization in its epilogue
(kernels/fp8_up_gelu.py) against cuBLAS's FP8 up product alone, and BGE-M3's whole MLP in FP8
against bf16.

    python -P benchmarks/fp8_up_gelu_gpu.py [--out DIR] [--tokens 2048,8192,16384] [--sweep]
        [--rounds 3]

Runs on a CUDA machine with FP8 tensor cores (compute capability 8.9 or newer). Per token count,
BGE-M3's MLP shape (hidden 1,024, intermediate 4,096), µs per call as the median of CUDA-graph
replays of 10 calls, the rounds interleaved:

- `up kernel`: kernels/fp8_up_gelu.py on quantized operands (e4m3 out);
- `up cuBLAS`: `torch._scaled_mm`'s up product with its bias alone (bf16 out, no GELU, no
  quantization): the floor the kernel's product part is held to;
- `mlp bf16`: the engine's bf16 MLP (the up product with cuBLASLt's bias + GELU epilogue);
- `mlp fp8`: engine/fp8_linear.py's Fp8Mlp from the quantization of its input on, under
  torch.compile.

Before timing, the kernel's bytes are checked against its reference, and each MLP's output
against the float32 MLP (smallest cosine over rows). `--sweep` first times the kernel's tile
configurations (128-row tiles: 64 rows were slower on an H100; one program a tile or one or two
an SM walking the tiles) at the largest token count and runs the table with the fastest.
Writes OUT/fp8_up_gelu_gpu.json and prints a table last.
"""

import argparse
import itertools
import json
import statistics
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from hedgerow.bench.engine_gpu import graph_time_us
from hedgerow.engine import fp8_linear
from hedgerow.engine.cuda_linear import LinearGelu
from hedgerow.kernels import fp8_up_gelu_triton
from hedgerow.kernels.fp8_up_gelu import (quantize_rows, up_gelu_quantize,
                                          up_gelu_quantize_reference)

HIDDEN, INTERMEDIATE = 1024, 4096


def _mlps():
    torch.manual_seed(0)
    up = LinearGelu(nn.Linear(HIDDEN, INTERMEDIATE).cuda().bfloat16())
    down = nn.Linear(INTERMEDIATE, HIDDEN).cuda().bfloat16()
    wrapper = fp8_linear.Fp8Mlp(up, down, min_tokens=1)
    mlps = {"mlp bf16": torch.compile(lambda x: down(up(x)), dynamic=False),
            "mlp fp8": torch.compile(wrapper, dynamic=False)}
    return up, down, mlps, wrapper


def _up_operands(wrapper, x):
    x_values, x_scales = quantize_rows(x)
    return (x_values, x_scales, wrapper.up_fp8, wrapper.up_scale, wrapper.up.bias,
            wrapper.up_scales(x))


def sweep(tokens: int, wrapper) -> list[dict]:
    """The kernel's tile configurations at `tokens` rows, fastest first; CONFIG becomes the
    fastest."""
    operands = _up_operands(wrapper, torch.randn(tokens, HIDDEN, device="cuda",
                                                 dtype=torch.bfloat16))
    timings = []
    for block_n, stages, warps, per_sm in itertools.product((128, 256), (3, 4), (4, 8),
                                                            (0, 1, 2)):
        trial = {"BLOCK_M": 128, "BLOCK_N": block_n, "BLOCK_K": 128, "GROUP_M": 8,
                 "num_stages": stages, "num_warps": warps, "PROGRAMS_PER_SM": per_sm}
        with mock.patch.dict(fp8_up_gelu_triton.CONFIG, trial):
            try:
                timings.append((graph_time_us(lambda: up_gelu_quantize(*operands, "tanh"),
                                              calls=10), trial))
            except Exception as error:  # noqa: BLE001 (a tile may not fit shared memory)
                print(f"{trial}: {type(error).__name__}", flush=True)
    timings.sort(key=lambda t: t[0])
    fp8_up_gelu_triton.CONFIG.update(timings[0][1])
    print(f"fastest {timings[0][1]} {timings[0][0]:.1f} µs", flush=True)
    return [{"us": round(us, 1), **trial} for us, trial in timings[:8]]


def cells(tokens: list[int], rounds: int, up, down, mlps, wrapper) -> list[dict]:
    rows = []
    for t in tokens:
        x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.bfloat16)
        operands = _up_operands(wrapper, x)
        got = up_gelu_quantize(*operands, "tanh").view(torch.uint8)
        want = up_gelu_quantize_reference(*operands, "tanh").view(torch.uint8)
        reference = F.linear(F.gelu(F.linear(x.float(), up.weight.float(), up.bias.float()),
                                    approximate="tanh"), down.weight.float(), down.bias.float())
        row = {"tokens": t, "bytes differing": (got != want).float().mean().item()}
        timed = {
            "up kernel": lambda: up_gelu_quantize(*operands, "tanh"),
            "up cuBLAS": lambda: torch._scaled_mm(
                operands[0], wrapper.up_fp8.t(), scale_a=operands[1], scale_b=wrapper.up_scale,
                bias=up.bias, out_dtype=torch.bfloat16, use_fast_accum=True),
            **{name: (lambda mlp=mlp: mlp(x)) for name, mlp in mlps.items()},
        }
        with torch.inference_mode():
            for name, mlp in mlps.items():
                row[f"{name} min cosine"] = F.cosine_similarity(
                    mlp(x).float(), reference, dim=-1).min().item()
            times = {name: [] for name in timed}
            for _ in range(rounds):
                for name, fn in timed.items():
                    times[name].append(graph_time_us(fn, calls=10))
        row.update({name: statistics.median(values) for name, values in times.items()})
        row["by round"] = {name: [round(v, 1) for v in values] for name, values in times.items()}
        rows.append(row)
        print(f"{t} tokens done", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-out"))
    parser.add_argument("--tokens", default="2048,8192,16384")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sweep", action="store_true",
                        help="time the kernel's tile configurations first and use the fastest")
    args = parser.parse_args()
    try:
        tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        parser.error(f"--tokens must be comma-separated integers, got {args.tokens!r}")
    if min(tokens) < 1 or args.rounds < 1:
        parser.error("--tokens and --rounds must be positive")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        parser.error("needs a CUDA GPU with FP8 tensor cores (compute capability 8.9 or newer)")
    args.out.mkdir(parents=True, exist_ok=True)
    up, down, mlps, wrapper = _mlps()
    result = {"sweep": sweep(max(tokens), wrapper) if args.sweep else None}
    result["config"] = dict(fp8_up_gelu_triton.CONFIG)
    result["rows"] = cells(tokens, args.rounds, up, down, mlps, wrapper)
    (args.out / "fp8_up_gelu_gpu.json").write_text(json.dumps(result, indent=1))
    print(f"\ntiles {result['config']}")
    names = ("up kernel", "up cuBLAS", "mlp bf16", "mlp fp8")
    print(f"{'tokens':>6} " + " ".join(f"{n + ' µs':>13}" for n in names)
          + f" {'cos bf16/fp8':>17} {'bytes differing':>15}")
    for r in result["rows"]:
        print(f"{r['tokens']:>6} " + " ".join(f"{r[n]:>13.1f}" for n in names)
              + f" {r['mlp bf16 min cosine']:>8.5f}/{r['mlp fp8 min cosine']:.5f}"
              f" {r['bytes differing']:>15.5f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
