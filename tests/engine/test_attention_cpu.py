"""The CPU ragged attention backend against the float64 reference, at odd sizes: one-token
sequences, grouped-query heads, causal and bidirectional, strided inputs, bfloat16."""

import pytest
import torch

from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.kernels.ragged_attention import reference_attention

LENGTHS = [1, 7, 2, 33, 1, 19]


def _inputs(q_heads, kv_heads, head_dim, dtype=torch.float32):
    generator = torch.Generator().manual_seed(q_heads * 100 + kv_heads)
    tokens = sum(LENGTHS)
    # One fused buffer, like the models' QKV projection: q, k, v are strided views of it.
    fused = torch.randn(tokens, q_heads + 2 * kv_heads, head_dim, generator=generator).to(dtype)
    q, k, v = fused.split([q_heads, kv_heads, kv_heads], dim=1)
    cu = torch.tensor([0] + torch.tensor(LENGTHS).cumsum(0).tolist(), dtype=torch.int32)
    return q, k, v, cu


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_heads,kv_heads,head_dim", [(6, 6, 16), (6, 2, 16), (5, 1, 24),
                                                       (3, 3, 7)])
def test_matches_the_reference(q_heads, kv_heads, head_dim, causal):
    q, k, v, cu = _inputs(q_heads, kv_heads, head_dim)
    assert not q.is_contiguous()
    got = CpuRaggedAttention()(q, k, v, cu, max(LENGTHS), causal)
    assert got.shape == q.shape and got.dtype == q.dtype and got.is_contiguous()
    torch.testing.assert_close(got, reference_attention(q, k, v, cu, max(LENGTHS), causal),
                               rtol=1e-5, atol=1e-5)


def test_a_one_token_sequence_returns_its_value():
    q, k, v, cu = _inputs(4, 2, 8)
    got = CpuRaggedAttention()(q, k, v, cu, max(LENGTHS), False)
    torch.testing.assert_close(got[0], v[0].repeat_interleave(2, dim=0))


def test_single_sequence_batch():
    q, k, v, _ = _inputs(4, 4, 8)
    cu = torch.tensor([0, q.shape[0]], dtype=torch.int32)
    torch.testing.assert_close(CpuRaggedAttention()(q, k, v, cu, q.shape[0], True),
                               reference_attention(q, k, v, cu, q.shape[0], True),
                               rtol=1e-5, atol=1e-5)


def test_bfloat16():
    q, k, v, cu = _inputs(6, 2, 16, torch.bfloat16)
    got = CpuRaggedAttention()(q, k, v, cu, max(LENGTHS), True)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), reference_attention(q, k, v, cu, 33, True).float(),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_sequences_past_the_explicit_path_limit(causal):
    from hedgerow.engine.attention import BMM_MAX_SEQLEN

    generator = torch.Generator().manual_seed(7)
    lengths = [3, BMM_MAX_SEQLEN + 9, BMM_MAX_SEQLEN]
    fused = torch.randn(sum(lengths), 3 * 4, 8, generator=generator)
    q, k, v = fused.split([4, 4, 4], dim=1)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    torch.testing.assert_close(CpuRaggedAttention()(q, k, v, cu, max(lengths), causal),
                               reference_attention(q, k, v, cu, max(lengths), causal),
                               rtol=1e-5, atol=1e-5)
