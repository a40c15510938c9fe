"""The Triton kernel behind kernels/head_norm_rope.py (see there for the function and why).

One program per token: it loads the token's query and key heads as two [heads, D/2] halves,
so the rotation pairs element i with element i + D/2 without any shuffle, and writes the
queries and the keys to their own outputs. Arguments are checked by the caller.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _head_norm_rope_kernel(qkv_ptr, q_weight_ptr, k_weight_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr,
                           token_stride, head_stride, num_q, num_k, eps,
                           HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, BLOCK_D)[None, :]
    inside = (h < num_q + num_k) & (i < HALF)
    row = qkv_ptr + t * token_stride + h * head_stride + i
    first = tl.load(row, mask=inside, other=0.0).to(tl.float32)
    second = tl.load(row + HALF, mask=inside, other=0.0).to(tl.float32)

    mean_square = (tl.sum(first * first, axis=1) + tl.sum(second * second, axis=1)) / (2 * HALF)
    scale = tl.div_rn(1.0, tl.sqrt_rn(mean_square + eps))[:, None]  # IEEE-rounded
    is_query = h < num_q
    in_half = i < HALF
    w_first = tl.where(is_query, tl.load(q_weight_ptr + i, mask=in_half).to(tl.float32),
                       tl.load(k_weight_ptr + i, mask=in_half).to(tl.float32))
    w_second = tl.where(is_query, tl.load(q_weight_ptr + HALF + i, mask=in_half).to(tl.float32),
                        tl.load(k_weight_ptr + HALF + i, mask=in_half).to(tl.float32))
    first = first * scale * w_first
    second = second * scale * w_second

    c = tl.load(cos_ptr + t * HALF + i, mask=in_half)
    s = tl.load(sin_ptr + t * HALF + i, mask=in_half)
    out_first = first * c - second * s
    out_second = second * c + first * s

    dim = 2 * HALF
    q_out = q_ptr + (t * num_q + h) * dim + i
    k_out = k_ptr + (t * num_k + (h - num_q)) * dim + i
    as_query = inside & is_query
    as_key = inside & (h >= num_q)
    tl.store(q_out, out_first.to(q_ptr.dtype.element_ty), mask=as_query)
    tl.store(q_out + HALF, out_second.to(q_ptr.dtype.element_ty), mask=as_query)
    tl.store(k_out, out_first.to(k_ptr.dtype.element_ty), mask=as_key)
    tl.store(k_out + HALF, out_second.to(k_ptr.dtype.element_ty), mask=as_key)


def head_norm_rope_triton(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                          cos: torch.Tensor, sin: torch.Tensor, num_q: int, num_k: int,
                          eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, _, dim = qkv.shape
    if qkv.stride(2) != 1:
        qkv = qkv.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    q = qkv.new_empty((tokens, num_q, dim))
    k = qkv.new_empty((tokens, num_k, dim))
    if tokens:
        block_h = triton.next_power_of_2(num_q + num_k)
        block_d = triton.next_power_of_2(dim // 2)
        _head_norm_rope_kernel[(tokens,)](
            qkv, q_weight, k_weight, cos, sin, q, k, qkv.stride(0), qkv.stride(1), num_q, num_k,
            eps, HALF=dim // 2, BLOCK_H=block_h, BLOCK_D=block_d,
            num_warps=4 if block_h * block_d <= 2048 else 8)
    return q, k
