"""Matrix products for small token counts that take part in programmatic dependent launch.

    product(x [M, K], weight [N, K], bias [N], gelu=False, tile=None, pdl=False) -> [M, N]
        act(x weight^T + bias), act the exact (erf) GELU or none
    product_add_norm(x, weight, bias, residual [M, N], gamma [N], beta [N], eps, tile=None,
                     pdl=False) -> [M, N]
        LayerNorm(x weight^T + bias + residual) with gamma and beta
    reference_product, reference_product_add_norm: the same in float32, rounded once

Why: at 128 tokens each of a BERT layer's four products is a few microseconds of launch and
ramp, and with programmatic dependent launch (PDL, Hopper and later) a kernel can spend them
while the kernel before it drains. cuBLAS's products take no part in it. Each program of these
Triton products first prefetches its own slice of the weights into L2 (weights never depend on
the kernel before), then waits for that kernel's results (`griddepcontrol.wait`), and lets the
next kernel launch early. On an H200, 24 layers of BGE-M3's products at 128 tokens took 30.2 µs
a layer this way against cuBLAS's 31.6 (35.8 without PDL; docs/benchmarks.md, "Programmatic
dependent launch and the host path"). The engine does not use them yet: `benchmarks/pdl_gpu.py
--engine` measures them in its place first.

A `Tile` is BM x BN x BK with K split over `split` programs, whose float32 partial sums the
consumer adds up in one pass (the LayerNorm kernel, or a sum + bias + GELU kernel), and the
pipeline's stages. The default tiles are BGE-M3's measured picks at 128 tokens. With `pdl` the
kernels launch with programmatic stream serialization; without it they run as any kernel does.

CUDA tensors run the kernels (Triton imported on the first one); everything else runs the
reference. Products accumulate in float32; float32 inputs multiply in TF32 on a GPU. Knows
nothing about models.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F


class Tile(NamedTuple):
    bm: int = 64
    bn: int = 128
    bk: int = 128
    split: int = 1
    stages: int = 3


def default_tile(k: int, with_norm: bool) -> Tile:
    """BGE-M3's picks at 128 tokens on an H200: unsplit for a product with its bias (and
    GELU); split K in 2 (K 1,024) to 8 (K 4,096) for one that a LayerNorm follows."""
    return Tile(split=max(1, min(8, k // 512))) if with_norm else Tile()


def _check(x, weight, bias, residual=None, gamma=None, beta=None, tile=None) -> None:
    if tile is not None and (min(tile.bm, tile.bn, tile.bk) < 16 or tile.split < 1
                             or any(d & (d - 1) for d in (tile.bm, tile.bn, tile.bk))):
        raise ValueError(f"a tile's sides must be powers of two from 16 and its split at "
                         f"least 1, got {tile}")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"x must be [M, K] and weight [N, K], got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    n = weight.shape[0]
    vectors = {"bias": bias, "gamma": gamma, "beta": beta}
    for name, vector in vectors.items():
        if vector is not None and tuple(vector.shape) != (n,):
            raise ValueError(f"{name} must be [{n}], got {tuple(vector.shape)}")
    if residual is not None and tuple(residual.shape) != (x.shape[0], n):
        raise ValueError(f"residual must be [{x.shape[0]}, {n}], got {tuple(residual.shape)}")
    tensors = [t for t in (x, weight, bias, residual, gamma, beta) if t is not None]
    if len({t.dtype for t in tensors}) != 1 or not x.dtype.is_floating_point:
        raise ValueError(f"every argument must share one float dtype, got "
                         f"{sorted({str(t.dtype) for t in tensors})}")
    if len({t.device for t in tensors}) != 1:
        raise ValueError("every argument must be on one device")


def reference_product(x, weight, bias, gelu=False):
    y = F.linear(x.float(), weight.float(), bias.float())
    return (F.gelu(y) if gelu else y).to(x.dtype)


def reference_product_add_norm(x, weight, bias, residual, gamma, beta, eps):
    y = F.linear(x.float(), weight.float(), bias.float()) + residual.float()
    return F.layer_norm(y, (y.shape[1],), gamma.float(), beta.float(), eps).to(x.dtype)


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, gelu: bool = False,
            tile: Tile | None = None, pdl: bool = False) -> torch.Tensor:
    """act(x weight^T + bias): see the module's docstring. Raises ValueError on malformed
    arguments; reads no device value on the host, so it can be captured in a CUDA graph."""
    _check(x, weight, bias, tile=tile)
    if not x.is_cuda:
        return reference_product(x, weight, bias, gelu)
    from .small_products_triton import product_triton

    return product_triton(x, weight, bias, gelu, tile or default_tile(x.shape[1], False), pdl)


def product_add_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                     residual: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                     eps: float, tile: Tile | None = None, pdl: bool = False) -> torch.Tensor:
    """LayerNorm(x weight^T + bias + residual): see the module's docstring."""
    _check(x, weight, bias, residual, gamma, beta, tile)
    if not x.is_cuda:
        return reference_product_add_norm(x, weight, bias, residual, gamma, beta, eps)
    from .small_products_triton import product_add_norm_triton

    return product_add_norm_triton(x, weight, bias, residual, gamma, beta, eps,
                                   tile or default_tile(x.shape[1], True), pdl)
