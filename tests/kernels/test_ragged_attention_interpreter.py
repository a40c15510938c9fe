"""kernels/ragged_attention_triton.py in Triton's CPU interpreter against the float64 reference
(the CI subset), and the public function's argument checks.

Triton decides interpreted-or-compiled when it is first imported, so the kernel runs in a fresh
child process with TRITON_INTERPRET=1. The interpreter's `tl.dot` miscomputes bfloat16 (Triton
3.9: a 16 x 16 product off by 1e10), so bfloat16 is checked on a GPU only, by
test_ragged_attention_gpu.py, which also runs everything here compiled.
"""


import pytest
import torch

from hedgerow.kernels.ragged_attention import ragged_attention, reference_attention

CHILD = """
import torch
from hedgerow.kernels.ragged_attention import reference_attention
from hedgerow.kernels.ragged_attention_triton import ragged_attention_triton
torch.manual_seed(0)
checked = 0
# (sequence lengths, query heads, kv heads, head dim, causal, dtype): empty sequences, one token,
# a sequence across three 64-token blocks, thirty short ones sharing blocks, a thousand sequences
# (half of them empty) for the binary search, grouped-query heads, head dims that are not powers
# of two
for lengths, hq, hkv, dim, causal, dtype in (
        ([5, 0, 77, 1, 3], 2, 1, 24, False, torch.float32),
        ([130], 2, 2, 16, True, torch.float32),
        ([3] * 30, 4, 2, 64, False, torch.float16),
        ([0, 70, 0], 4, 1, 40, True, torch.float32),
        ([65, 64, 1], 2, 2, 16, True, torch.float16),
        ([1, 0, 2, 0, 0, 3] * 170, 2, 1, 16, False, torch.float32)):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    tokens = int(cu[-1])
    q = torch.randn(tokens, hq, dim).to(dtype)
    k, v = torch.randn(tokens, hkv, dim).to(dtype), torch.randn(tokens, hkv, dim).to(dtype)
    got = ragged_attention_triton(q, k, v, cu, causal)
    want = reference_attention(q, k, v, cu, 0, causal)
    assert got.shape == want.shape and got.dtype == dtype and got.is_contiguous()
    tolerance = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance)
    checked += 1
# strided views of one fused projection (the models' input), large logits (the online softmax
# must not overflow) and a NaN query, which poisons its own row only
qkv = torch.randn(20, 3, 2, 16) * 30
qkv[7, 0, 1, 3] = float("nan")
cu = torch.tensor([0, 9, 20], dtype=torch.int32)
q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
got = ragged_attention_triton(q, k, v, cu, False)
want = reference_attention(q, k, v, cu, 0, False)
torch.testing.assert_close(got, want, equal_nan=True, atol=1e-4, rtol=1e-4)
assert got[7, 1].isnan().all() and not got[7, 0].isnan().any() and not got[:7].isnan().any()
print("ok", checked + 1)
"""


def test_the_kernel_matches_its_reference_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 7"


def _inputs(tokens=6, q_heads=2, kv_heads=1, dim=8):
    cu = torch.tensor([0, 2, tokens], dtype=torch.int32)
    return (torch.randn(tokens, q_heads, dim), torch.randn(tokens, kv_heads, dim),
            torch.randn(tokens, kv_heads, dim), cu)


def test_on_the_cpu_it_is_the_reference():
    q, k, v, cu = _inputs()
    for causal in (False, True):
        torch.testing.assert_close(ragged_attention(q, k, v, cu, causal),
                                   reference_attention(q, k, v, cu, 4, causal))


def test_one_token_sequences_return_their_own_values():
    q, k, v, _ = _inputs(tokens=3, q_heads=2, kv_heads=2)
    cu = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    torch.testing.assert_close(ragged_attention(q, k, v, cu, False), v)


@pytest.mark.parametrize("change, message", [
    (lambda q, k, v, cu: (q[0], k, v, cu), "q must be"),
    (lambda q, k, v, cu: (q, k, v[:, :, :4], cu), "one shape"),
    (lambda q, k, v, cu: (q[:5], k, v, cu), "share tokens"),
    (lambda q, k, v, cu: (q[:, :1], k.expand(-1, 2, -1), v.expand(-1, 2, -1), cu),
     "not a multiple"),
    (lambda q, k, v, cu: (q.double(), k, v, cu), "one float dtype"),
    (lambda q, k, v, cu: (q.long(), k.long(), v.long(), cu), "one float dtype"),
    (lambda q, k, v, cu: (q, k, v, cu.long()), "int32"),
    (lambda q, k, v, cu: (q, k, v, cu[:1]), "B >= 1"),
])
def test_malformed_arguments_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        ragged_attention(*change(*_inputs()), False)
