"""FP8 e4m3 with row-wise scales: a row's quantization, and an FP8 GELU MLP's up product with its
bias, its GELU and the quantization of its output in the product's epilogue, for scales chosen
before the product.

    quantize_rows:     scale[m] = max(max_j |x[m, j]|, 1e-12) / 448   (e4m3's largest value)
                       values[m, j] = e4m3(x[m, j] / scale[m])
    up_gelu_quantize:  y = (xv * xs) (wv * ws)^T + bias               (float32, in the epilogue)
                       values[m, j] = e4m3(clamp(gelu(y[m, j]) / out_scales[m], -448, 448))

For the up product: x values [M, K] and weight values [N, K] in e4m3, x scales [M, 1] and weight
scales [1, N] in float32 (engine/fp8_linear.py keeps them so), bias [N] or None, out_scales
[M, 1] float32 > 0. It returns the e4m3 values [M, N]: with out_scales they are the operands of
a row-wise FP8 down product. A value past e4m3's range saturates at +-448; a NaN anywhere in a
row's product or in its scale stays NaN.

Why the up product's epilogue: a row-wise scale from the row's own largest magnitude needs all
N columns, which no product tile holds, so the engine used to write the up product's bf16
output and read it back in a GELU-and-quantize pass of its own (67 MB written and read again a
layer at BGE-M3's [8,192, 4,096]). With the row's scale known before the product (Fp8Mlp takes
a bound on the row's largest |gelu(y)|), the epilogue writes e4m3 directly: on an H100 BGE-M3's
FP8 MLP took 143.8 µs against the pass's 175.9 at 8,192 tokens, and the engine's float8 bulk
2,120 against 1,966 emb/s (docs/benchmarks.md, "The FP8 MLP's GELU in the up product's
epilogue").

`up_gelu_quantize` runs the Triton kernel for CUDA tensors (through the
`hedgerow::fp8_up_gelu_quantize` custom op, whose fake implementation lets torch.compile trace
it and CUDA graphs capture it) and the plain-torch reference everywhere else. Triton is
imported only when a CUDA tensor arrives. Knows nothing about models.
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


def up_gelu_quantize_reference(x_values: torch.Tensor, x_scales: torch.Tensor,
                               weight_values: torch.Tensor, weight_scales: torch.Tensor,
                               bias: torch.Tensor | None, out_scales: torch.Tensor,
                               approximate: str) -> torch.Tensor:
    """The definition, in plain torch (float32 math)."""
    y = (x_values.float() * x_scales) @ (weight_values.float() * weight_scales.t()).t()
    if bias is not None:
        y = y + bias.float()
    scaled = F.gelu(y, approximate=approximate) / out_scales
    return scaled.clamp(-FP8_MAX, FP8_MAX).to(FP8)  # clamp keeps NaNs


def _check(x_values, x_scales, weight_values, weight_scales, bias, out_scales,
           approximate) -> None:
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {APPROXIMATIONS}, got {approximate!r}")
    for name, values in (("x_values", x_values), ("weight_values", weight_values)):
        if values.dtype != FP8 or values.dim() != 2:
            raise ValueError(f"{name} must be 2-D float8_e4m3fn, got {tuple(values.shape)} "
                             f"{values.dtype}")
    (m, k), (n, width) = x_values.shape, weight_values.shape
    if width != k:
        raise ValueError(f"weight_values must have K = {k} columns, got {width}")
    for name, scales, shape in (("x_scales", x_scales, (m, 1)),
                                ("weight_scales", weight_scales, (1, n)),
                                ("out_scales", out_scales, (m, 1))):
        if scales.dtype != torch.float32 or tuple(scales.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)} float32, got "
                             f"{tuple(scales.shape)} {scales.dtype}")
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"bias must be [{n}], got {tuple(bias.shape)}")


@torch.library.custom_op("hedgerow::fp8_up_gelu_quantize", mutates_args=())
def _up_gelu_quantize_op(x_values: torch.Tensor, x_scales: torch.Tensor,
                         weight_values: torch.Tensor, weight_scales: torch.Tensor,
                         bias: torch.Tensor | None, out_scales: torch.Tensor,
                         approximate: str) -> torch.Tensor:
    from .fp8_up_gelu_triton import up_gelu_quantize_triton

    return up_gelu_quantize_triton(x_values, x_scales, weight_values, weight_scales, bias,
                                   out_scales, approximate)


@_up_gelu_quantize_op.register_fake
def _up_gelu_quantize_fake(x_values, x_scales, weight_values, weight_scales, bias, out_scales,
                           approximate):
    return x_values.new_empty((x_values.shape[0], weight_values.shape[0]))


def up_gelu_quantize(x_values: torch.Tensor, x_scales: torch.Tensor,
                     weight_values: torch.Tensor, weight_scales: torch.Tensor,
                     bias: torch.Tensor | None, out_scales: torch.Tensor,
                     approximate: str) -> torch.Tensor:
    """The e4m3 values [M, N]: see the module's docstring."""
    operands = (x_values, x_scales, weight_values, weight_scales, bias, out_scales)
    _check(*operands, approximate)
    if x_values.is_cuda:
        return torch.ops.hedgerow.fp8_up_gelu_quantize(*operands, approximate)
    return up_gelu_quantize_reference(*operands, approximate)
