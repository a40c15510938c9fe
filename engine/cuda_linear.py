"""The MLP's up products with their activations as single fused products on CUDA.

Why: under torch.compile the up projection is a cuBLAS product that writes `x W^T` ([T, 4H]
in bf16) and a generated kernel that reads it back, adds the bias and applies GELU. At 8,192
tokens of BGE-M3 that second pass over 64 MiB measured 42 µs a layer beside the product's
98 µs (docs/gpu.md). cuBLASLt can apply bias and GELU while the product's tile is still in
registers (`torch._addmm_activation(..., use_gelu=True)`), so the intermediate is written once.

Its GELU is the tanh approximation. For models whose activation is the tanh GELU (`gelu_new`,
`gelu_pytorch_tanh`) the function is unchanged; for the exact `gelu` it is an approximation,
so the correctness gate decided (`--gelu-epilogue`, on by default: BGE-M3's minimum cosine
against float32 `transformers` stayed 0.99996 on an H200; docs/gpu.md). The product enters as a torch custom op
with a fake implementation, so Inductor keeps it whole instead of splitting the bias and GELU
back out.

QuACK (`quack-kernels`, CuTe DSL GEMMs with fused epilogues, Hopper and newer) does the same for
wider batches, and for SwiGLU too: its gated epilogue applies silu(gate) * up to the product's
tile and writes only the [T, I] result, where cuBLAS writes [T, 2I] and a second kernel reads it
back. Measured on an H200 (`benchmarks/gemm_gpu.py`, bf16): Qwen3-0.6B's gate/up + SwiGLU
1.21-1.41x faster from 512 tokens up, slower at 128; BGE-M3's up + GELU 1.12-1.26x at 4,096
and 8,192 tokens against the cuBLASLt epilogue, slower below 2,048. So each fused product picks
its kernel per call by the token count (the op is opaque to Inductor, so the choice costs no
recompile), QuACK only where it measured faster and only when it imports; its first call per
kernel configuration compiles for a few seconds (kept on disk by --compile-cache). QuACK's gated
epilogue pairs neighbouring columns, so `LinearSwiGLU` holds the gate/up weight with its rows
interleaved, and below QuACK's threshold cuBLAS computes the product and `kernels/swiglu.py`
applies the gate in one pass, as Inductor's kernel did before.

This module knows nothing about architectures: it rewrites any `nn.Sequential(nn.Linear,
nn.GELU)` or `nn.Sequential(nn.Linear, SwiGLU)` pair it finds. CPU engines never call it.
"""

import functools
import logging
from typing import Any, Callable

import torch
from torch import nn

from hedgerow.engine.models.qwen3 import SwiGLU
from hedgerow.logs import fields

log = logging.getLogger(__name__)

# Token counts from which QuACK's fused product beat the alternative on an H200
# (benchmarks/gemm_gpu.py; docs/benchmarks.md).
QUACK_SWIGLU_MIN_TOKENS = 512
QUACK_GELU_MIN_TOKENS = 4096


@functools.cache
def quack_gemm_act() -> Callable[..., Any] | None:
    """QuACK's `gemm_act`, or None (logged once) where it cannot run: not installed, or a GPU
    older than Hopper."""
    try:
        if torch.cuda.get_device_capability() < (9, 0):
            raise RuntimeError("QuACK's GEMMs need compute capability 9.0 or newer")
        from quack.gemm_interface import gemm_act
    except (ImportError, RuntimeError, OSError) as error:
        log.info("%s", fields(event="engine.quack_unavailable",
                              reason=f"{type(error).__name__}: {error}"[:300]))
        return None
    return gemm_act


def _quack(x: torch.Tensor, allowed: bool, min_tokens: int) -> Callable[..., Any] | None:
    """QuACK's gemm_act when it should take this call, else None."""
    if not allowed or not x.is_cuda or x.shape[0] < min_tokens:
        return None
    return quack_gemm_act()


@torch.library.custom_op("hedgerow::linear_gelu", mutates_args=())
def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                quack: bool) -> torch.Tensor:
    """gelu_tanh(x W^T + b): x [T, in], weight [out, in], bias [out] -> [T, out]; `quack`:
    QuACK may take wide batches."""
    gemm_act = _quack(x, quack, QUACK_GELU_MIN_TOKENS)
    if gemm_act is not None:
        return gemm_act(x, weight.t(), bias=bias, activation="gelu_tanh_approx",
                        store_preact=False, tuned=False)[1]
    if x.is_cuda:  # cuBLASLt's epilogue, whose GELU is the tanh one
        return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)
    # the CPU's version of that call applies the exact GELU: spell out the same function
    return torch.nn.functional.gelu(torch.addmm(bias, x, weight.t()), approximate="tanh")


@linear_gelu.register_fake
def _linear_gelu_fake(x, weight, bias, quack):
    return x.new_empty((x.shape[0], weight.shape[0]))


class LinearGelu(nn.Module):
    """A linear layer with a bias and the GELU after it, in one cuBLASLt (or QuACK) call."""

    def __init__(self, linear: nn.Linear, quack: bool = False) -> None:
        super().__init__()
        if linear.bias is None:
            raise ValueError("a GELU epilogue needs the linear layer's bias")
        self.weight = linear.weight
        self.bias = linear.bias
        self.quack = quack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.hedgerow.linear_gelu(x, self.weight, self.bias, self.quack)

    def extra_repr(self) -> str:
        return (f"out={self.weight.shape[0]}, in={self.weight.shape[1]}, epilogue=gelu_tanh, "
                f"quack={self.quack}")


@torch.library.custom_op("hedgerow::linear_swiglu", mutates_args=())
def linear_swiglu(x: torch.Tensor, weight: torch.Tensor, quack: bool) -> torch.Tensor:
    """silu(x Wg^T) * (x Wu^T): x [T, in], weight [2I, in] with gate and up rows interleaved
    -> [T, I]; `quack`: QuACK may take wide batches."""
    gemm_act = _quack(x, quack, QUACK_SWIGLU_MIN_TOKENS)
    if gemm_act is not None:
        return gemm_act(x, weight.t(), activation="swiglu", store_preact=False, tuned=False)[1]
    product = x @ weight.t()
    if x.is_cuda:
        from hedgerow.kernels.swiglu import swiglu_interleaved
        return swiglu_interleaved(product)
    return torch.nn.functional.silu(product[:, 0::2]) * product[:, 1::2]


@linear_swiglu.register_fake
def _linear_swiglu_fake(x, weight, quack):
    return x.new_empty((x.shape[0], weight.shape[0] // 2))


def interleave_rows(weight: torch.Tensor) -> torch.Tensor:
    """[gate; up] rows -> gate 0, up 0, gate 1, up 1, ..."""
    half = weight.shape[0] // 2
    return torch.stack((weight[:half], weight[half:]), dim=1).reshape_as(weight).contiguous()


class LinearSwiGLU(nn.Module):
    """A bias-free gate/up product and its SwiGLU in one fused call (QuACK's gated GEMM), or
    cuBLAS and one kernel for the gate on small batches."""

    def __init__(self, linear: nn.Linear, quack: bool = False) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("the fused SwiGLU product takes no bias")
        with torch.no_grad():
            self.weight = nn.Parameter(interleave_rows(linear.weight), requires_grad=False)
        self.quack = quack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.hedgerow.linear_swiglu(x, self.weight, self.quack)

    def extra_repr(self) -> str:
        return (f"out={self.weight.shape[0] // 2}, in={self.weight.shape[1]}, "
                f"rows=interleaved, quack={self.quack}")


def _fusable(child: nn.Module, activation: type) -> bool:
    return (isinstance(child, nn.Sequential) and len(child) == 2
            and isinstance(child[0], nn.Linear) and isinstance(child[1], activation))


def use_gelu_epilogues(model: nn.Module, quack: bool = False) -> int:
    """Rewrite `model` in place; returns how many linear + GELU pairs now run as one product."""
    swapped = 0
    for name, child in list(model.named_children()):
        if _fusable(child, nn.GELU) and child[0].bias is not None:
            setattr(model, name, LinearGelu(child[0], quack))
            swapped += 1
        else:
            swapped += use_gelu_epilogues(child, quack)
    return swapped


def use_swiglu_products(model: nn.Module, quack: bool = False) -> int:
    """Rewrite `model` in place; returns how many gate/up + SwiGLU pairs now run as one
    product."""
    swapped = 0
    for name, child in list(model.named_children()):
        if _fusable(child, SwiGLU) and child[0].bias is None:
            setattr(model, name, LinearSwiGLU(child[0], quack))
            swapped += 1
        else:
            swapped += use_swiglu_products(child, quack)
    return swapped

