"""cuDNN's ragged attention through its frontend (`torch.ops.cudnn.sdpa_fwd` with cu_seqlens,
from the `nvidia-cudnn-frontend` package, which the project does not install) against the
engine's ragged backends (FA2 varlen, FlashAttention 4 where it imports, the Triton kernel).

    python -P benchmarks/cudnn_ragged_gpu.py [--out DIR]

Runs on a CUDA GPU with `nvidia-cudnn-frontend` installed. For BGE-M3's attention (16 heads of
64, bidirectional) and Qwen3-0.6B's (16 query and 8 key heads of 128, causal): first cuDNN's
output against the float64 reference on lengths 5, 0, 77, 1 and 130 (an empty and a one-token
sequence), eager and replayed in a CUDA graph; then µs per call, the median of 20 replays of a
graph of 20 calls, as the engine's attention sweep times them, on uniform cells and ragged mixes
like real traffic, with the `max_seqlen` the engine's graphs give (the batch's tokens up to
8,192, else its longest sequence). A backend whose capture fails shows `nan` and its error.
Writes OUT/cudnn_ragged_gpu.json and prints a table last.
"""

import argparse
import importlib
import json
import random
from pathlib import Path

import torch

from hedgerow.bench.engine_gpu import graph_time_us
from hedgerow.engine import attention_cuda
from hedgerow.kernels.ragged_attention import reference_attention

SHAPES = {"bge-m3": (16, 16, 64, False), "qwen3": (16, 8, 128, True)}
_rng = random.Random(0)
MIXES = {
    "1x128": [128], "1x512": [512], "1x4096": [4096], "16x512": [512] * 16,
    "64x128": [128] * 64,
    "32 queries 8-64": [_rng.randint(8, 64) for _ in range(32)],
    "16 docs 100-512": [_rng.randint(100, 512) for _ in range(16)],
    "24 mixed 16-2048": [_rng.randint(16, 2048) for _ in range(24)],
    "4 long 1000-4096": [_rng.randint(1000, 4096) for _ in range(4)],
}


def cudnn_ragged(q, k, v, cu_seqlens, max_seqlen, causal):
    out, _ = torch.ops.cudnn.sdpa_fwd(
        q, k, v, q.shape[-1] ** -0.5, is_causal=causal, cu_seqlens_q=cu_seqlens,
        cu_seqlens_kv=cu_seqlens, max_seqlen_q=max_seqlen, max_seqlen_kv=max_seqlen,
        return_lse=False)
    return out


def cu_seqlens_of(lengths, device=None):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.cumsum(torch.tensor(lengths, device=device), 0)
    return cu


def check(hq, hkv, d, causal) -> str:
    """cuDNN against the float64 reference, eagerly and replayed."""
    lengths = [5, 0, 77, 1, 130]
    cu = cu_seqlens_of(lengths)
    q = torch.randn(sum(lengths), hq, d, dtype=torch.bfloat16)
    k, v = (torch.randn(sum(lengths), hkv, d, dtype=torch.bfloat16) for _ in range(2))
    reference = reference_attention(q.double(), k.double(), v.double(), cu, max(lengths), causal)
    args = (q.cuda(), k.cuda(), v.cuda(), cu.cuda(), 256, causal)
    graph_out = {}  # after the capture: the graph's output tensor, which each replay rewrites
    try:
        eager = cudnn_ragged(*args).cpu().double()
        graph_time_us(lambda: graph_out.update(out=cudnn_ragged(*args)), reps=2)
    except Exception as error:  # noqa: BLE001 - reported, the timing still runs
        return f"failed: {type(error).__name__}: {error}"[:300]
    error = ((eager - reference).norm() / reference.norm()).item()
    same = torch.equal(graph_out["out"].cpu().double(), eager)
    return f"relative error to float64 {error:.2e}, replay equals eager: {same}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    importlib.import_module("cudnn.sdpa.fwd.torch_op")  # registers torch.ops.cudnn.sdpa_fwd

    backends = {name: fn for name, fn in attention_cuda.available_backends().items()
                if name in ("varlen", "fa4", "triton")}
    backends["cudnn_ragged"] = cudnn_ragged
    rows, checks = [], {}
    for label, (hq, hkv, d, causal) in SHAPES.items():
        checks[label] = check(hq, hkv, d, causal)
        print(f"{label}: cudnn_ragged {checks[label]}", flush=True)
        for mix, lengths in MIXES.items():
            total = sum(lengths)
            cu = cu_seqlens_of(lengths, "cuda")
            q = torch.randn(total, hq, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(total, hkv, d, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))
            bound = total if total <= 8192 else max(lengths)
            times = {}
            for name, fn in backends.items():
                try:
                    times[name] = graph_time_us(lambda: fn(q, k, v, cu, bound, causal),
                                                calls=20)
                except Exception as error:  # noqa: BLE001 - one cell's failure is reported
                    times[name] = float("nan")
                    print(f"  {label} {mix} {name}: {type(error).__name__}: {error}"[:300],
                          flush=True)
            rows.append({"shape": label, "mix": mix, "tokens": total, "max_seqlen": bound,
                         "us": {n: round(t, 1) for n, t in times.items()}})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cudnn_ragged_gpu.json").write_text(json.dumps(
        {"device": torch.cuda.get_device_name(), "checks": checks, "rows": rows}, indent=1))
    names = list(backends)
    print("\n| shape | mix | tokens | " + " | ".join(names) + " | best other / cudnn_ragged |")
    print("| --- | --- | ---: | " + " | ".join("---:" for _ in names) + " | ---: |")
    for row in rows:
        us = row["us"]
        others = [t for n, t in us.items() if n != "cudnn_ragged" and t == t]
        ratio = min(others) / us["cudnn_ragged"] if others else float("nan")
        print(f"| {row['shape']} | {row['mix']} | {row['tokens']} | "
              + " | ".join(f"{us[n]:.1f}" for n in names) + f" | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
