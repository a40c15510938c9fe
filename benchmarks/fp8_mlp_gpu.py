"""BGE-M3's MLP in FP8 with the GELU and the quantization in the up product's epilogue
(kernels/fp8_mlp.py), against the row-wise FP8 MLP and bf16.

    python -P benchmarks/fp8_mlp_gpu.py [--out DIR] [--tokens 2048,8192,16384] [--sweep]

Runs on a CUDA machine with FP8 tensor cores (compute capability 8.9 or newer). Per token count,
BGE-M3's MLP shape (hidden 1,024, intermediate 4,096), bf16 in and out, µs per call as the
median of CUDA-graph replays of 10 calls, each MLP under torch.compile as the engine runs it:

- `bf16`: the up product with cuBLASLt's bias + GELU epilogue, the down product with its bias;
- `rows`: row-wise scales throughout, the engine's previous FP8 MLP: `torch._scaled_mm` up
  (bias in its epilogue, bf16 out), kernels/gelu_quantize.py, `torch._scaled_mm` down;
- `blocks`: the input's row-wise quantization, then kernels/fp8_mlp.py's two kernels;
- the parts: each of the two kernels alone, and `torch._scaled_mm`'s up and down products on
  the same operands (row-wise scales).

Each MLP's output is compared with the float32 MLP (smallest cosine over rows), and each
kernel's with its plain-torch reference, before timing. `--sweep` first times the up kernel's
tile configurations (128 or 256 columns a tile, per-thread loads or tensor descriptors) at the
largest token count and runs the table with the fastest. Writes OUT/fp8_mlp_gpu.json and prints a table last.
"""

import argparse
import itertools
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hedgerow.bench.engine_gpu import graph_time_us
from hedgerow.engine.cuda_linear import LinearGelu
from hedgerow.kernels import fp8_mlp, fp8_mlp_triton
from hedgerow.kernels.gelu_quantize import gelu_quantize_rows, quantize_rows

HIDDEN, INTERMEDIATE = 1024, 4096


def _weights():
    torch.manual_seed(0)
    up = nn.Linear(HIDDEN, INTERMEDIATE).cuda().bfloat16()
    down = nn.Linear(INTERMEDIATE, HIDDEN).cuda().bfloat16()
    with torch.no_grad():
        up.weight.mul_(0.5)
    quantized = {}
    for name, linear in (("up", up), ("down", down)):
        values, scales = quantize_rows(linear.weight.detach())
        quantized[name] = (values, scales.t().contiguous(), linear.bias.detach())
    # the down weight with one scale per 128 x 128 block, for cuBLAS's block-scaled product
    quantized["down blocks"] = (*fp8_mlp.quantize_weight_blocks(down.weight),
                                down.bias.detach())
    return up, down, quantized


def sweep(tokens: int, quantized) -> dict:
    """The fastest tile configurations of the up kernel at `tokens` rows (the down kernel keeps
    DOWN_CONFIG, the fastest of an earlier sweep: cuBLAS's block-scaled product is its
    replacement)."""
    x_values, x_scales = quantize_rows(torch.randn(tokens, HIDDEN, device="cuda",
                                                   dtype=torch.bfloat16))
    config = fp8_mlp_triton.UP_CONFIG
    timings = []
    for block_m, block_n, stages, tma in itertools.product((64, 128), (128, 256), (3, 4),
                                                           (False, True)):
        trial = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": 128, "GROUP_M": 8,
                 "num_stages": stages, "num_warps": 8, "TMA": tma}
        config.clear()
        config.update(trial)
        try:
            timings.append((graph_time_us(lambda: fp8_mlp.up_gelu_quantize(
                x_values, x_scales, *quantized["up"], "tanh"), calls=10), trial))
        except Exception as error:  # noqa: BLE001 (a tile may not fit shared memory)
            print(f"up {trial}: {type(error).__name__}", flush=True)
    timings.sort(key=lambda t: t[0])
    config.clear()
    config.update(timings[0][1])
    print(f"up: fastest {timings[0][1]} {timings[0][0]:.1f} µs", flush=True)
    return {"up": [{"us": round(us, 1), **trial} for us, trial in timings[:6]]}


def _scaled_mm(values, scales, weight_values, weight_scales, bias):
    """A row-wise scaled FP8 product with its bias, bf16 out (the engine's QKV product)."""
    return torch._scaled_mm(values, weight_values.t(), scale_a=scales, scale_b=weight_scales,
                            bias=bias, out_dtype=torch.bfloat16)


def _min_cosine(got, want):
    return F.cosine_similarity(got.float(), want, dim=-1).min().item()


def cells(tokens: list[int], up, down, quantized) -> list[dict]:
    up_gelu = LinearGelu(up)
    mlp_bf16 = torch.compile(lambda x: down(up_gelu(x)), dynamic=False)

    def rows_mlp(x):
        before_gelu = _scaled_mm(*quantize_rows(x), *quantized["up"])
        return _scaled_mm(*gelu_quantize_rows(before_gelu, "tanh"), *quantized["down"])

    def blocks(x):
        values, scales = fp8_mlp.up_gelu_quantize(*quantize_rows(x), *quantized["up"], "tanh")
        return fp8_mlp.down_product(values, scales, *quantized["down"], x.dtype)

    mlp_rows = torch.compile(rows_mlp, dynamic=False)
    mlp_blocks = torch.compile(blocks, dynamic=False)

    def blocks_cublas(x):
        values, scales = fp8_mlp.up_gelu_quantize(*quantize_rows(x), *quantized["up"], "tanh")
        return fp8_mlp.down_product_blocks(values, scales, *quantized["down blocks"], x.dtype)

    mlp_blocks_cublas = torch.compile(blocks_cublas, dynamic=False)
    rows = []
    for t in tokens:
        x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.bfloat16)
        x_values, x_scales = quantize_rows(x)
        values, scales = fp8_mlp.up_gelu_quantize(x_values, x_scales, *quantized["up"], "tanh")
        want_values, want_scales = fp8_mlp.up_gelu_quantize_reference(
            x_values, x_scales, *quantized["up"], "tanh")
        row_values, row_scales = gelu_quantize_rows(
            _scaled_mm(x_values, x_scales, *quantized["up"]), "tanh")
        reference = F.linear(F.gelu(F.linear(x.float(), up.weight.float(), up.bias.float()),
                                    approximate="tanh"), down.weight.float(), down.bias.float())
        down_out = fp8_mlp.down_product(values, scales, *quantized["down"], torch.bfloat16)
        down_want = fp8_mlp.down_product_reference(values, scales, *quantized["down"],
                                                   torch.float32)
        row = {
            "tokens": t,
            "up scales max rel diff": ((scales - want_scales).abs()
                                       / want_scales).max().item(),
            "up bytes differing": (values.view(torch.uint8)
                                   != want_values.view(torch.uint8)).float().mean().item(),
            "down min cosine to reference": _min_cosine(down_out, down_want),
        }
        with torch.inference_mode():
            for name, fn in {
                "bf16": lambda: mlp_bf16(x),
                "rows": lambda: mlp_rows(x),
                "blocks": lambda: mlp_blocks(x),
            }.items():
                row[f"{name} min cosine"] = _min_cosine(fn(), reference)
                row[name] = graph_time_us(fn, calls=10)
            for name, fn in {
                "up kernel": lambda: fp8_mlp.up_gelu_quantize(x_values, x_scales,
                                                              *quantized["up"], "tanh"),
                "down kernel": lambda: fp8_mlp.down_product(values, scales,
                                                            *quantized["down"], torch.bfloat16),
                "up _scaled_mm": lambda: _scaled_mm(x_values, x_scales, *quantized["up"]),
                "down _scaled_mm": lambda: _scaled_mm(row_values, row_scales,
                                                      *quantized["down"]),
            }.items():
                row[name] = graph_time_us(fn, calls=10)
            try:
                row["down _scaled_mm blocks min cosine"] = _min_cosine(
                    fp8_mlp.down_product_blocks(values, scales, *quantized["down blocks"],
                                                torch.bfloat16), down_want)
                row["down _scaled_mm blocks"] = graph_time_us(
                    lambda: fp8_mlp.down_product_blocks(values, scales,
                                                        *quantized["down blocks"],
                                                        torch.bfloat16), calls=10)
                row["blocks + cuBLAS min cosine"] = _min_cosine(mlp_blocks_cublas(x), reference)
                row["blocks + cuBLAS"] = graph_time_us(lambda: mlp_blocks_cublas(x), calls=10)
            except (RuntimeError, ValueError) as error:  # report it and go on
                row["down _scaled_mm blocks"] = f"{type(error).__name__}: {error}"[:300]
        rows.append(row)
        print(f"{t} tokens done", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-out"))
    parser.add_argument("--tokens", default="2048,8192,16384")
    parser.add_argument("--sweep", action="store_true",
                        help="time the up kernel's tile configurations first and use the fastest")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tokens = [int(t) for t in args.tokens.split(",")]
    up, down, quantized = _weights()
    result = {"sweep": sweep(max(tokens), quantized) if args.sweep else None,
              "up config": dict(fp8_mlp_triton.UP_CONFIG),
              "down config": dict(fp8_mlp_triton.DOWN_CONFIG)}
    result["rows"] = cells(tokens, up, down, quantized)
    (args.out / "fp8_mlp_gpu.json").write_text(json.dumps(result, indent=1))
    print(f"\nup {result['up config']}\ndown {result['down config']}")
    names = ("bf16", "rows", "blocks", "up kernel", "up _scaled_mm", "down kernel",
             "down _scaled_mm")
    print(f"{'tokens':>6} " + " ".join(f"{n + ' µs':>17}" for n in names)
          + f" {'cos bf16/rows/blocks':>26}")
    for r in result["rows"]:
        print(f"{r['tokens']:>6} " + " ".join(f"{r[n]:>17.1f}" for n in names)
              + f" {r['bf16 min cosine']:>8.5f}/{r['rows min cosine']:.5f}/"
              f"{r['blocks min cosine']:.5f}")
        print(f"{'':>6} down _scaled_mm with 1x128 / 128x128 blocks: "
              f"{r['down _scaled_mm blocks']} µs, min cosine "
              f"{r.get('down _scaled_mm blocks min cosine')}; the MLP with it: "
              f"{r.get('blocks + cuBLAS')} µs, min cosine {r.get('blocks + cuBLAS min cosine')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
