"""Ragged attention for short sequences, as one Triton kernel, and its plain-torch reference.

    ragged_attention(q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D], cu_seqlens int32 [B+1], causal)
        -> out [T, Hq, D], contiguous, q's dtype

Token i attends to the tokens of its own sequence (causal: those at or before it); Hq is a
multiple of Hkv (grouped-query heads read their group's key and value head, never repeated);
sequences may be empty. Scores and the softmax are float32, each output rounded once.

Why a kernel of our own: at 128 tokens a BERT-sized layer's attention is a few microseconds of
launch and ramp in FlashAttention 2 or 4 (6.5 µs a layer for BGE-M3 at 1 x 128 on an H200,
docs/benchmarks.md), whose grids cover `max_seqlen` rows per sequence and head. This kernel's
grid is blocks of consecutive tokens of the ragged axis (16 or 64) per head, so it does not depend
on `max_seqlen` at all, and a block of short sequences (queries) is one program. The engine's
attention table (engine/attention_cuda.py) runs it only in the cells where it measured fastest.

`ragged_attention` runs the kernel for CUDA tensors and the reference everywhere else; Triton is
imported only when a CUDA tensor arrives. Knows nothing about models.
"""

import torch


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 3:
            raise ValueError(f"{name} must be [tokens, heads, head_dim], got shape "
                             f"{tuple(x.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share tokens and "
                         "head_dim")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} "
                         "key/value heads")
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        raise ValueError(f"q, k and v must share one float dtype, got {q.dtype}, {k.dtype}, "
                         f"{v.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype != torch.int32:
        raise ValueError(f"cu_seqlens must be int32 [B+1] with B >= 1, got {cu_seqlens.dtype} "
                         f"{tuple(cu_seqlens.shape)}")
    if cu_seqlens.device != q.device:
        raise ValueError(f"cu_seqlens is on {cu_seqlens.device}, q on {q.device}")


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        cu_seqlens: torch.Tensor, max_seqlen: int, causal: bool) -> torch.Tensor:
    """Plain, slow, obviously-correct ragged attention (float64 math) for tests; the argument
    list of the engine's attention interface (`max_seqlen` unused)."""
    out = torch.empty_like(q)
    group = q.shape[1] // k.shape[1]
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        qs = q[start:end].double().transpose(0, 1)                       # [Hq, L, D]
        ks = k[start:end].double().transpose(0, 1).repeat_interleave(group, 0)
        vs = v[start:end].double().transpose(0, 1).repeat_interleave(group, 0)
        scores = qs @ ks.transpose(1, 2) / qs.shape[-1] ** 0.5
        if causal:
            length = end - start
            mask = torch.ones(length, length, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        out[start:end] = (scores.softmax(-1) @ vs).transpose(0, 1).to(q.dtype)
    return out


def ragged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cu_seqlens: torch.Tensor, causal: bool) -> torch.Tensor:
    """out [T, Hq, D]: see the module's docstring. Raises ValueError on malformed arguments;
    reads no device value on the host, so it can be captured in a CUDA graph."""
    _check(q, k, v, cu_seqlens)
    if q.is_cuda:
        from .ragged_attention_triton import ragged_attention_triton

        return ragged_attention_triton(q, k, v, cu_seqlens, causal)
    return reference_attention(q, k, v, cu_seqlens, 0, causal).contiguous()
