"""One persistent kernel for BGE-M3's layers at batch 1 against one kernel per product.

    python -P benchmarks/layer_chain_gpu.py [--out DIR] [--tokens 128] [--rounds 3] [--barriers]

Runs on a CUDA GPU; the numbers in docs/benchmarks.md say which. At 1 x 128 a layer is seven
kernels, each a few µs of launch, ramp and drain around about a microsecond of weight reading
(docs/benchmarks.md, "where BGE-M3's 1 x 128 goes"). This asks whether one kernel that stays
resident for all 24 layers, its programs meeting at a grid-wide barrier between steps, beats
that, before any engine is built around it.

The work, per layer, as the engine runs it at 1 x M (attention left out: the output product
reads the first H columns of the QKV product, as a stand-in):
QKV product with bias; output product, bias, residual, LayerNorm; up product with bias and
tanh GELU; down product, bias, residual, LayerNorm. Each layer has its own weights (read from
HBM, as in the model), random, bf16.

- `cuBLAS`: `F.linear` (bias in the epilogue), `torch._addmm_activation` (cuBLASLt's GELU
  epilogue), then the residual add and `F.layer_norm` eagerly: one kernel a product and two a
  norm, where the compiled engine's Inductor fuses the add into the norm, so this chain has
  two kernels a layer more than the engine's and flatters the persistent kernel (in the
  engine, with attention, benchmarks/resident_gpu.py measures the real difference).
- `persistent`: kernels/resident_layers_triton.py's kernel without its attention step (the
  engine's resident layers, engine/resident.py), one launch of as many programs as the GPU
  has SMs. A product is split into tiles of BN output columns (and, for the output
  and down products, SPLIT slices of K whose float32 partial sums the norm step adds up); each
  program takes every n-th tile; a barrier (an atomic counter) separates the steps. Its tiles
  are the fastest of a small sweep, with the products loading through pointers or tensor
  descriptors (TMA).

Each chain is one CUDA graph of 24 layers; µs a layer, rounds interleaved; the persistent
result is checked against cuBLAS's (cosine). Writes OUT/layer_chain_gpu.json, prints a table.

With `--barriers`, instead: what the persistent kernel's steps cost without their products:
144 barriers in one launch, alone and with every program reading the [128, 1,024] bf16
activation from L2 before each (as each tile of a product over the whole of K does), with as
many programs as SMs and with 64.
"""

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from hedgerow.kernels.resident_layers_triton import _grid_sync, bert_layers_triton

HIDDEN, QKV, FF, LAYERS, EPS = 1024, 3072, 4096, 24, 1e-5


@triton.jit
def _barriers(sync_ptr, count, a_ptr, K: tl.constexpr, READ: tl.constexpr):
    programs = tl.num_programs(0)
    rows = tl.arange(0, 128)
    acc = tl.zeros((128, 64), dtype=tl.float32)
    for i in range(count):
        if READ:
            for k0 in range(0, K, 64):
                acc += tl.load(a_ptr + rows[:, None] * K + k0 + tl.arange(0, 64)[None, :],
                               cache_modifier=".cg").to(tl.float32)
        _grid_sync(sync_ptr, (i + 1) * programs)
    # never true for these inputs; keeps the reads from being optimized away
    tl.store(a_ptr + rows[:, None] * K + tl.arange(0, 64)[None, :], acc.to(tl.bfloat16),
             mask=acc > 1e30)


def barrier_cells(programs, count=144):
    """µs a barrier, alone and after each program reads a [128, 1,024] activation."""
    from hedgerow.bench import engine_gpu
    sync = torch.zeros(1, device="cuda", dtype=torch.int32)
    a = torch.randn(128, HIDDEN, device="cuda", dtype=torch.bfloat16)
    cells = []
    for read in (False, True):
        for grid in (programs, 64):
            def run(read=read, grid=grid):
                sync.zero_()
                _barriers[(grid,)](sync, count, a, K=HIDDEN, READ=read, num_warps=4)
            us = engine_gpu.graph_time_us(run, reps=10) / count
            cells.append(dict(read=read, programs=grid, us_per_barrier=round(us, 2)))
            engine_gpu.log(f"read {read}, {grid} programs: {us:.2f} us a barrier")
    return cells


def random_layers(hidden=HIDDEN, qkv=QKV, ff=FF, layers=LAYERS, device="cuda",
                  dtype=torch.bfloat16):
    """Stacked weights [layers, ...] of the chain."""
    def randn(*shape, scale, centre=0.0):
        return (torch.randn(layers, *shape, device=device) * scale + centre).to(dtype)

    return dict(qkv_w=randn(qkv, hidden, scale=0.03), qkv_b=randn(qkv, scale=0.02),
                o_w=randn(hidden, hidden, scale=0.03), o_b=randn(hidden, scale=0.02),
                g1=randn(hidden, scale=0.1, centre=1.0), b1=randn(hidden, scale=0.02),
                up_w=randn(ff, hidden, scale=0.03), up_b=randn(ff, scale=0.02),
                down_w=randn(hidden, ff, scale=0.03), down_b=randn(hidden, scale=0.02),
                g2=randn(hidden, scale=0.1, centre=1.0), b2=randn(hidden, scale=0.02))


def reference_chain(x, w, eps=EPS):
    """The chain in torch, one kernel a product and one a norm (cuBLAS on a GPU)."""
    hidden = x.shape[1]
    y = x
    for i in range(w["qkv_w"].shape[0]):
        q = F.linear(y, w["qkv_w"][i], w["qkv_b"][i])[:, :hidden]  # attention's stand-in
        h = F.layer_norm(F.linear(q, w["o_w"][i], w["o_b"][i]) + y, (hidden,), w["g1"][i],
                         w["b1"][i], eps)
        if x.is_cuda:  # cuBLASLt's epilogue, the tanh GELU
            u = torch._addmm_activation(w["up_b"][i], h, w["up_w"][i].t(), use_gelu=True)
        else:
            u = F.gelu(F.linear(h, w["up_w"][i], w["up_b"][i]), approximate="tanh")
        y = F.layer_norm(F.linear(u, w["down_w"][i], w["down_b"][i]) + h, (hidden,),
                         w["g2"][i], w["b2"][i], eps)
    return y


class PersistentChain:
    """kernels/resident_layers_triton.py's kernel without its attention step, for inputs of up
    to `block_m` rows."""

    def __init__(self, w, tiles, programs, block_m=128, eps=EPS):
        layers, qkv, hidden = w["qkv_w"].shape
        ff = w["up_w"].shape[1]
        for n, k, bn, split in ((qkv, hidden, tiles["BN_QKV"], 1), (hidden, hidden, tiles["BN_O"],
                                tiles["SPLIT_O"]), (ff, hidden, tiles["BN_UP"], 1),
                                (hidden, ff, tiles["BN_DOWN"], tiles["SPLIT_DOWN"])):
            if n % bn or k % (split * tiles["BK"]):
                raise ValueError(f"a [{n}, {k}] product needs N a multiple of {bn} and K of "
                                 f"{split} x {tiles['BK']}")
        self.w, self.programs, self.eps = w, programs, eps
        self.tiles = tiles | dict(BM=block_m, BQ=16, ATTENTION=False)
        self.sync = None
        self._one_sequence = {}  # cu_seqlens by row count, made before any graph capture

    def __call__(self, x):
        rows = x.shape[0]
        if rows not in self._one_sequence:
            self._one_sequence[rows] = torch.tensor([0, rows], device=x.device,
                                                    dtype=torch.int32)
        out, self.sync = bert_layers_triton(x, self._one_sequence[rows], self.w, 1, self.eps,
                                            self.tiles, self.programs)
        return out


# Tiles tried on the GPU: (BK, BN_QKV, BN_O, SPLIT_O, BN_UP, BN_DOWN, SPLIT_DOWN, warps, stages,
# TMA: the products' loads through tensor descriptors; the first, without, for GPUs before
# Hopper).
SWEEP = [
    (64, 32, 32, 4, 32, 32, 4, 4, 4, False),
    (128, 32, 32, 4, 32, 32, 4, 4, 4, True),
    (64, 32, 32, 4, 32, 32, 4, 4, 6, True),
    (64, 32, 128, 16, 32, 128, 16, 4, 6, True),
    (64, 32, 64, 8, 32, 64, 8, 4, 6, True),
    (64, 32, 128, 8, 32, 128, 16, 4, 6, True),
    (128, 32, 128, 8, 32, 128, 8, 4, 3, True),
    (128, 32, 64, 4, 32, 64, 8, 4, 4, True),
    (128, 32, 64, 8, 32, 64, 8, 4, 4, True),
]
_KEYS = ("BK", "BN_QKV", "BN_O", "SPLIT_O", "BN_UP", "BN_DOWN", "SPLIT_DOWN", "warps", "stages",
         "TMA")


def main() -> int:
    from hedgerow.bench import engine_gpu

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--barriers", action="store_true",
                        help="time the barriers alone and with an activation read instead")
    args = parser.parse_args()
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    args.out.mkdir(parents=True, exist_ok=True)
    if args.barriers:
        cells = barrier_cells(programs)
        (args.out / "layer_chain_barriers.json").write_text(json.dumps(cells, indent=1))
        return 0
    torch.manual_seed(0)
    w = random_layers()
    x = torch.randn(args.tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
    reference = reference_chain(x, w).float()
    cases = {"cuBLAS": lambda: reference_chain(x, w)}
    tried = {}
    for values in SWEEP:
        tiles = dict(zip(_KEYS, values))
        name = ("persistent " + "/".join(str(v) for v in values[:-1])
                + (" TMA" if tiles["TMA"] else ""))
        chain = PersistentChain(w, tiles, programs)
        try:
            out = chain(x).float()
            torch.cuda.synchronize()
        except Exception as error:  # a tile this GPU cannot run (shared memory, registers)
            engine_gpu.log(f"{name}: {type(error).__name__}: {str(error)[:200]}")
            continue
        cosine = F.cosine_similarity(out, reference).min().item()
        if chain.sync.item() != 6 * LAYERS * programs:  # each program once at every barrier
            engine_gpu.log(f"{name}: barrier counter {chain.sync.item()}, want "
                           f"{6 * LAYERS * programs}")
            continue
        us = engine_gpu.graph_time_us(lambda c=chain: c(x), reps=10) / LAYERS
        tried[name] = dict(cosine=round(cosine, 6), us_per_layer=round(us, 2))
        engine_gpu.log(f"{name}: {us:.2f} us a layer, cosine to cuBLAS {cosine:.6f}")
        if cosine > 0.998:  # 24 layers of bf16 rounding, summed in another order
            cases[name] = lambda c=chain: c(x)
    best = min((n for n in cases if n != "cuBLAS"), key=lambda n: tried[n]["us_per_layer"],
               default=None)
    final = {"cuBLAS": cases["cuBLAS"]} | ({best: cases[best]} if best else {})
    times = {name: [] for name in final}
    for _ in range(args.rounds):
        for name, fn in final.items():
            times[name].append(round(engine_gpu.graph_time_us(fn, reps=10) / LAYERS, 2))
    result = {"device": torch.cuda.get_device_name(), "tokens": args.tokens,
              "programs": programs, "sweep": tried, "us_per_layer": times}
    (args.out / "layer_chain_gpu.json").write_text(json.dumps(result, indent=1))
    engine_gpu.log(f"\n{args.tokens} tokens, {programs} programs, µs a layer by round:")
    for name, values in times.items():
        engine_gpu.log(f"  {name:40s} {' / '.join(f'{v:.2f}' for v in values)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
