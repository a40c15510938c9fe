"""The compiled Triton top-k against the reference on CUDA: the full matrix (run on the H200).

Every case of conftest.gpu_cases() (widths 1 to 12,288 at odd sizes, every pattern, all three
dtypes, k from 1 to 64, valid lengths of 0 and past the row, forced columns) runs through the
public op and through each launch configuration the benchmark compares (separately, so a failure names it), and must equal the CPU
reference bit for bit. Skipped without CUDA.
"""

import random

import pytest
import torch

from hedgerow.kernels.topk import topk
from hedgerow.kernels.topk_reference import merge_topk, topk_reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

# (method, max_block): threshold64/1024 is what topk() uses (auto_config); the rest are the
# alternatives the benchmark compares. Periodic rows also run the bitonic fallback.
CONFIGS = (("threshold64", 1024), ("threshold64", 4096), ("threshold32", 1024),
           ("threshold32", 4096), ("bitonic", 1024))


def on_cuda(*tensors):
    return [None if t is None else t.cuda() for t in tensors]


def assert_same(got, want):
    got = [t.cpu() for t in got]
    assert torch.equal(got[0], want[0]), f"indices differ:\n{got[0]}\n{want[0]}"
    got_bits, want_bits = got[1].float().view(torch.int32), want[1].float().view(torch.int32)
    assert torch.equal(got_bits, want_bits), f"values differ:\n{got[1]}\n{want[1]}"
    assert got[1].dtype == want[1].dtype


def test_public_op_matches_reference(gpu_case, make_case):
    scores, k, valid, forced = make_case(gpu_case)
    want = topk_reference(scores, k, valid, forced)
    assert_same(topk(*on_cuda(scores), k, *on_cuda(valid, forced)), want)


@pytest.mark.parametrize(("method", "max_block"), CONFIGS)
def test_each_configuration_matches_reference(gpu_case, make_case, method, max_block):
    from hedgerow.kernels.topk_triton import choose_config, topk_triton

    scores, k, valid, forced = make_case(gpu_case)
    want = topk_reference(scores, k, valid, forced)
    config = choose_config(scores.shape[1], k, method, max_block)
    assert_same(topk_triton(*on_cuda(scores), k, *on_cuda(valid, forced), config), want)


@pytest.mark.parametrize("k", [65, 100, 300])
def test_k_past_the_kernel_limit_uses_the_reference_on_device(k):
    scores = torch.randint(0, 9, (5, 257), generator=torch.Generator().manual_seed(k)).half()
    assert_same(topk(scores.cuda(), k), topk_reference(scores, k))


def test_zero_columns_and_zero_rows():
    i, v = topk(torch.zeros(3, 0, device="cuda"), 4)
    assert i.tolist() == [[-1] * 4] * 3
    i, v = topk(torch.zeros(0, 9, device="cuda"), 4)
    assert i.shape == (0, 4)


def test_split_then_merge_on_the_kernel():
    rng = random.Random(20261129)
    for trial in range(40):
        cols = rng.choice([1, 3, 64, 500, 1344, 3001, 6000])
        k = rng.choice([1, 7, 16, 16, 33, 64])
        dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16])
        g = torch.Generator().manual_seed(trial)
        if trial % 2:
            scores = torch.randint(0, 7, (3, cols), generator=g).to(dtype)  # many ties
        else:
            scores = torch.randn(3, cols, generator=g).to(dtype)
        forced = torch.rand(3, cols, generator=g) < 0.01
        d_scores, d_forced = on_cuda(scores, forced)
        cuts = sorted(rng.randrange(cols + 1) for _ in range(rng.randrange(5)))
        edges = [0, *cuts, cols]
        parts_i, parts_v = [], []
        for a, b in zip(edges, edges[1:]):
            if a == b:
                continue
            i, v = topk(d_scores[:, a:b], k, None, d_forced[:, a:b])
            parts_i.append(torch.where(i >= 0, i + a, -1))
            parts_v.append(v)
        merged = merge_topk(torch.cat(parts_i, 1), torch.cat(parts_v, 1), k)
        whole = topk(d_scores, k, None, d_forced)
        want = topk_reference(scores, k, None, forced)
        assert_same(merged, want)
        assert_same(whole, want)


def test_captures_in_a_cuda_graph():
    g = torch.Generator().manual_seed(7)
    static = torch.randn(64, 1344, generator=g).cuda()
    valid = torch.full((64,), 1000, device="cuda")
    topk(static, 16, valid)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_i, out_v = topk(static, 16, valid)
    fresh = torch.randint(0, 50, (64, 1344), generator=g).float()
    static.copy_(fresh.cuda())
    valid.fill_(1344)
    graph.replay()
    torch.cuda.synchronize()
    assert_same((out_i, out_v), topk_reference(fresh, 16, torch.full((64,), 1344)))
