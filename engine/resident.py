"""A BERT-family model's layers at batch sizes of up to 128 tokens as one kernel launch
(kernels/resident_layers.py), beside the layer-by-layer forward it replaces there.

`use_resident_layers(model)` stacks the layers' weights once (each layer's parameters then
view the stack, so no memory is added) and gives the BertModel a ResidentBertLayers, which its
forward takes for batches of up to MAX_TOKENS tokens. Only where the kernel computes what the
layers do: BertModel's post-LayerNorm layers with the GELU epilogue's tanh GELU (LinearGelu)
and sides that fit the kernel's tiles. Off unless RESIDENT_LAYERS is set: on one NVIDIA H100
it took BGE-M3's graph replay at 1 x 128 from 862-866 to 816 µs, short of what the batch-1
target needs (docs/benchmarks.md, "one persistent kernel for batch 1"). The engine's GPU test
with it on (tests/engine/test_gpu_engine.py) passed on an H100. It stays off: it saves about
5 % of that replay, and its cooperative launch, one program per SM, can be refused where fewer
SMs are free (a GPU shared through MPS with a thread limit, say).
benchmarks/resident_gpu.py and engine_gpu.py's `resident` variant turn it on.
"""

import torch
from torch import nn

from hedgerow.engine.cuda_linear import LinearGelu
from hedgerow.engine.models.bert import BertModel
from hedgerow.kernels.resident_layers import MAX_TOKENS, STACKED, fits, resident_bert_layers

RESIDENT_LAYERS = False


class ResidentBertLayers(nn.Module):
    """forward(x [T <= MAX_TOKENS, H], cu_seqlens) -> every layer's output, one launch."""

    max_tokens = MAX_TOKENS

    def __init__(self, layers: nn.ModuleList, heads: int, eps: float) -> None:
        super().__init__()
        self.heads, self.eps = heads, eps
        parts = {name: [] for name in STACKED}
        for layer in layers:
            for name, tensor in zip(STACKED, (
                    layer.qkv.weight, layer.qkv.bias, layer.attn_out.weight, layer.attn_out.bias,
                    layer.attn_norm.weight, layer.attn_norm.bias, layer.up.weight, layer.up.bias,
                    layer.down.weight, layer.down.bias, layer.mlp_norm.weight,
                    layer.mlp_norm.bias)):
                parts[name].append(tensor)
        for name, tensors in parts.items():
            stacked = torch.stack([t.detach() for t in tensors])
            self.register_buffer(name, stacked, persistent=False)
            for tensor, view in zip(tensors, stacked):
                tensor.data = view  # the layer reads the stack: one copy of the weights

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        return resident_bert_layers(x, cu_seqlens, {n: getattr(self, n) for n in STACKED},
                                    self.heads, self.eps)


def _fits(encoder: BertModel) -> bool:
    layers = encoder.layers
    return (len(layers) > 0
            and all(isinstance(layer.up, LinearGelu) and type(layer.down) is nn.Linear
                    and type(layer.qkv) is nn.Linear for layer in layers)
            and fits(layers[0].attn_out.weight.shape[0], layers[0].up.weight.shape[0],
                     encoder.config.num_heads))


def use_resident_layers(model: nn.Module) -> int:
    """Give each BertModel in `model` (after use_gelu_epilogues) its ResidentBertLayers where
    the kernel fits it; returns how many it gave."""
    given = 0
    for encoder in model.modules():
        if isinstance(encoder, BertModel) and encoder.resident_layers is None and _fits(encoder):
            encoder.resident_layers = ResidentBertLayers(
                encoder.layers, encoder.config.num_heads, encoder.config.layer_norm_eps)
            given += 1
    return given
