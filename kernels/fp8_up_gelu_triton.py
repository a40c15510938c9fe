"""The Triton kernel behind kernels/fp8_up_gelu.py (see there for the function and why).

A tiled product on the FP8 tensor cores, one output tile of BLOCK_M rows and BLOCK_N columns at a
time, the tiles of a group of GROUP_M row blocks next to each other so that their weight columns
stay in L2. With PROGRAMS_PER_SM set, the kernel is persistent (that many programs an SM, each
walking the tiles in a loop the compiler flattens, so one tile's loads start during the last
one's epilogue); with 0, one program a tile. Its operands load through tensor descriptors (TMA)
on Hopper and later, per thread elsewhere (and in the interpreter). The epilogue applies the
scales, the bias and the GELU in float32 (on a GPU the tanh GELU takes the hardware's
tanh.approx, whose error is far under e4m3's rounding), divides by the row's output scale (one
reciprocal a row, a product an element), clamps to e4m3's range keeping NaNs and stores e4m3.
Arguments are checked by the caller.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .fp8_up_gelu import FP8_MAX as _FP8_MAX

FP8_MAX = tl.constexpr(_FP8_MAX)  # a kernel reads only constexpr globals
# The fastest of `benchmarks/fp8_up_gelu_gpu.py --sweep` at BGE-M3's [16,384, 4,096] on one
# NVIDIA H100: 137 µs, against 154 for the same tiles one program a tile.
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_stages": 3,
          "num_warps": 4, "PROGRAMS_PER_SM": 2}


@triton.jit
def _tanh_gelu(y, FAST: tl.constexpr):
    u = 0.7978845608028654 * (y + 0.044715 * y * y * y)
    if FAST:
        t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [u], dtype=tl.float32,
                                      is_pure=True, pack=1)
        return 0.5 * y * (1.0 + t)
    # 0.5 y (1 + tanh(u)) = y sigmoid(2u): no cancellation near 0, no overflow for large |y|
    return y / (1.0 + tl.exp(-2.0 * u))


@triton.jit
def _up_gelu_quantize_kernel(x_ptr, x_scale_ptr, w_ptr, w_scale_ptr, bias_ptr, out_scale_ptr,
                             values_ptr, rows, columns, depth, programs,
                             HAS_BIAS: tl.constexpr, TANH: tl.constexpr, FAST: tl.constexpr,
                             TMA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    row_blocks, column_blocks = tl.cdiv(rows, BLOCK_M), tl.cdiv(columns, BLOCK_N)
    in_group = GROUP_M * column_blocks
    for tile in tl.range(tl.program_id(0), row_blocks * column_blocks, programs, flatten=True):
        first = (tile // in_group) * GROUP_M
        size = min(row_blocks - first, GROUP_M)
        first_row = (first + (tile % in_group) % size) * BLOCK_M
        first_column = ((tile % in_group) // size) * BLOCK_N
        offs_m = first_row + tl.arange(0, BLOCK_M)
        offs_n = first_column + tl.arange(0, BLOCK_N)
        row_in, column_in = offs_m < rows, offs_n < columns
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if TMA:  # x_ptr and w_ptr are tensor descriptors: what lies past an edge loads as 0
            for k in range(0, depth, BLOCK_K):
                acc = tl.dot(x_ptr.load([first_row, k]),
                             tl.trans(w_ptr.load([first_column, k])), acc)
        else:
            offs_k = tl.arange(0, BLOCK_K)
            safe_m = tl.where(row_in, offs_m, 0).to(tl.int64)
            safe_n = tl.where(column_in, offs_n, 0).to(tl.int64)
            for k in range(0, depth, BLOCK_K):
                k_in = (k + offs_k) < depth
                x = tl.load(x_ptr + safe_m[:, None] * depth + (k + offs_k)[None, :],
                            mask=k_in[None, :], other=0.0)
                w = tl.load(w_ptr + safe_n[:, None] * depth + (k + offs_k)[None, :],
                            mask=k_in[None, :], other=0.0)
                acc = tl.dot(x, tl.trans(w), acc)
        x_scale = tl.load(x_scale_ptr + offs_m, mask=row_in, other=1.0)
        w_scale = tl.load(w_scale_ptr + offs_n, mask=column_in, other=1.0)
        y = acc * x_scale[:, None] * w_scale[None, :]
        if HAS_BIAS:
            y += tl.load(bias_ptr + offs_n, mask=column_in, other=0.0).to(tl.float32)[None, :]
        if TANH:
            g = _tanh_gelu(y, FAST)
        else:
            g = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
        inverse = tl.div_rn(1.0, tl.load(out_scale_ptr + offs_m, mask=row_in, other=1.0))
        scaled = g * inverse[:, None]
        scaled = tl.minimum(tl.maximum(scaled, -FP8_MAX, propagate_nan=tl.PropagateNan.ALL),
                            FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
        tl.store(values_ptr + offs_m.to(tl.int64)[:, None] * columns + offs_n[None, :],
                 scaled.to(tl.float8e4nv), mask=row_in[:, None] & column_in[None, :])


def _use_tma(x: torch.Tensor) -> bool:
    """Tensor descriptors on Hopper and later, where each row's bytes are 16-byte aligned."""
    return (x.is_cuda and torch.cuda.get_device_capability(x.device) >= (9, 0)
            and x.shape[1] % 16 == 0)


def up_gelu_quantize_triton(x_values, x_scales, weight_values, weight_scales, bias, out_scales,
                            approximate):
    rows, depth = x_values.shape
    columns = weight_values.shape[0]
    values = torch.empty((rows, columns), dtype=x_values.dtype, device=x_values.device)
    if rows == 0 or columns == 0:
        return values
    config = dict(CONFIG)
    per_sm = config.pop("PROGRAMS_PER_SM")
    x, w = x_values.contiguous(), weight_values.contiguous()
    tma = _use_tma(x)
    if tma:
        x = TensorDescriptor.from_tensor(x, [config["BLOCK_M"], config["BLOCK_K"]])
        w = TensorDescriptor.from_tensor(w, [config["BLOCK_N"], config["BLOCK_K"]])
    tiles = triton.cdiv(rows, config["BLOCK_M"]) * triton.cdiv(columns, config["BLOCK_N"])
    programs = tiles
    if per_sm:  # off a GPU (the interpreter) as if on one SM
        sms = (torch.cuda.get_device_properties(x_values.device).multi_processor_count
               if x_values.is_cuda else 1)
        programs = min(tiles, per_sm * sms)
    _up_gelu_quantize_kernel[(programs,)](
        x, x_scales.contiguous(), w, weight_scales.contiguous(), bias, out_scales.contiguous(),
        values, rows, columns, depth, programs, HAS_BIAS=bias is not None,
        TANH=approximate == "tanh", FAST=x_values.is_cuda, TMA=tma, **config)
    return values
