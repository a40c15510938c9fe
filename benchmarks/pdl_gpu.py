"""Programmatic dependent launch at small M: BGE-M3's layers at 128 tokens, kernel by kernel.

    python -P benchmarks/pdl_gpu.py [--out DIR] [--tokens 128] [--rounds 3]
    python -P benchmarks/pdl_gpu.py --engine [--models DIR] [--rounds 4]

Runs on a Hopper (or later) GPU; the numbers in docs/benchmarks.md are one H200. With
programmatic dependent launch (PDL) a kernel is launched while the one before it drains and
waits in-kernel (`griddepcontrol.wait`) before it reads that kernel's results, so what it does
before the wait overlaps the previous kernel. cuBLAS's products do not take part, so this
compares them with Triton products that do:

- Default: 24 layers of BGE-M3's products at M tokens (QKV with bias; output, then bias +
  residual + LayerNorm; up with bias and GELU; down, then bias + residual + LayerNorm), each
  layer with its own weights (read from HBM, as in the model), one CUDA graph. cuBLAS (with
  the cuBLASLt GELU epilogue for up) against the Triton products of kernels/small_products.py,
  without and with PDL: they split K over programs where that measured faster, into float32
  partial sums the next kernel adds up, and with PDL each program first prefetches its own
  weight slice into L2, then waits. Each product's tile and split are the fastest of a small
  sweep measured with its consumer; the chain's rounds interleave and its result is checked
  against the cuBLAS chain (cosine).
- `--engine`: the compiled engine at 1 x M in one process, alternating rounds: Inductor's PDL
  off, on (`TORCHINDUCTOR_ENABLE_PDL=1` for a served engine), and on with the Triton products
  swapped into every layer (a patch of this benchmark, not an engine setting). Time from
  `step()` to the embedding on the host, and the graph replay alone (CUDA events).

Writes OUT/pdl_gpu.json and prints a table last.
"""

import argparse
import itertools
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from hedgerow.bench import engine_gpu
from hedgerow.kernels.small_products import Tile, product, product_add_norm
from hedgerow.kernels.small_products_triton import _add_norm

HIDDEN, QKV, FF, LAYERS, EPS = 1024, 3072, 4096, 24, 1e-5


def _tile_name(tile: Tile) -> str:
    return f"{tile.bm}x{tile.bn}x{tile.bk} split {tile.split}"


def cublas_add_norm(x, w, bias, residual, gamma, beta, eps):
    # The LayerNorm kernel is the hand-built products' own, so the two chains differ only in
    # the products; it adds cuBLAS's bf16 output as its one "partial", with the bias, as
    # Inductor's kernel does after a product without its bias.
    y = F.linear(x, w)
    m, n = y.shape
    out = residual.new_empty(residual.shape)
    _add_norm[(m,)](y, 1, bias, residual, gamma, beta, out, m, n, eps,
                    BLOCK=triton.next_power_of_2(n), PDL=False, num_warps=4)
    return out


def random_layers():
    def weight(n, k):
        return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.03

    def vector(n, scale=0.02, centre=0.0):
        return (torch.randn(n, device="cuda") * scale + centre).to(torch.bfloat16)

    return [dict(qkv=weight(QKV, HIDDEN), qkv_b=vector(QKV), o=weight(HIDDEN, HIDDEN),
                 o_b=vector(HIDDEN), g1=vector(HIDDEN, 0.1, 1.0), b1=vector(HIDDEN),
                 up=weight(FF, HIDDEN), up_b=vector(FF), down=weight(HIDDEN, FF),
                 down_b=vector(HIDDEN), g2=vector(HIDDEN, 0.1, 1.0), b2=vector(HIDDEN))
            for _ in range(LAYERS)]


def tiles(k):
    for bm, bn, bk, split in itertools.product((64, 128), (64, 128), (64, 128), (1, 2, 4, 8)):
        if k % (split * bk) == 0:
            yield Tile(bm, bn, bk, split, 4 if bk == 64 else 3)


def tune(layers, m, name):
    """The fastest tile for product `name` at M = m, with its consumer, PDL on; µs per layer."""
    n, k = layers[0][name].shape
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 0.3
    residual = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
    timed = []
    for tile in tiles(k):
        if name in ("o", "down"):
            def run(tile=tile):
                for layer in layers:
                    product_add_norm(x, layer[name], layer[name + "_b"], residual,
                                     layer["g1"], layer["b1"], EPS, tile, True)
        else:
            def run(tile=tile):
                for layer in layers:
                    product(x, layer[name], layer[name + "_b"], name == "up", tile, True)
        timed.append((engine_gpu.graph_time_us(run, reps=7) / LAYERS, tile))
    timed.sort(key=lambda pair: pair[0])
    return timed[0]


def chain_cells(m, rounds):
    torch.manual_seed(0)
    layers = random_layers()
    best = {name: tune(layers, m, name) for name in ("qkv", "o", "up", "down")}
    for name, (us, tile) in best.items():
        engine_gpu.log(f"M={m} {name}: {_tile_name(tile)}, {us:.2f} us with its consumer (PDL)")
    tile = {name: pair[1] for name, pair in best.items()}
    x = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)

    def cublas():
        y = x
        for layer in layers:
            q = F.linear(y, layer["qkv"], layer["qkv_b"])[:, :HIDDEN]  # attention's stand-in
            h = cublas_add_norm(q, layer["o"], layer["o_b"], y, layer["g1"], layer["b1"], EPS)
            u = torch._addmm_activation(layer["up_b"], h, layer["up"].t(), use_gelu=True)
            y = cublas_add_norm(u, layer["down"], layer["down_b"], h, layer["g2"], layer["b2"],
                                EPS)
        return y

    def hand_built(pdl):
        y = x
        for layer in layers:
            q = product(y, layer["qkv"], layer["qkv_b"], False, tile["qkv"], pdl)[:, :HIDDEN]
            h = product_add_norm(q, layer["o"], layer["o_b"], y, layer["g1"], layer["b1"], EPS,
                                 tile["o"], pdl)
            u = product(h, layer["up"], layer["up_b"], True, tile["up"], pdl)
            y = product_add_norm(u, layer["down"], layer["down_b"], h, layer["g2"],
                                 layer["b2"], EPS, tile["down"], pdl)
        return y

    reference = cublas().float()
    cases = {"cuBLAS": cublas, "Triton": lambda: hand_built(False),
             "Triton + PDL": lambda: hand_built(True)}
    cosine = {name: round(F.cosine_similarity(fn().float(), reference).min().item(), 6)
              for name, fn in cases.items()}
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            times[name].append(engine_gpu.graph_time_us(fn, reps=7) / LAYERS)
    return {"tokens": m, "tiles": {k: _tile_name(v) for k, v in tile.items()},
            "tuned_us": {k: round(v[0], 2) for k, v in best.items()},
            "us_per_layer": {k: [round(t, 2) for t in v] for k, v in times.items()},
            "min_cosine_vs_cublas": cosine}


# -- --engine: the compiled engine, with and without PDL and the Triton products -------------

def patched_layer_forward(tiles_by_name):
    """A BertLayer.forward whose products are the Triton ones (PDL) at up to 256 tokens."""
    from hedgerow.engine.models import bert

    eager = bert.BertLayer.forward

    @torch.library.custom_op("hedgerow_bench::product", mutates_args=())
    def op_product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, name: str,
                   gelu: bool) -> torch.Tensor:
        if x.shape[0] > 256 or x.shape[0] == 0:
            return F.gelu(F.linear(x, w, b)) if gelu else F.linear(x, w, b)
        return product(x, w, b, gelu, tiles_by_name[name], True)

    @op_product.register_fake
    def _(x, w, b, name, gelu):
        return x.new_empty((x.shape[0], w.shape[0]))

    @torch.library.custom_op("hedgerow_bench::product_add_norm", mutates_args=())
    def op_add_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, residual: torch.Tensor,
                    gamma: torch.Tensor, beta: torch.Tensor, eps: float,
                    name: str) -> torch.Tensor:
        if x.shape[0] > 256 or x.shape[0] == 0:
            return F.layer_norm(residual + F.linear(x, w, b), (w.shape[0],), gamma, beta, eps)
        return product_add_norm(x, w, b, residual, gamma, beta, eps, tiles_by_name[name], True)

    @op_add_norm.register_fake
    def _(x, w, b, residual, gamma, beta, eps, name):
        return residual.new_empty(residual.shape)

    def forward(self, x, cu_seqlens, max_seqlen, attention):
        tokens = x.shape[0]
        qkv = op_product(x, self.qkv.weight, self.qkv.bias, "qkv", False)
        qkv = qkv.view(tokens, 3, self.num_heads, self.head_dim)
        a = attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, max_seqlen, False)
        x = op_add_norm(a.reshape(tokens, -1), self.attn_out.weight, self.attn_out.bias, x,
                        self.attn_norm.weight, self.attn_norm.bias, self.attn_norm.eps, "o")
        up = self.up[0]
        u = op_product(x, up.weight, up.bias, "up", True)
        return op_add_norm(u, self.down.weight, self.down.bias, x, self.mlp_norm.weight,
                           self.mlp_norm.bias, self.mlp_norm.eps, "down")

    return bert, eager, forward


def engine_cells(models: Path, m: int, rounds: int):
    import torch._inductor.config as inductor

    from hedgerow.bench import models as shapes
    from hedgerow.engine.batch import RaggedBatch
    from hedgerow.engine.engine import Engine
    from hedgerow.gpu_settings import GpuSettings

    directory = models / "bge-m3"
    if not (directory / "config.json").is_file():
        shapes.write_model("bge-m3", directory)
    chosen = {"qkv": Tile(64, 128, 128, 1, 3), "o": Tile(64, 128, 128, 2, 3),
              "up": Tile(64, 128, 128, 2, 3), "down": Tile(128, 64, 128, 8, 3)}
    bert, eager, patched = patched_layer_forward(chosen)

    def load(pdl, triton_products):
        # Inductor reads the switch when it compiles, in warmup (TORCHINDUCTOR_ENABLE_PDL=1
        # sets it for a served engine)
        inductor.triton.enable_pdl = pdl
        bert.BertLayer.forward = patched if triton_products else eager
        try:
            engine = Engine.load(directory, device="cuda", dtype="bfloat16",
                                 gpu_settings=GpuSettings(
                                     graph_hot_set=(f"1x{m}",), compile=True,
                                     gelu_epilogue=not triton_products, quack_mlp=False))
            engine.warmup()
        finally:
            bert.BertLayer.forward = eager
        return engine

    engines = {"Inductor PDL off": load(False, False), "Inductor PDL on": load(True, False),
               "PDL on + Triton products": load(True, True)}
    generator = torch.Generator().manual_seed(0)
    batch = RaggedBatch.from_sequences(
        [torch.randint(3, 30000, (m,), generator=generator).tolist()])
    reference = engines["Inductor PDL off"].step(batch).synchronize().clone()
    out = {}
    for name, engine in engines.items():
        got = engine.step(batch).synchronize()
        out[name] = {"cosine_vs_off": round(F.cosine_similarity(got, reference).item(), 6),
                     "e2e_p50_us": [], "replay_us": []}
    for _ in range(rounds):
        for name, engine in engines.items():
            p50, _ = engine_gpu.time_engine(engine, batch, 300)
            _, replay_ms = engine_gpu.time_parts(engine, batch, 100)
            out[name]["e2e_p50_us"].append(round(p50 * 1e3, 1))
            out[name]["replay_us"].append(round(replay_ms * 1e3, 1))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmark-out"))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine", action="store_true",
                        help="the compiled engine at 1 x TOKENS instead of the product chain")
    parser.add_argument("--models", type=Path, default=Path("/tmp/hedgerow-bench-models"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        engine_gpu.log("needs a Hopper or later CUDA device")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "triton": triton.__version__}
    if args.engine:
        results["engine"] = engine_cells(args.models, args.tokens, args.rounds)
    else:
        results["chain"] = chain_cells(args.tokens, args.rounds)
    results["seconds"] = round(time.time() - started, 1)
    (args.out / "pdl_gpu.json").write_text(json.dumps(results, indent=1))
    engine_gpu.log(f"\n{results['device']}, {args.tokens} tokens")
    if args.engine:
        engine_gpu.log(f"{'engine':26s} {'step() to host p50, µs':>28s} {'replay, µs':>24s} cos")
        for name, row in results["engine"].items():
            engine_gpu.log(f"{name:26s} {' '.join(f'{v:6.1f}' for v in row['e2e_p50_us']):>28s}"
                           f" {' '.join(f'{v:6.1f}' for v in row['replay_us']):>24s} "
                           f"{row['cosine_vs_off']}")
    else:
        chain = results["chain"]
        engine_gpu.log(f"{'products':14s} {'µs per layer, by round':>30s} {'min cosine':>11s}")
        for name, values in chain["us_per_layer"].items():
            engine_gpu.log(f"{name:14s} {' '.join(f'{v:6.2f}' for v in values):>30s} "
                           f"{chain['min_cosine_vs_cublas'][name]:>11}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
