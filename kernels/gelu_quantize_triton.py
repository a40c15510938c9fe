"""The Triton kernel behind kernels/gelu_quantize.py (see there for the function and why).

One program per row, the whole row in registers: load, GELU, the row's largest magnitude, the
scale and its reciprocal, one product per element, the e4m3 store. Triton's max reduction drops
NaNs, so NaNs are counted apart and turn the row's scale into NaN, as torch's `amax` would.
Arguments are checked by the caller.
"""

import torch
import triton
import triton.language as tl

from .gelu_quantize import FP8_MAX as _FP8_MAX

FP8_MAX = tl.constexpr(_FP8_MAX)  # a kernel reads only constexpr globals
MAX_WIDTH = 65536  # a row must fit one program's registers


@triton.jit
def _gelu_quantize_rows_kernel(y_ptr, values_ptr, scale_ptr, width, y_stride,
                               TANH: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK)
    inside = j < width
    x = tl.load(y_ptr + row * y_stride + j, mask=inside, other=0.0).to(tl.float32)
    if TANH:
        # 0.5 x (1 + tanh(u)) = x sigmoid(2u): no cancellation near 0, no overflow for large |x|
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        g = x / (1.0 + tl.exp(-2.0 * u))
    else:
        g = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    largest = tl.max(tl.where(inside, tl.abs(g), 0.0), axis=0)
    nans = tl.sum((inside & (g != g)).to(tl.int32), axis=0)
    scale = tl.div_rn(tl.maximum(largest, 1e-12), FP8_MAX)
    scale = tl.where(nans > 0, float("nan"), scale)
    tl.store(scale_ptr + row, scale)
    # one IEEE division a row and a product an element: a division an element cost more than
    # the row's bytes; at most one float32 ulp from g / scale
    inverse = tl.div_rn(1.0, scale)
    tl.store(values_ptr + row * width + j, (g * inverse).to(tl.float8e4nv), mask=inside)


def gelu_quantize_rows_triton(y: torch.Tensor,
                              approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    rows, width = y.shape
    if width > MAX_WIDTH:
        raise ValueError(f"rows wider than {MAX_WIDTH} are not supported, got {width}")
    if y.stride(1) != 1:
        y = y.contiguous()
    values = torch.empty((rows, width), dtype=torch.float8_e4m3fn, device=y.device)
    scale = torch.empty((rows, 1), dtype=torch.float32, device=y.device)
    if rows:
        block = triton.next_power_of_2(width)
        _gelu_quantize_rows_kernel[(rows,)](
            y, values, scale, width, y.stride(0), TANH=approximate == "tanh", BLOCK=block,
            num_warps=min(16, max(1, block // 512)))
    return values, scale
