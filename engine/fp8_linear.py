"""FP8 products for wide batches (`--dtype float8`): the layers' QKV products in e4m3 with
row-wise scales, bf16 everywhere else.

Why: on an H200 BGE-M3's and Qwen3-0.6B's layer products ran 1.22-1.65x faster in FP8 e4m3
with row-wise scales (`torch._scaled_mm`, bf16 out) than in bf16 from about 2,048 rows, and
slower at 512 rows and below (docs/benchmarks.md, "FP8 and small-M products"). So a wrapped
product runs in FP8 from FP8_MIN_TOKENS rows a batch and as the bf16 product it wraps below.
The activation's quantization (each row's largest magnitude, the division, the cast) is plain
torch in the forward pass, so under torch.compile Inductor fuses it into the kernel that
produces the activation, and the bias rides in the product's epilogue.

Only the QKV products (FP8_PRODUCTS): measured in the compiled engine on an H100 (BGE-M3,
16 x 512), they fuse as intended (the quantization joins the LayerNorm kernel, +4.6 µs a
norm) and the step took 9.41 against 9.76 ms in bf16. With the MLP's up and down products too,
the step took 10.68 against 9.95 ms: Inductor quantized the GELU's [T, 4H] output in a looped
reduction of 102 µs a layer where the bf16 path's GELU rides in cuBLASLt's epilogue for free,
more than FP8 saved on the two products; the output product's input comes from the attention
kernels, so its quantization could not fuse at all (docs/benchmarks.md, "FP8 in the engine").

A weight [N, K] is quantized once at load, row by row: its scale is the row's largest
magnitude over e4m3's largest value (448), so every row uses e4m3's whole range; an
activation's row likewise at every call. The product is `(xq * sx) (wq * sw)^T`, accumulated
in float32 by the FP8 tensor cores.

Vectors are a different space from bf16's (hedgerow/space.py: the dtype is among the facts a
fingerprint digests), and within it a text's vector depends on the batch it rides in more than
in bf16: batches under FP8_MIN_TOKENS tokens take the bf16 path. docs/gpu.md ("FP8 products")
says what the golden-set guard and the gate make of it. Of the architectures this module
knows only the products' names.
"""

import torch
from torch import nn

from hedgerow.engine.dtype_choice import FP8_MIN_TOKENS

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
# The products FP8 takes, by their name in the layers (BertLayer's and Qwen3Layer's QKV).
FP8_PRODUCTS = ("qkv",)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 values [M, K], float32 scales [M, 1]) with x ~ values * scales. A row
    of zeros gets the smallest scale instead of 0/0; a row with inf or NaN stays non-finite."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).to(FP8), scale


class Fp8Linear(nn.Module):
    """A linear layer in FP8 from `min_tokens` rows, and the bf16 `nn.Linear` it wraps below,
    whose weight it shares; the weight's e4m3 copy with one scale per output row is kept
    beside it."""

    def __init__(self, inner: nn.Linear, min_tokens: int = FP8_MIN_TOKENS) -> None:
        super().__init__()
        if not _fits(inner.weight):
            raise ValueError(f"an FP8 product needs both sides of its weight to be multiples "
                             f"of 16, got {tuple(inner.weight.shape)}")
        self.inner = inner
        self.min_tokens = min_tokens
        with torch.no_grad():
            values, scales = quantize_rows(inner.weight.detach())
        self.register_buffer("weight_fp8", values)
        self.register_buffer("weight_scale", scales.t().contiguous())  # float32 [1, N]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] < self.min_tokens:
            return self.inner(x)
        values, scales = quantize_rows(x)
        return torch._scaled_mm(values, self.weight_fp8.t(), scale_a=scales,
                                scale_b=self.weight_scale, bias=self.inner.bias,
                                out_dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"fp8_from_tokens={self.min_tokens}"


def _fits(weight: torch.Tensor) -> bool:
    """`_scaled_mm`'s rule: both sides of the weight multiples of 16."""
    return weight.shape[0] % 16 == 0 and weight.shape[1] % 16 == 0


def use_fp8_products(model: nn.Module, min_tokens: int = FP8_MIN_TOKENS) -> int:
    """Wrap, in place, each `nn.Linear` named in FP8_PRODUCTS in the layers of `model`'s
    `layers` (embeddings and heads stay as they are) in an Fp8Linear, where its sides fit;
    returns how many."""
    wrapped = 0
    for name, child in list(model.named_children()):
        if name != "layers" or not isinstance(child, nn.ModuleList):
            wrapped += use_fp8_products(child, min_tokens)
            continue
        for layer in child:
            for product in FP8_PRODUCTS:
                linear = getattr(layer, product, None)
                if type(linear) is nn.Linear and _fits(linear.weight):
                    setattr(layer, product, Fp8Linear(linear, min_tokens))
                    wrapped += 1
    return wrapped
