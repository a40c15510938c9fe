"""SwiGLU over a product whose gate and up columns are interleaved, as one Triton kernel.

    out[m, j] = silu(y[m, 2j]) * y[m, 2j + 1]

The CUDA engine stores Qwen3's gate/up weight with its rows interleaved (gate 0, up 0, gate 1,
...), the layout QuACK's fused gated GEMM reads (engine/cuda_linear.py). Below the token count
where that GEMM wins, the product runs on cuBLAS and this kernel applies the gate: one pass, as
Inductor's fused kernel did for the concatenated layout, so small batches launch no more kernels
than before. Math in float32, rounded once to the input's dtype; silu is x / (1 + exp(-x)), the
formula torch uses, so special values come out as torch's do. Knows nothing about models.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _swiglu_kernel(y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    gate = tl.load(y_ptr + 2 * offsets, mask=inside).to(tl.float32)
    up = tl.load(y_ptr + 2 * offsets + 1, mask=inside).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=inside)


def swiglu_interleaved(y: torch.Tensor) -> torch.Tensor:
    """y [T, 2I] (contiguous, gate and up columns interleaved) -> [T, I]."""
    if y.shape[-1] % 2 or not y.is_contiguous():
        raise ValueError(f"need a contiguous [T, 2I] tensor, got {tuple(y.shape)} "
                         f"with strides {y.stride()}")
    out = y.new_empty((*y.shape[:-1], y.shape[-1] // 2))
    n = out.numel()
    if n:
        _swiglu_kernel[(triton.cdiv(n, BLOCK),)](y, out, n, BLOCK=BLOCK)
    return out


def swiglu_reference(y: torch.Tensor) -> torch.Tensor:
    """The same function in plain torch (float32 math, one rounding)."""
    return (F.silu(y[..., 0::2].float()) * y[..., 1::2].float()).to(y.dtype)
