"""GELU and row-wise FP8 quantization of an MLP's up product, in one pass.

    g = gelu(y)                                   (tanh approximation or exact, in float32)
    scale[m] = max(max_j |g[m, j]|, 1e-12) / 448  (e4m3's largest value)
    values[m, j] = e4m3(g[m, j] / scale[m])      (the kernel: g * (1 / scale), within an ulp)

y [M, N] in bf16 / fp16 / float32 -> (values [M, N] float8_e4m3fn, scale [M, 1] float32), the
operands an FP8 down product takes (engine/fp8_linear.py). A row with a NaN gets a NaN scale, so
it stays non-finite through the product, as torch's `amax` would make it.

Why a kernel of its own: under torch.compile Inductor wrote the GELU and the quantization of
BGE-M3's [8,192, 4,096] up product as a looped reduction that read the row twice and took
102 µs a layer on an H100, more than FP8 saved on the two MLP products (docs/benchmarks.md,
"FP8 in the engine"). Here one program holds a whole row in registers: it reads the bf16 row
once and writes its e4m3 bytes and its scale once: 41 µs there on that H100, against 92 for
Inductor's and 35 for a plain e4m3 cast of the same tensor (benchmarks/gelu_quantize_gpu.py).

`gelu_quantize_rows` runs the Triton kernel for CUDA tensors (through the
`hedgerow::gelu_quantize_rows` custom op, whose fake implementation lets torch.compile trace it
and CUDA graphs capture it) and the plain-torch reference everywhere else. Triton is imported
only when a CUDA tensor arrives. Knows nothing about models.
"""

import torch
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
APPROXIMATIONS = ("none", "tanh")  # torch.nn.GELU's names


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 values [M, K], float32 scales [M, 1]) with x ~ values * scales. A row
    of zeros gets the smallest scale instead of 0/0; a row with inf or NaN stays non-finite."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).to(FP8), scale


def gelu_quantize_rows_reference(y: torch.Tensor,
                                 approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition, in plain torch (float32 math)."""
    return quantize_rows(F.gelu(y.float(), approximate=approximate))


def _check(y: torch.Tensor, approximate: str) -> None:
    if y.dim() != 2 or y.shape[1] == 0:
        raise ValueError(f"y must be [M, N] with N >= 1, got shape {tuple(y.shape)}")
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {APPROXIMATIONS}, got {approximate!r}")
    if not y.is_floating_point() or y.element_size() < 2:
        raise ValueError(f"y must be bf16, fp16 or float32, got {y.dtype}")


@torch.library.custom_op("hedgerow::gelu_quantize_rows", mutates_args=())
def _gelu_quantize_rows_op(y: torch.Tensor,
                           approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    from .gelu_quantize_triton import gelu_quantize_rows_triton

    return gelu_quantize_rows_triton(y, approximate)


@_gelu_quantize_rows_op.register_fake
def _gelu_quantize_rows_fake(y, approximate):
    return y.new_empty(y.shape, dtype=FP8), y.new_empty((y.shape[0], 1), dtype=torch.float32)


def gelu_quantize_rows(y: torch.Tensor, approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, scale): see the module's docstring."""
    _check(y, approximate)
    if y.is_cuda:
        return torch.ops.hedgerow.gelu_quantize_rows(y, approximate)
    return gelu_quantize_rows_reference(y, approximate)
