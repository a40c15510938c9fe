"""kernels/ragged_attention.py's Triton kernel against the float64 reference on CUDA: odd sizes,
three dtypes, grouped-query heads, causal, empty sequences, many short and one long sequence,
special values, and a CUDA-graph replay on fresh data. Needs CUDA. (The engine's backend over
this kernel is also run by tests/engine/test_gpu_attention.py with the other backends.)"""

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.kernels.ragged_attention import ragged_attention, reference_attention  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 4e-3, torch.float32: 1e-5}


def _inputs(lengths, q_heads, kv_heads, dim, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tokens = sum(lengths)
    q, k, v = (torch.randn(tokens, heads, dim, device="cuda", generator=g)
               for heads in (q_heads, kv_heads, kv_heads))
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    return q.to(dtype), k.to(dtype), v.to(dtype), cu.cuda()


def _check(q, k, v, cu, causal, tolerance=None):
    got = ragged_attention(q, k, v, cu, causal)
    want = reference_attention(q.cpu(), k.cpu(), v.cpu(), cu.cpu(), 0, causal)
    assert got.shape == q.shape and got.dtype == q.dtype and got.is_contiguous()
    tolerance = tolerance or TOLERANCE[q.dtype]
    torch.testing.assert_close(got.cpu(), want, atol=tolerance, rtol=tolerance, equal_nan=True)
    return got


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("lengths,q_heads,kv_heads,dim", [
    ([1], 1, 1, 16), ([5, 0, 77, 1, 3], 2, 1, 24), ([128], 16, 16, 64), ([130], 16, 8, 128),
    ([3] * 300, 4, 2, 64), ([0, 700, 0, 65], 3, 1, 40), ([1000, 24], 14, 2, 96),
    ([8, 64, 17, 33, 2, 50] * 6, 16, 16, 64), ([1, 0, 5, 0, 2] * 400, 4, 2, 64)])
def test_the_kernel_matches_its_reference(lengths, q_heads, kv_heads, dim, causal, dtype):
    _check(*_inputs(lengths, q_heads, kv_heads, dim, dtype, seed=len(lengths)), causal)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_views_large_logits_and_a_nan_query(dtype):
    qkv = torch.randn(40, 3, 2, 64, device="cuda").to(dtype) * 20
    qkv[17, 0, 1, 5] = float("nan")
    cu = torch.tensor([0, 16, 40], dtype=torch.int32, device="cuda")
    # Scores of about 400 carry float32's rounding (1e-7 of 400) into each exponent, and the
    # outputs are about 20: 2 % of them in every dtype.
    got = _check(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, False, tolerance=0.4)
    assert got[17, 1].isnan().all() and not got[17, 0].isnan().any()
    assert not got[:16].isnan().any()


def test_zero_tokens():
    q, k, v, cu = _inputs([0, 0], 2, 2, 64, torch.bfloat16)
    assert ragged_attention(q, k, v, cu, False).shape == (0, 2, 64)


def test_a_graph_replays_it_on_fresh_data():
    lengths = [9, 0, 120, 64]
    q, k, v, cu = _inputs(lengths, 16, 8, 128, torch.bfloat16, seed=1)
    static = [t.clone() for t in (q, k, v)]
    ragged_attention(*static, cu, True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ragged_attention(*static, cu, True)
    fresh = _inputs(lengths, 16, 8, 128, torch.bfloat16, seed=2)
    for target, source in zip(static, fresh[:3]):
        target.copy_(source)
    graph.replay()
    torch.testing.assert_close(out, ragged_attention(*fresh, True), atol=0, rtol=0)
