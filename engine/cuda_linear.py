"""The up projection and its GELU as one cuBLASLt matrix product on CUDA (a GELU epilogue).

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
back out. This module knows nothing about architectures: it rewrites any
`nn.Sequential(nn.Linear, nn.GELU)` pair it finds. CPU engines never call it.
"""

import torch
from torch import nn


@torch.library.custom_op("hedgerow::linear_gelu", mutates_args=())
def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(x W^T + b): x [T, in], weight [out, in], bias [out] -> [T, out]."""
    if x.is_cuda:  # cuBLASLt's epilogue, whose GELU is the tanh one
        return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)
    # the CPU's version of that call applies the exact GELU: spell out the same function
    return torch.nn.functional.gelu(torch.addmm(bias, x, weight.t()), approximate="tanh")


@linear_gelu.register_fake
def _linear_gelu_fake(x, weight, bias):
    return x.new_empty((x.shape[0], weight.shape[0]))


class LinearGelu(nn.Module):
    """A linear layer with a bias and the GELU after it, in one cuBLASLt call."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.bias is None:
            raise ValueError("a GELU epilogue needs the linear layer's bias")
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.hedgerow.linear_gelu(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"out={self.weight.shape[0]}, in={self.weight.shape[1]}, epilogue=gelu_tanh"


def use_gelu_epilogues(model: nn.Module) -> int:
    """Rewrite `model` in place; returns how many linear + GELU pairs now run as one product."""
    swapped = 0
    for name, child in list(model.named_children()):
        if (isinstance(child, nn.Sequential) and len(child) == 2
                and isinstance(child[0], nn.Linear) and child[0].bias is not None
                and isinstance(child[1], nn.GELU)):
            setattr(model, name, LinearGelu(child[0]))
            swapped += 1
        else:
            swapped += use_gelu_epilogues(child)
    return swapped
