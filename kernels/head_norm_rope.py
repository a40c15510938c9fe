"""Per-head RMSNorm and rotary embedding of queries and keys, in one pass.

For each token t and each of the first Hq + Hk heads h of a fused projection
qkv [T, Hq + Hk + Hv, D] (queries, then keys, then values):

    y = x / sqrt(mean(x^2) + eps) * w     (w: the query weight for h < Hq, else the key weight)
    out[:D/2] = y[:D/2] cos[t] - y[D/2:] sin[t]
    out[D/2:] = y[D/2:] cos[t] + y[:D/2] sin[t]

with cos and sin float32 [T, D/2], already looked up by position. Returns the queries [T, Hq, D]
and keys [T, Hk, D], contiguous, in qkv's dtype; math in float32, rounded once.

Why one kernel: under torch.compile Inductor wrote one kernel for the queries and one for the
keys, which took 49 and 42 µs a layer at 8,192 tokens of Qwen3-0.6B on an H100, against about
30 µs for reading and writing their bytes once (docs/benchmarks.md). Here each program reads one
token's heads once and writes both outputs.

`head_norm_rope` runs the Triton kernel for CUDA tensors (through the `hedgerow::head_norm_rope`
custom op, whose fake implementation lets torch.compile trace it and CUDA graphs capture it) and
the plain-torch reference everywhere else. Triton is imported only when a CUDA tensor arrives.
Knows nothing about models.
"""

import torch


def _check(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
           cos: torch.Tensor, sin: torch.Tensor, num_q: int, num_k: int) -> None:
    if qkv.dim() != 3:
        raise ValueError(f"qkv must be [T, heads, D], got shape {tuple(qkv.shape)}")
    tokens, heads, dim = qkv.shape
    if dim % 2:
        raise ValueError(f"the head dimension must be even for rotary embeddings, got {dim}")
    if num_q < 1 or num_k < 0 or num_q + num_k > heads:
        raise ValueError(f"{num_q} query and {num_k} key heads do not fit in {heads} heads")
    for name, weight in (("q_weight", q_weight), ("k_weight", k_weight)):
        if tuple(weight.shape) != (dim,):
            raise ValueError(f"{name} must be [{dim}], got shape {tuple(weight.shape)}")
    for name, table in (("cos", cos), ("sin", sin)):
        if tuple(table.shape) != (tokens, dim // 2) or table.dtype != torch.float32:
            raise ValueError(f"{name} must be float32 [{tokens}, {dim // 2}], got "
                             f"{table.dtype} {tuple(table.shape)}")


def head_norm_rope_reference(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                             cos: torch.Tensor, sin: torch.Tensor, num_q: int, num_k: int,
                             eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition, in plain torch (float32 math, one rounding)."""
    x = qkv[:, :num_q + num_k].float()
    weight = torch.cat((q_weight.float().expand(num_q, -1), k_weight.float().expand(num_k, -1)))
    y = x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps) * weight
    first, second = y.chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.cat((first * c - second * s, second * c + first * s), dim=-1).to(qkv.dtype)
    return out[:, :num_q].contiguous(), out[:, num_q:].contiguous()


@torch.library.custom_op("hedgerow::head_norm_rope", mutates_args=())
def _head_norm_rope_op(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                       cos: torch.Tensor, sin: torch.Tensor, num_q: int, num_k: int,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    from .head_norm_rope_triton import head_norm_rope_triton

    return head_norm_rope_triton(qkv, q_weight, k_weight, cos, sin, num_q, num_k, eps)


@_head_norm_rope_op.register_fake
def _head_norm_rope_fake(qkv, q_weight, k_weight, cos, sin, num_q, num_k, eps):
    tokens, _, dim = qkv.shape
    return qkv.new_empty((tokens, num_q, dim)), qkv.new_empty((tokens, num_k, dim))


def head_norm_rope(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                   cos: torch.Tensor, sin: torch.Tensor, num_q: int, num_k: int,
                   eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(queries [T, Hq, D], keys [T, Hk, D]): see the module's docstring."""
    _check(qkv, q_weight, k_weight, cos, sin, num_q, num_k)
    if qkv.is_cuda:
        return torch.ops.hedgerow.head_norm_rope(qkv, q_weight, k_weight, cos, sin, num_q,
                                                 num_k, eps)
    return head_norm_rope_reference(qkv, q_weight, k_weight, cos, sin, num_q, num_k, eps)
