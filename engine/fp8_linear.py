"""FP8 products for wide batches (`--dtype float8`): the layers' QKV products and their GELU
MLPs in e4m3 with row-wise scales, bf16 everywhere else.

Why: on an H200 BGE-M3's and Qwen3-0.6B's layer products ran 1.22-1.65x faster in FP8 e4m3
with row-wise scales (`torch._scaled_mm`, bf16 out) than in bf16 from about 2,048 rows, and
slower at 512 rows and below (docs/benchmarks.md, "FP8 and small-M products"). So a wrapped
product runs in FP8 from FP8_MIN_TOKENS rows a batch and as the bf16 product it wraps below.

Where each activation's quantization (each row's largest magnitude, the division, the cast)
happens decides whether FP8 pays:
- the QKV product's and the MLP's up product's inputs come out of a LayerNorm / RMSNorm, and
  the quantization is plain torch in the forward pass, so under torch.compile Inductor fuses it
  into the norm's kernel (+4.6 µs a norm on an H100);
- the down product's input is the GELU of the up product. Left to Inductor, the GELU and the
  quantization of BGE-M3's [8,192, 4,096] became a looped reduction of 102 µs a layer, more
  than FP8 saved on both products (a step 1.07x slower than bf16 on an H100); a kernel of its
  own after the up product, reading the bf16 row once, made the bulk 1.15x bf16's. Fp8Mlp now
  takes each row's scale before the product, from a bound on the row's largest |gelu(y)|
  (REACH_MARGIN below), so the up product's epilogue applies the GELU and writes e4m3 itself
  (kernels/fp8_up_gelu.py) and the bf16 [T, 4H] is never written: the MLP 1.22x faster than
  with that pass, the bulk 1.08x (2,120 against 1,966 emb/s on an H100);
- the output product's input comes from the attention kernels: nothing to fuse it into, and at
  [T, H] x [H, H] FP8 saves little, so it stays bf16. So do Qwen3's SwiGLU MLPs (their gate
  runs in QuACK's epilogue or kernels/swiglu.py, neither of which quantizes).
docs/benchmarks.md ("FP8 in the engine") has the measurements of each version.

A weight [N, K] is quantized once at load, row by row: its scale is the row's largest
magnitude over e4m3's largest value (448), so every row uses e4m3's whole range; an
activation's row likewise at every call. The product is `(xq * sx) (wq * sw)^T`, summed by the
FP8 tensor cores in their own accumulator over the whole of K (`use_fast_accum`,
FP8_FAST_ACCUM) rather than promoted to float32 registers every few steps: on an H100 that made
the products 10-17 % faster at 8,192 rows and BGE-M3's float8 bulk 1,975-1,985 against
1,819-1,824 emb/s, with the gate's smallest cosine to float32 0.99411 against 0.99383
(docs/benchmarks.md, "FP8 in the tensor cores' own accumulator"). The error that matters here
is the rounding of the values to e4m3, not the sums'.

Vectors are a different space from bf16's (hedgerow/space.py: the dtype is among the facts a
fingerprint digests), and within it a text's vector depends on the batch it rides in more than
in bf16: batches under FP8_MIN_TOKENS tokens take the bf16 path. docs/gpu.md ("FP8 products")
says what the golden-set guard and the gate make of it. Of the architectures this module
knows only the products' names.
"""

import torch
from torch import nn

from hedgerow.engine.cuda_linear import LinearGelu
from hedgerow.engine.dtype_choice import FP8_MIN_TOKENS
from hedgerow.kernels.fp8_up_gelu import FP8_MAX, quantize_rows, up_gelu_quantize

# The products FP8 takes, by their place in the layers: "qkv" the QKV product (BertLayer's and
# Qwen3Layer's), "mlp" a GELU MLP's up and down products (BertLayer's).
FP8_PRODUCTS = ("qkv", "mlp")
# Whether the FP8 tensor cores sum each product's K in their own accumulator (`use_fast_accum`)
# rather than promoting the partial sums to float32 every few steps (above). Read when a
# wrapper is built; benchmarks/engine_gpu.py patches it to compare.
FP8_FAST_ACCUM = True
# The up product's output row scale is a bound on its largest |gelu(y)|: |gelu(y)| <= |y| and
# |y[m, j]| <= |x_m| |w_j| + |b_j| (Cauchy-Schwarz) with the quantized x and w. A value's e4m3
# rounding moves it by at most 2^-4 of itself, so |x_m| is taken 1.125 times over, which also
# covers the tensor cores' sums; the kernel saturates whatever still lands past 448. A bound
# looser than the row's true largest value costs only the smallest values' precision: e4m3 is
# a float, its relative precision the same across its range.
REACH_MARGIN = 1.125


def _product(values: torch.Tensor, scales: torch.Tensor, weight_values: torch.Tensor,
             weight_scales: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype,
             fast_accum: bool) -> torch.Tensor:
    """(values * scales) (weight_values * weight_scales)^T + bias, on the FP8 tensor cores."""
    return torch._scaled_mm(values, weight_values.t(), scale_a=scales, scale_b=weight_scales,
                            bias=bias, out_dtype=out_dtype, use_fast_accum=fast_accum)


def _keep_fp8_weight(module: nn.Module, name: str, weight: torch.Tensor) -> None:
    """Register `weight`'s e4m3 copy as `{name}_fp8` and its scales as `{name}_scale` [1, N]."""
    if not _fits(weight):
        raise ValueError(f"an FP8 product needs both sides of its weight to be multiples "
                         f"of 16, got {tuple(weight.shape)}")
    with torch.no_grad():
        values, scales = quantize_rows(weight.detach())
    module.register_buffer(f"{name}_fp8", values)
    module.register_buffer(f"{name}_scale", scales.t().contiguous())


class Fp8Linear(nn.Module):
    """A linear layer in FP8 from `min_tokens` rows, and the bf16 `nn.Linear` it wraps below,
    whose weight it shares; the weight's e4m3 copy with one scale per output row is kept
    beside it."""

    def __init__(self, inner: nn.Linear, min_tokens: int = FP8_MIN_TOKENS) -> None:
        super().__init__()
        _keep_fp8_weight(self, "weight", inner.weight)
        self.inner = inner
        self.min_tokens = min_tokens
        self.fast_accum = FP8_FAST_ACCUM

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] < self.min_tokens:
            return self.inner(x)
        return _product(*quantize_rows(x), self.weight_fp8, self.weight_scale, self.inner.bias,
                        x.dtype, self.fast_accum)

    def extra_repr(self) -> str:
        return f"fp8_from_tokens={self.min_tokens}"


class Fp8Mlp(nn.Module):
    """A GELU MLP, down(gelu(up(x))), in FP8 from `min_tokens` rows: the up product with its
    bias, the GELU and the quantization of its output in its epilogue, each row's scale a bound
    taken from the row's norm before the product (kernels/fp8_up_gelu.py), then the down
    product; below, the bf16 modules it wraps.

    It replaces the layer's `up` module while the layer's `down` becomes an identity, so the
    layer's own `down(up(x))` runs it unchanged (use_fp8_products)."""

    def __init__(self, up: nn.Module, down: nn.Linear, min_tokens: int = FP8_MIN_TOKENS) -> None:
        super().__init__()
        weight, bias, self.approximate = _gelu_product(up)
        _keep_fp8_weight(self, "up", weight)
        _keep_fp8_weight(self, "down", down.weight)
        self.up, self.down = up, down
        self.min_tokens = min_tokens
        self.fast_accum = FP8_FAST_ACCUM
        with torch.no_grad():  # REACH_MARGIN: |y[m, j]| <= |x_m| up_reach + up_bias_reach
            rows = self.up_fp8.float().norm(dim=1) * self.up_scale[0]
            self.up_reach = REACH_MARGIN * rows.max().item()
            self.up_bias_reach = 0.0 if bias is None else bias.float().abs().max().item()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] < self.min_tokens:
            return self.down(self.up(x))
        x_values, x_scales = quantize_rows(x)
        scales = self.up_scales(x)
        values = up_gelu_quantize(x_values, x_scales, self.up_fp8, self.up_scale,
                                  _gelu_product(self.up)[1], scales, self.approximate)
        return _product(values, scales, self.down_fp8, self.down_scale, self.down.bias, x.dtype,
                        self.fast_accum)

    def up_scales(self, x: torch.Tensor) -> torch.Tensor:
        """The up product's output scale of each row of x [M, K], [M, 1] float32: the bound
        on the row's largest |gelu(y)| (REACH_MARGIN) over e4m3's largest value."""
        reach = x.float().norm(dim=1, keepdim=True) * self.up_reach + self.up_bias_reach
        return reach.clamp(min=1e-12) / FP8_MAX

    def extra_repr(self) -> str:
        return f"gelu={self.approximate}, fp8_from_tokens={self.min_tokens}"


def _gelu_product(up: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None, str]:
    """(weight, bias, GELU approximation) of an up product with its GELU: the engine's
    LinearGelu (the tanh GELU) or `nn.Sequential(nn.Linear, nn.GELU)`."""
    if isinstance(up, LinearGelu):
        return up.weight, up.bias, "tanh"
    return up[0].weight, up[0].bias, up[1].approximate


def _is_gelu_mlp(up: nn.Module | None, down: nn.Module | None) -> bool:
    pair = (isinstance(up, LinearGelu)
            or (isinstance(up, nn.Sequential) and len(up) == 2 and type(up[0]) is nn.Linear
                and type(up[1]) is nn.GELU))
    return (pair and type(down) is nn.Linear and _fits(_gelu_product(up)[0])
            and _fits(down.weight))


def _fits(weight: torch.Tensor) -> bool:
    """`_scaled_mm`'s rule: both sides of the weight multiples of 16."""
    return weight.shape[0] % 16 == 0 and weight.shape[1] % 16 == 0


def use_fp8_products(model: nn.Module, min_tokens: int = FP8_MIN_TOKENS,
                     products: tuple[str, ...] | None = None) -> int:
    """Rewrite, in place, the products named in `products` (default FP8_PRODUCTS) in the layers
    of `model`'s `layers` (embeddings and heads stay as they are) where their sides fit: each
    QKV `nn.Linear` in an Fp8Linear, each GELU MLP in an Fp8Mlp. Returns how many products
    now run in FP8."""
    products = FP8_PRODUCTS if products is None else products
    wrapped = 0
    for name, child in list(model.named_children()):
        if name != "layers" or not isinstance(child, nn.ModuleList):
            wrapped += use_fp8_products(child, min_tokens, products)
            continue
        for layer in child:
            qkv = getattr(layer, "qkv", None)
            if "qkv" in products and type(qkv) is nn.Linear and _fits(qkv.weight):
                layer.qkv = Fp8Linear(qkv, min_tokens)
                wrapped += 1
            up, down = getattr(layer, "up", None), getattr(layer, "down", None)
            if "mlp" in products and _is_gelu_mlp(up, down):
                layer.up, layer.down = Fp8Mlp(up, down, min_tokens), nn.Identity()
                wrapped += 2
    return wrapped
