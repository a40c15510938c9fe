"""FP8's gate: how far `--dtype float8`'s products move a model's vectors from float32's.

    .venv/bin/python -P benchmarks/fp8_gate.py [--model DIR] [--device cpu]

Embeds Hedgerow's 32 probe texts (hedgerow/probe_texts.txt) in one batch through the model's
forward pass, with the model's own tokenizer (a directory without one, as the random-weight
shapes of benchmarks/models.py are, borrows the packaged model's): in float32 (the reference),
in bfloat16 with the GPU engine's rewrites (the GELU epilogue's tanh GELU, the fused SwiGLU
product), and the same with the layer products FP8 takes in e4m3 with row-wise scales
(engine/fp8_linear.py, at every batch size). Prints each one's smallest and median cosine to float32. torch runs
`_scaled_mm` on the CPU too, on the same e4m3 values and scales with float32 sums, so the CPU
gives the GPU's numbers to within the sums' precision (the GPU keeps them in the FP8 tensor
cores' own accumulator, fp8_linear.FP8_FAST_ACCUM); `--device cuda` runs it on the FP8 tensor
cores (compute capability 8.9 or newer). The compiled engine with its graphs is gated by
`benchmarks/engine_gpu.py --variant float8` (random weights of the real shapes).
"""

import argparse
from pathlib import Path

import torch

from hedgerow.defaults import default_model_path
from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.cuda_linear import use_gelu_epilogues, use_swiglu_products
from hedgerow.engine.engine import Engine
from hedgerow.engine.fp8_linear import use_fp8_products
from hedgerow.space import probe_texts
from hedgerow.tokenizer_file import TOKENIZER_FILE, encode_texts, load_tokenizer

VARIANTS = ("float32", "bfloat16", "float8")


def pooled(directory: Path, device: str, variant: str) -> tuple[str, torch.Tensor]:
    """The model's name and the probe texts' pooled rows, float32 [32, D], through
    `variant`'s forward pass: the engine's plain step (per-sequence SDPA in plain torch, on
    either device and float32 too; torch's own dense layers), not its CUDA graphs."""
    engine = Engine.load(directory, device=device,
                         dtype="float32" if variant == "float32" else "bfloat16",
                         attention=CpuRaggedAttention(), cpu_linear="torch")
    if variant != "float32":  # as engine/gpu.py's stepper_for rewrites a model
        use_gelu_epilogues(engine._model)
        use_swiglu_products(engine._model)
    if variant == "float8":
        use_fp8_products(engine._model, min_tokens=1)
    has_tokenizer = (directory / TOKENIZER_FILE).is_file()
    tokenizer = load_tokenizer(directory if has_tokenizer else default_model_path())
    ids = encode_texts(tokenizer, probe_texts(), "", engine.info.max_tokens,
                       engine.info.vocab_size)
    rows = engine.step(RaggedBatch.from_sequences(ids)).synchronize()
    return engine.info.name, rows.float().cpu()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="a model directory (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args(argv)
    directory = args.model or default_model_path()
    rows = {}
    for variant in VARIANTS:
        name, rows[variant] = pooled(directory, args.device, variant)
    print(f"\n{name}, {len(rows['float32'])} probe texts, {args.device}: cosine to float32")
    print(f"{'variant':10} {'min':>9} {'median':>9}")
    for variant in VARIANTS[1:]:
        cosine = torch.nn.functional.cosine_similarity(rows[variant], rows["float32"], dim=-1)
        print(f"{variant:10} {cosine.min().item():>9.6f} {cosine.median().item():>9.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
