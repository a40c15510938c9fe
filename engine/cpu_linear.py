"""Dense layers on the CPU through oneDNN: swap `nn.Linear` modules of a loaded model for
oneDNN's fused linear, folding a following GELU/ReLU/SiLU into the same call.

Why: on this project's CPUs (AMD EPYC, AVX-512) PyTorch's default fp32 `addmm` goes through
MKL, which measured 2-5x slower than oneDNN on the model's shapes (docs/engine.md). The
swapped module computes the same function (`x W^T + b`, then the activation) with the same
parameters; only the kernel changes. This module knows nothing about architectures: it
rewrites any `nn.Linear`, and any `nn.Sequential(nn.Linear, activation)` pair, it finds. GPU
engines never call it.

oneDNN compiles a kernel for each input shape and keeps up to 1024 of them in each of two caches
(PyTorch's for its oneDNN ops, LRU_CACHE_CAPACITY, and oneDNN's own,
ONEDNN_PRIMITIVE_CACHE_CAPACITY). A server sees a new token count in most batches, so under
mixed traffic both caches grew with every new shape: the server's memory rose by about 100 MiB
a minute and did not level off (benchmarks/server_memory.py). Bounded to KERNEL_CACHE_SHAPES
each, memory stays flat and a step takes as long as before: compiling a kernel costs far less
than running it. A value already in the environment is kept.
"""

import logging
import os

import torch
from torch import nn

from hedgerow.logs import fields

log = logging.getLogger("hedgerow.engine")

KERNEL_CACHE_SHAPES = 16
KERNEL_CACHES = ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")


def bound_kernel_caches() -> None:
    """Bound oneDNN's per-shape kernel caches (see the module docstring); must run before the
    process's first oneDNN call, which reads them."""
    for name in KERNEL_CACHES:
        os.environ.setdefault(name, str(KERNEL_CACHE_SHAPES))


def _post_op(module: nn.Module) -> tuple[str, str] | None:
    """The oneDNN post-op (name, algorithm) computing `module`, or None."""
    if isinstance(module, nn.GELU):
        return "gelu", "tanh" if module.approximate == "tanh" else "none"
    if isinstance(module, nn.ReLU):
        return "relu", ""
    if isinstance(module, nn.SiLU):
        return "swish", ""
    return None


class OneDnnLinear(nn.Module):
    """y = post_op(x W^T + b) in one oneDNN call. x: [T, in] -> [T, out], fp32 or bf16."""

    def __init__(self, linear: nn.Linear, post_op: str = "none", algorithm: str = "") -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.post_op, self.algorithm = post_op, algorithm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, self.post_op, [],
                                                  self.algorithm)

    def extra_repr(self) -> str:
        return f"out={self.weight.shape[0]}, in={self.weight.shape[1]}, post_op={self.post_op}"


def onednn_available(dtype: torch.dtype) -> bool:
    """True when oneDNN's fused linear runs here for `dtype` and matches `F.linear`."""
    bound_kernel_caches()
    if dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    probe = nn.Linear(8, 4).to(dtype)
    x = torch.randn(3, 8, dtype=dtype)
    try:
        with torch.inference_mode():
            got = OneDnnLinear(probe)(x)
            expected = probe(x)
    except (RuntimeError, NotImplementedError, AttributeError) as error:
        log.info("%s", fields(event="engine.onednn_unavailable", reason=str(error)))
        return False
    return bool(torch.allclose(got, expected, rtol=1e-2, atol=1e-2))


def use_onednn_linears(model: nn.Module) -> int:
    """Rewrite `model` in place; returns how many linear layers now run on oneDNN."""
    swapped = 0
    for name, child in list(model.named_children()):
        pair = (isinstance(child, nn.Sequential) and len(child) == 2
                and isinstance(child[0], nn.Linear))
        post_op = _post_op(child[1]) if pair else None
        if post_op is not None:
            setattr(model, name, OneDnnLinear(child[0], *post_op))
            swapped += 1
        elif isinstance(child, nn.Linear):
            setattr(model, name, OneDnnLinear(child))
            swapped += 1
        else:
            swapped += use_onednn_linears(child)
    return swapped
