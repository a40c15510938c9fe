"""Ragged attention on the CPU, and the interface every attention backend implements.

An attention backend is any callable

    attention(q, k, v, cu_seqlens, max_seqlen, causal) -> out

q: [T, Hq, D], k and v: [T, Hkv, D] (Hq a multiple of Hkv: grouped-query attention), all the
same float dtype; cu_seqlens: int32 [B+1] on the same device; max_seqlen: int; out: [T, Hq, D].
Token i attends only to tokens of its own sequence (and, when `causal`, only to those at or
before it). Models call the backend they are given and know nothing else about it; the GPU
backends (varlen, flash) live in their own modules.

This module owns the CPU backend. It reads `cu_seqlens` on the host, which is free on the CPU
and is why it is not a GPU backend. Strategy, chosen by measurement (docs/engine.md): attention
per sequence on strided views of the fused QKV output, so no padding, no mask and no [T, T]
score matrix, and one concatenation of the outputs. Short bidirectional MHA sequences use
bmm-softmax-bmm; the rest `scaled_dot_product_attention`, whose CPU flash kernel handles
causal masks and grouped-query heads (`enable_gqa`) without repeating keys or values.
"""

from typing import Protocol

import torch
import torch.nn.functional as F


class Attention(Protocol):
    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens: torch.Tensor,
        max_seqlen: int,
        causal: bool,
    ) -> torch.Tensor: ...


# Longest sequence that takes the explicit bmm-softmax-bmm path: its [H, L, L] scores stay
# small (12 heads x 512 x 512 fp32 = 12.6 MB), and below it the explicit path uses a second
# thread where the flash kernel does not (docs/engine.md).
BMM_MAX_SEQLEN = 512


class CpuRaggedAttention:
    """Per-sequence attention over the ragged token axis (CPU only).

    Short bidirectional float32 sequences without grouped-query heads (the BERT family): two
    batched matmuls and a softmax. Everything else (causal, grouped-query, long, bf16): SDPA's
    fused flash kernel, which never materialises the scores and never repeats keys/values.
    """

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens: torch.Tensor,
        max_seqlen: int,
        causal: bool,
    ) -> torch.Tensor:
        gqa = k.shape[1] != q.shape[1]
        explicit_ok = not causal and not gqa and q.dtype == torch.float32
        scale = q.shape[-1] ** -0.5
        bounds = cu_seqlens.tolist()
        outputs = []
        for start, end in zip(bounds[:-1], bounds[1:]):
            # [L, H, D] slices seen as [H, L, D]: views, the kernels read the strides as they are.
            qs = q[start:end].transpose(0, 1)
            ks = k[start:end].transpose(0, 1)
            vs = v[start:end].transpose(0, 1)
            if explicit_ok and end - start <= BMM_MAX_SEQLEN:
                weights = torch.bmm(qs * scale, ks.transpose(1, 2)).softmax(-1)  # [H, L, L]
                o = torch.bmm(weights, vs)                                         # [H, L, D]
            else:
                o = F.scaled_dot_product_attention(qs[None], ks[None], vs[None],
                                                   is_causal=causal, enable_gqa=gqa)[0]
            outputs.append(o.transpose(0, 1))  # [L, Hq, D]
        # One concatenation instead of a copy per sequence: fewer small parallel regions.
        return torch.cat(outputs) if len(outputs) > 1 else outputs[0].contiguous()
