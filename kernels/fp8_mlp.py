"""An FP8 GELU MLP's two products, with the GELU and the quantization between them done in the
up product's epilogue.

    up:    g = gelu((xv * xs) (wv * ws)^T + b)                     (float32, in the epilogue)
           scales[j, m] = max(max |g[m, 128 j : 128 j + 128]|, 1e-12) / 448
           values[m, c] = e4m3(g[m, c] / scales[c // 128, m])
    down:  out = sum over j of (values[:, block j] * scales[j]) (wv * ws)[:, block j]^T + b

x values [M, K] and weight values [N, K] in e4m3, x scales [M, 1] and weight scales [1, N] in
float32 (engine/fp8_linear.py keeps them so), bias [N] or None. The up product returns e4m3
values [M, N] and one float32 scale per row and block of 128 columns, stored [N / 128, M]; the
down product takes them and returns [M, N'] in `out_dtype`. Both sides of every weight must be
multiples of 128 (BLOCK). A NaN in a block's products makes its scale NaN, so it stays
non-finite through the down product, as torch's `amax` would make it.

Why blocks of 128: a row-wise scale needs the row's largest magnitude over all N columns, which
no product tile holds, so it took a pass of its own over the up product's bf16 output
(kernels/gelu_quantize.py: 67 MB written and read again a layer at BGE-M3's 8,192 x 4,096).
A block of 128 columns is one tile's width: the epilogue finds its largest magnitude and writes
e4m3 directly, and the down product applies each block's scale as it accumulates that block of
K, in float32.

`up_gelu_quantize` and `down_product` run the Triton kernels for CUDA tensors (through the
`hedgerow::fp8_up_gelu_quantize` and `hedgerow::fp8_down_product` custom ops, whose fake
implementations let torch.compile trace them and CUDA graphs capture them) and the plain-torch
references everywhere else. Triton is imported only when a CUDA tensor arrives. Knows nothing
about models.
"""

import torch
import torch.nn.functional as F

from .gelu_quantize import APPROXIMATIONS, FP8, FP8_MAX

BLOCK = 128  # columns a scale covers: one tile's width in the up product, one step of K below


def up_gelu_quantize_reference(x_values: torch.Tensor, x_scales: torch.Tensor,
                               weight_values: torch.Tensor, weight_scales: torch.Tensor,
                               bias: torch.Tensor | None,
                               approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition, in plain torch (float32 math)."""
    y = (x_values.float() * x_scales) @ (weight_values.float() * weight_scales.t()).t()
    if bias is not None:
        y = y + bias.float()
    blocks = F.gelu(y, approximate=approximate).unflatten(1, (-1, BLOCK))
    scales = blocks.abs().amax(dim=2).clamp(min=1e-12) / FP8_MAX
    values = (blocks / scales[:, :, None]).to(FP8).flatten(1)
    return values, scales.t().contiguous()


def down_product_reference(values: torch.Tensor, scales: torch.Tensor,
                           weight_values: torch.Tensor, weight_scales: torch.Tensor,
                           bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """The definition, in plain torch (float32 math)."""
    x = (values.float().unflatten(1, (-1, BLOCK)) * scales.t()[:, :, None]).flatten(1)
    out = x @ (weight_values.float() * weight_scales.t()).t()
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


def _check_weight(weight_values, weight_scales, bias, k: int) -> None:
    if weight_values.dtype != FP8 or weight_values.dim() != 2:
        raise ValueError(f"weight_values must be [N, K] float8_e4m3fn, got "
                         f"{tuple(weight_values.shape)} {weight_values.dtype}")
    n, width = weight_values.shape
    if width != k:
        raise ValueError(f"weight_values must have K = {k} columns, got {width}")
    if n % BLOCK or k % BLOCK:
        raise ValueError(f"weight_values' sides must be multiples of {BLOCK}, got "
                         f"{tuple(weight_values.shape)}")
    if weight_scales.dtype != torch.float32 or tuple(weight_scales.shape) != (1, n):
        raise ValueError(f"weight_scales must be [1, {n}] float32, got "
                         f"{tuple(weight_scales.shape)} {weight_scales.dtype}")
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"bias must be [{n}], got {tuple(bias.shape)}")


def _check_up(x_values, x_scales, weight_values, weight_scales, bias, approximate) -> None:
    if x_values.dtype != FP8 or x_values.dim() != 2:
        raise ValueError(f"x_values must be [M, K] float8_e4m3fn, got "
                         f"{tuple(x_values.shape)} {x_values.dtype}")
    if x_scales.dtype != torch.float32 or tuple(x_scales.shape) != (x_values.shape[0], 1):
        raise ValueError(f"x_scales must be [{x_values.shape[0]}, 1] float32, got "
                         f"{tuple(x_scales.shape)} {x_scales.dtype}")
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {APPROXIMATIONS}, got {approximate!r}")
    _check_weight(weight_values, weight_scales, bias, x_values.shape[1])


def _check_down(values, scales, weight_values, weight_scales, bias, out_dtype) -> None:
    if values.dtype != FP8 or values.dim() != 2:
        raise ValueError(f"values must be [M, K] float8_e4m3fn, got "
                         f"{tuple(values.shape)} {values.dtype}")
    blocks = (-(-values.shape[1] // BLOCK), values.shape[0])
    if scales.dtype != torch.float32 or tuple(scales.shape) != blocks:
        raise ValueError(f"scales must be [{blocks[0]}, {blocks[1]}] float32 (one a row and "
                         f"block of {BLOCK}), got {tuple(scales.shape)} {scales.dtype}")
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"out_dtype must be bf16, fp16 or float32, got {out_dtype}")
    _check_weight(weight_values, weight_scales, bias, values.shape[1])


@torch.library.custom_op("hedgerow::fp8_up_gelu_quantize", mutates_args=())
def _up_op(x_values: torch.Tensor, x_scales: torch.Tensor, weight_values: torch.Tensor,
           weight_scales: torch.Tensor, bias: torch.Tensor | None,
           approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    from .fp8_mlp_triton import up_gelu_quantize_triton

    return up_gelu_quantize_triton(x_values, x_scales, weight_values, weight_scales, bias,
                                   approximate)


@_up_op.register_fake
def _up_fake(x_values, x_scales, weight_values, weight_scales, bias, approximate):
    rows, n = x_values.shape[0], weight_values.shape[0]
    return (x_values.new_empty((rows, n)),
            x_scales.new_empty((n // BLOCK, rows)))


@torch.library.custom_op("hedgerow::fp8_down_product", mutates_args=())
def _down_op(values: torch.Tensor, scales: torch.Tensor, weight_values: torch.Tensor,
             weight_scales: torch.Tensor, bias: torch.Tensor | None,
             out_dtype: torch.dtype) -> torch.Tensor:
    from .fp8_mlp_triton import down_product_triton

    return down_product_triton(values, scales, weight_values, weight_scales, bias, out_dtype)


@_down_op.register_fake
def _down_fake(values, scales, weight_values, weight_scales, bias, out_dtype):
    return values.new_empty((values.shape[0], weight_values.shape[0]), dtype=out_dtype)


def up_gelu_quantize(x_values: torch.Tensor, x_scales: torch.Tensor,
                     weight_values: torch.Tensor, weight_scales: torch.Tensor,
                     bias: torch.Tensor | None,
                     approximate: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [M, N] e4m3, scales [N / 128, M] float32): see the module's docstring."""
    _check_up(x_values, x_scales, weight_values, weight_scales, bias, approximate)
    if x_values.is_cuda:
        return torch.ops.hedgerow.fp8_up_gelu_quantize(x_values, x_scales, weight_values,
                                                       weight_scales, bias, approximate)
    return up_gelu_quantize_reference(x_values, x_scales, weight_values, weight_scales, bias,
                                      approximate)


def down_product(values: torch.Tensor, scales: torch.Tensor, weight_values: torch.Tensor,
                 weight_scales: torch.Tensor, bias: torch.Tensor | None,
                 out_dtype: torch.dtype) -> torch.Tensor:
    """[M, N'] in `out_dtype`: see the module's docstring."""
    _check_down(values, scales, weight_values, weight_scales, bias, out_dtype)
    if values.is_cuda:
        return torch.ops.hedgerow.fp8_down_product(values, scales, weight_values,
                                                   weight_scales, bias, out_dtype)
    return down_product_reference(values, scales, weight_values, weight_scales, bias, out_dtype)


def quantize_weight_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] (both multiples of 128) -> (e4m3 values [N, K], float32 scales
    [N / 128, L4]): one scale per 128 x 128 block, L4 = K / 128 rounded up to a multiple of 4
    (cuBLASLt's rule for block scales; the padding is ones). `scales.t()` is the layout
    `torch._scaled_mm` takes for them: [L4, N / 128] with stride [1, L4]."""
    n, k = weight.shape
    blocks = weight.detach().float().unflatten(0, (-1, BLOCK)).unflatten(2, (-1, BLOCK))
    scales = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX  # [N / 128, K / 128]
    values = (blocks / scales[:, None, :, None]).flatten(2).flatten(0, 1).to(FP8)
    padding = -scales.shape[1] % 4
    return values, F.pad(scales, (0, padding), value=1.0).contiguous()


def down_product_blocks_reference(values: torch.Tensor, scales: torch.Tensor,
                                  weight_values: torch.Tensor, weight_scales: torch.Tensor,
                                  bias: torch.Tensor | None,
                                  out_dtype: torch.dtype) -> torch.Tensor:
    """The down product with the weight in 128 x 128 blocks, in plain torch (float32 math)."""
    x = (values.float().unflatten(1, (-1, BLOCK)) * scales.t()[:, :, None]).flatten(1)
    k_blocks = weight_values.shape[1] // BLOCK
    weight = (weight_values.float().unflatten(0, (-1, BLOCK)).unflatten(2, (-1, BLOCK))
              * weight_scales[:, None, :k_blocks, None]).flatten(2).flatten(0, 1)
    out = x @ weight.t()
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


@torch.library.custom_op("hedgerow::fp8_down_product_blocks", mutates_args=())
def _down_blocks_op(values: torch.Tensor, scales: torch.Tensor, weight_values: torch.Tensor,
                    weight_scales: torch.Tensor, bias: torch.Tensor | None,
                    out_dtype: torch.dtype) -> torch.Tensor:
    rows = values.shape[0]
    padding = -rows % 4  # cuBLASLt wants M a multiple of 4 for block scales
    if padding:
        values = F.pad(values.view(torch.uint8), (0, 0, 0, padding)).view(FP8)
        scales = F.pad(scales, (0, padding), value=1.0)
    k_blocks = weight_values.shape[1] // BLOCK  # the scales' rows past it are padding
    out = torch._scaled_mm(values, weight_values.t(), scale_a=scales.t(),
                           scale_b=weight_scales[:, :k_blocks].t(), out_dtype=out_dtype)
    if bias is not None:
        out += bias
    return out[:rows]


@_down_blocks_op.register_fake
def _down_blocks_fake(values, scales, weight_values, weight_scales, bias, out_dtype):
    return values.new_empty((values.shape[0], weight_values.shape[0]), dtype=out_dtype)


def down_product_blocks(values: torch.Tensor, scales: torch.Tensor,
                        weight_values: torch.Tensor, weight_scales: torch.Tensor,
                        bias: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """The down product with the weight in 128 x 128 blocks (quantize_weight_blocks): cuBLAS's
    block-scaled product (`torch._scaled_mm`, 1 x 128 by 128 x 128) on CUDA, the reference
    elsewhere."""
    if values.is_cuda:
        return torch.ops.hedgerow.fp8_down_product_blocks(values, scales, weight_values,
                                                          weight_scales, bias, out_dtype)
    return down_product_blocks_reference(values, scales, weight_values, weight_scales, bias,
                                         out_dtype)
