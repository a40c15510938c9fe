"""FP8 products for wide batches (`--dtype float8`): e4m3 weights and activations with
row-wise scales, bf16 everywhere else.

Why: on an H200 BGE-M3's and Qwen3-0.6B's layer products ran 1.22-1.65x faster in FP8 e4m3
with row-wise scales (`torch._scaled_mm`, bf16 out) than in bf16 from about 2,048 rows, and
slower at 512 rows and below (docs/benchmarks.md, "FP8 and small-M products"). So a wrapped
product runs in FP8 from FP8_MIN_TOKENS rows a batch and as the bf16 module it wraps below.
Quantizing an activation in a kernel of its own costs 7 µs for [8,192, 1,024] and 22-41 µs
for the wider ones, which ate most of the gain; here the quantization (each row's largest
magnitude, the division, the cast) is plain torch in the forward pass, so under torch.compile
Inductor can fuse it into the kernel that produces the activation (a LayerNorm, the GELU, a
residual add) instead of spending a pass of its own. The bias is added outside the product
for the same reason: it joins whatever kernel comes next.

A weight [N, K] is quantized once at load, row by row: its scale is the row's largest
magnitude over e4m3's largest value (448), so every row uses e4m3's whole range; an
activation's row likewise at every call. The product is `(xq * sx) (wq * sw)^T`, accumulated
in float32 by the FP8 tensor cores.

Vectors are a different space from bf16's (hedgerow/space.py: the dtype is among the facts a
fingerprint digests), and within it a text's vector depends on the batch it rides in more than
in bf16: batches under FP8_MIN_TOKENS tokens take the bf16 path. docs/gpu.md ("FP8 products")
says what the golden-set guard and the gate make of it. Only the layers' products are wrapped (not
embeddings, norms or heads), only those whose sides are multiples of 16 (`_scaled_mm`'s rule),
and not those named in KEPT_BF16; of the architectures this module knows only those names.
"""

import torch
from torch import nn

from hedgerow.engine.cuda_linear import LinearGelu
from hedgerow.engine.dtype_choice import FP8_MIN_TOKENS

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
# The products that read the attention's output (BertLayer's, Qwen3Layer's) stay bf16: that
# output comes from the attention kernels, a custom op, so its quantization cannot fuse into
# them and costs a pass of its own (about 7 µs at 8,192 x 1,024), more than FP8 saves on BGE-M3's
# output product (28.0 -> 22.4 µs); and it carries a quarter of FP8's error (BGE-M3's random
# shape: smallest cosine to float32 0.9894 with it in FP8, 0.9914 without; docs/benchmarks.md).
KEPT_BF16 = ("attn_out", "o_proj")


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 values [M, K], float32 scales [M, 1]) with x ~ values * scales. A row
    of zeros gets the smallest scale instead of 0/0; a row with inf or NaN stays non-finite."""
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale).to(FP8), scale


class Fp8Linear(nn.Module):
    """A layer product in FP8 from `min_tokens` rows, and the bf16 module it wraps below.

    `inner` is an `nn.Linear` or a `LinearGelu` (the product with its tanh GELU); its weight is
    shared, not copied, and its e4m3 copy with one scale per output row is kept beside it."""

    def __init__(self, inner: nn.Module, min_tokens: int = FP8_MIN_TOKENS) -> None:
        super().__init__()
        weight = inner.weight
        if weight.dim() != 2 or weight.shape[0] % 16 or weight.shape[1] % 16:
            raise ValueError(f"an FP8 product needs both sides of its weight to be multiples "
                             f"of 16, got {tuple(weight.shape)}")
        self.inner = inner
        self.gelu = isinstance(inner, LinearGelu)
        self.min_tokens = min_tokens
        with torch.no_grad():
            values, scales = quantize_rows(weight.detach())
        self.register_buffer("weight_fp8", values)
        self.register_buffer("weight_scale", scales.t().contiguous())  # float32 [1, N]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] < self.min_tokens:
            return self.inner(x)
        values, scales = quantize_rows(x)
        y = torch._scaled_mm(values, self.weight_fp8.t(), scale_a=scales,
                             scale_b=self.weight_scale, out_dtype=x.dtype)
        if self.inner.bias is not None:
            y = y + self.inner.bias
        # LinearGelu's epilogue applies the tanh GELU: the same function on both paths
        return torch.nn.functional.gelu(y, approximate="tanh") if self.gelu else y

    def extra_repr(self) -> str:
        return f"fp8_from_tokens={self.min_tokens}, gelu_tanh={self.gelu}"


def _wrappable(child: nn.Module) -> bool:
    if not isinstance(child, (nn.Linear, LinearGelu)):
        return False
    n, k = child.weight.shape
    return n % 16 == 0 and k % 16 == 0


def use_fp8_products(model: nn.Module, min_tokens: int = FP8_MIN_TOKENS) -> int:
    """Wrap, in place, every plain or GELU-epilogue product inside `model`'s `layers` (the
    transformer blocks; embeddings and heads stay as they are) but those named in KEPT_BF16
    in an Fp8Linear; returns how many. Call after the bf16 rewrites (cuda_linear.py), whose modules become the small-batch
    path; products fused with SwiGLU keep their bf16 path at every size."""
    wrapped = 0
    for name, child in list(model.named_children()):
        if name == "layers" and isinstance(child, nn.ModuleList):
            wrapped += _wrap_products(child, min_tokens)
        else:
            wrapped += use_fp8_products(child, min_tokens)
    return wrapped


def _wrap_products(module: nn.Module, min_tokens: int) -> int:
    wrapped = 0
    for name, child in list(module.named_children()):
        if name in KEPT_BF16:
            continue
        if _wrappable(child):
            setattr(module, name, Fp8Linear(child, min_tokens))
            wrapped += 1
        elif not isinstance(child, (nn.Linear, LinearGelu, Fp8Linear)):  # wrapped once
            wrapped += _wrap_products(child, min_tokens)
    return wrapped
