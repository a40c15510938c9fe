"""The Triton kernels behind kernels/fp8_mlp.py (see there for the functions and why).

Both are tiled products on the FP8 tensor cores, one program per output tile of BLOCK_M rows
and BLOCK_N columns (128 in the down product), the tiles of a group of GROUP_M row blocks next
to each other so that their weight columns stay in L2. The up product's epilogue applies the
scales, the bias and the GELU in float32 and quantizes each row of each block of 128 columns
in its tile (a wider tile, when the sides allow it, reuses each row of x for more columns of
the weight); the down product
accumulates each 128 of K in a float32 partial sum, multiplies it by that block's scale per
row and adds it up. A block's largest magnitude is a reduction that keeps NaNs (Triton's `max`
drops them), so a NaN makes its scale NaN. Arguments are checked by the caller.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .fp8_mlp import BLOCK as _BLOCK
from .gelu_quantize import FP8_MAX as _FP8_MAX

BLOCK = tl.constexpr(_BLOCK)  # a kernel reads only constexpr globals
FP8_MAX = tl.constexpr(_FP8_MAX)
# Tiles: the fastest of `benchmarks/fp8_mlp_gpu.py --sweep` at 16,384 x BGE-M3's MLP on one
# NVIDIA H200.
# TMA: load x's and the weight's tiles with the tensor memory accelerator (Hopper and later)
# instead of per-thread loads.
UP_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 3,
             "num_warps": 8, "TMA": False}
DOWN_CONFIG = {"BLOCK_M": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 4}


@triton.jit
def _tile(rows, columns, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's (first row, first column, column tile), grouped GROUP_M row blocks at a
    time."""
    pid = tl.program_id(0)
    row_blocks = tl.cdiv(rows, BLOCK_M)
    in_group = GROUP_M * (columns // BLOCK_N)
    first = (pid // in_group) * GROUP_M
    size = min(row_blocks - first, GROUP_M)
    row_block = first + (pid % in_group) % size
    column_block = (pid % in_group) // size
    return row_block * BLOCK_M, column_block * BLOCK_N, column_block


@triton.jit
def _max_keeping_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _up_kernel(x_ptr, x_scale_ptr, w_ptr, w_scale_ptr, bias_ptr, values_ptr, scales_ptr,
               rows, columns, depth, HAS_BIAS: tl.constexpr, TANH: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, TMA: tl.constexpr):
    first_row, first_column, column_tile = _tile(rows, columns, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = first_row + tl.arange(0, BLOCK_M)
    offs_n = first_column + tl.arange(0, BLOCK_N)
    inside = offs_m < rows
    safe_m = tl.where(inside, offs_m, 0).to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TMA:  # x_ptr and w_ptr are tensor descriptors; rows past the end load as zeros
        for k in range(0, depth, BLOCK_K):
            acc = tl.dot(x_ptr.load([first_row, k]), tl.trans(w_ptr.load([first_column, k])),
                         acc)
    else:
        offs_k = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + safe_m[:, None] * depth + offs_k[None, :]
        w_ptrs = w_ptr + offs_n.to(tl.int64)[:, None] * depth + offs_k[None, :]
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
    blocks = tl.reshape(g, (BLOCK_M, BLOCK_N // BLOCK, BLOCK))  # the tile's scale blocks
    largest = tl.reduce(tl.abs(blocks), 2, _max_keeping_nan)
    scale = tl.div_rn(tl.maximum(largest, 1e-12, propagate_nan=tl.PropagateNan.ALL), FP8_MAX)
    block_index = column_tile * (BLOCK_N // BLOCK) + tl.arange(0, BLOCK_N // BLOCK)
    tl.store(scales_ptr + block_index[None, :] * rows + offs_m[:, None], scale,
             mask=inside[:, None])
    quantized = tl.reshape(blocks * tl.div_rn(1.0, scale)[:, :, None], (BLOCK_M, BLOCK_N))
    tl.store(values_ptr + offs_m.to(tl.int64)[:, None] * columns + offs_n[None, :],
             quantized.to(tl.float8e4nv), mask=inside[:, None])


@triton.jit
def _down_kernel(x_ptr, x_scales_ptr, w_ptr, w_scale_ptr, bias_ptr, out_ptr,
                 rows, columns, depth, HAS_BIAS: tl.constexpr,
                 BLOCK_M: tl.constexpr, GROUP_M: tl.constexpr):
    first_row, first_column, _ = _tile(rows, columns, BLOCK_M, BLOCK, GROUP_M)
    offs_m = first_row + tl.arange(0, BLOCK_M)
    offs_n = first_column + tl.arange(0, BLOCK)
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


def _grid(rows: int, columns: int, block_m: int, block_n: int = _BLOCK) -> tuple[int]:
    return (triton.cdiv(rows, block_m) * (columns // block_n),)


def up_gelu_quantize_triton(x_values, x_scales, weight_values, weight_scales, bias,
                            approximate):
    rows, depth = x_values.shape
    columns = weight_values.shape[0]
    values = torch.empty((rows, columns), dtype=x_values.dtype, device=x_values.device)
    scales = torch.empty((columns // _BLOCK, rows), dtype=torch.float32,
                         device=x_values.device)
    if rows:
        config = dict(UP_CONFIG)
        if columns % config["BLOCK_N"]:
            config["BLOCK_N"] = _BLOCK  # the sides are multiples of 128 (checked by the caller)
        x, w = x_values.contiguous(), weight_values.contiguous()
        if config["TMA"]:
            x = TensorDescriptor.from_tensor(x, [config["BLOCK_M"], config["BLOCK_K"]])
            w = TensorDescriptor.from_tensor(w, [config["BLOCK_N"], config["BLOCK_K"]])
        _up_kernel[_grid(rows, columns, config["BLOCK_M"], config["BLOCK_N"])](
            x, x_scales.contiguous(), w, weight_scales.contiguous(), bias, values, scales, rows,
            columns, depth, HAS_BIAS=bias is not None, TANH=approximate == "tanh", **config)
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
