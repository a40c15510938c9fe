"""The Triton kernels behind kernels/fp8_mlp.py (see there for the functions and why).

Both are tiled products on the FP8 tensor cores, one program per output tile of BLOCK_M rows
and 128 columns, the tiles of a group of GROUP_M row blocks next to each other so that their
weight columns stay in L2. The up product's epilogue applies the scales, the bias and the GELU
in float32 and quantizes each row of its tile (one block of 128 columns); the down product
accumulates each 128 of K in a float32 partial sum, multiplies it by that block's scale per
row and adds it up. A block's largest magnitude is a reduction that keeps NaNs (Triton's `max`
drops them), so a NaN makes its scale NaN. Arguments are checked by the caller.
"""

import torch
import triton
import triton.language as tl

from .fp8_mlp import BLOCK as _BLOCK
from .gelu_quantize import FP8_MAX as _FP8_MAX

BLOCK = tl.constexpr(_BLOCK)  # a kernel reads only constexpr globals
FP8_MAX = tl.constexpr(_FP8_MAX)
# Tiles, by measurement at BGE-M3's MLP shapes (benchmarks/fp8_mlp_gpu.py).
UP_CONFIG = {"BLOCK_M": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 4, "num_warps": 8}
DOWN_CONFIG = {"BLOCK_M": 128, "GROUP_M": 8, "num_stages": 4, "num_warps": 8}


@triton.jit
def _tile(rows, columns, BLOCK_M: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's (row offsets, column offsets), grouped GROUP_M row blocks at a time."""
    pid = tl.program_id(0)
    row_blocks = tl.cdiv(rows, BLOCK_M)
    in_group = GROUP_M * (columns // BLOCK)
    first = (pid // in_group) * GROUP_M
    size = min(row_blocks - first, GROUP_M)
    row_block = first + (pid % in_group) % size
    column_block = (pid % in_group) // size
    return (row_block * BLOCK_M + tl.arange(0, BLOCK_M),
            column_block * BLOCK + tl.arange(0, BLOCK), column_block)


@triton.jit
def _max_keeping_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _up_kernel(x_ptr, x_scale_ptr, w_ptr, w_scale_ptr, bias_ptr, values_ptr, scales_ptr,
               rows, columns, depth, HAS_BIAS: tl.constexpr, TANH: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    offs_m, offs_n, column_block = _tile(rows, columns, BLOCK_M, GROUP_M)
    inside = offs_m < rows
    safe_m = tl.where(inside, offs_m, 0).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + safe_m[:, None] * depth + offs_k[None, :]
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * depth + offs_k[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for _ in range(0, depth // BLOCK_K):
        acc = tl.dot(tl.load(x_ptrs), tl.trans(tl.load(w_ptrs)), acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    y = acc * tl.load(x_scale_ptr + safe_m)[:, None] * tl.load(w_scale_ptr + offs_n)[None, :]
    if HAS_BIAS:
        y += tl.load(bias_ptr + offs_n).to(tl.float32)[None, :]
    if TANH:
        # 0.5 y (1 + tanh(u)) = y sigmoid(2u): no cancellation near 0, no overflow for large |y|
        u = 0.7978845608028654 * (y + 0.044715 * y * y * y)
        g = y / (1.0 + tl.exp(-2.0 * u))
    else:
        g = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    largest = tl.reduce(tl.abs(g), 1, _max_keeping_nan)
    scale = tl.div_rn(tl.maximum(largest, 1e-12, propagate_nan=tl.PropagateNan.ALL), FP8_MAX)
    tl.store(scales_ptr + column_block * rows + offs_m, scale, mask=inside)
    inverse = tl.div_rn(1.0, scale)
    tl.store(values_ptr + offs_m.to(tl.int64)[:, None] * columns + offs_n[None, :],
             (g * inverse[:, None]).to(tl.float8e4nv), mask=inside[:, None])


@triton.jit
def _down_kernel(x_ptr, x_scales_ptr, w_ptr, w_scale_ptr, bias_ptr, out_ptr,
                 rows, columns, depth, HAS_BIAS: tl.constexpr,
                 BLOCK_M: tl.constexpr, GROUP_M: tl.constexpr):
    offs_m, offs_n, _ = _tile(rows, columns, BLOCK_M, GROUP_M)
    inside = offs_m < rows
    safe_m = tl.where(inside, offs_m, 0)
    offs_k = tl.arange(0, BLOCK)
    x_ptrs = x_ptr + safe_m.to(tl.int64)[:, None] * depth + offs_k[None, :]
    w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * depth + offs_k[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for block in range(0, depth // BLOCK):
        part = tl.dot(tl.load(x_ptrs), tl.trans(tl.load(w_ptrs)))
        acc += part * tl.load(x_scales_ptr + block * rows + safe_m)[:, None]
        x_ptrs += BLOCK
        w_ptrs += BLOCK
    out = acc * tl.load(w_scale_ptr + offs_n)[None, :]
    if HAS_BIAS:
        out += tl.load(bias_ptr + offs_n).to(tl.float32)[None, :]
    tl.store(out_ptr + offs_m.to(tl.int64)[:, None] * columns + offs_n[None, :],
             out.to(out_ptr.dtype.element_ty), mask=inside[:, None])


def _grid(rows: int, columns: int, block_m: int) -> tuple[int]:
    return (triton.cdiv(rows, block_m) * (columns // _BLOCK),)


def up_gelu_quantize_triton(x_values, x_scales, weight_values, weight_scales, bias,
                            approximate):
    rows, depth = x_values.shape
    columns = weight_values.shape[0]
    values = torch.empty((rows, columns), dtype=x_values.dtype, device=x_values.device)
    scales = torch.empty((columns // _BLOCK, rows), dtype=torch.float32,
                         device=x_values.device)
    if rows:
        config = dict(UP_CONFIG)
        _up_kernel[_grid(rows, columns, config["BLOCK_M"])](
            x_values.contiguous(), x_scales.contiguous(), weight_values.contiguous(),
            weight_scales.contiguous(), bias, values, scales, rows, columns, depth,
            HAS_BIAS=bias is not None, TANH=approximate == "tanh", **config)
    return values, scales


def down_product_triton(values, scales, weight_values, weight_scales, bias, out_dtype):
    rows, depth = values.shape
    columns = weight_values.shape[0]
    out = torch.empty((rows, columns), dtype=out_dtype, device=values.device)
    if rows:
        config = dict(DOWN_CONFIG)
        _down_kernel[_grid(rows, columns, config["BLOCK_M"])](
            values.contiguous(), scales.contiguous(), weight_values.contiguous(),
            weight_scales.contiguous(), bias, out, rows, columns, depth,
            HAS_BIAS=bias is not None, **config)
    return out
