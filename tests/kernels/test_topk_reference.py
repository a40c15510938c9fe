"""The reference order (kernels/topk_reference.py) and the public topk on CPU.

The reference is checked against an independent Python oracle (a sort of (value, column)
tuples) and by hand on each rule; the split-and-merge property is checked with hypothesis.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hedgerow.kernels.topk import topk
from hedgerow.kernels.topk_reference import (
    SENTINEL_KEY,
    merge_topk,
    order_keys,
    topk_reference,
)

INF = float("inf")
NAN = float("nan")


def lists(indices, values):
    return indices.tolist(), [[float(v) for v in row] for row in values.float().tolist()]


def test_score_descending_then_lower_index():
    scores = torch.tensor([[0.5, 2.0, 0.5, -1.0, 2.0]])
    i, v = topk_reference(scores, 5)
    assert i.tolist() == [[1, 4, 0, 2, 3]]
    assert v.tolist() == [[2.0, 2.0, 0.5, 0.5, -1.0]]


def test_nan_ranks_as_minus_inf_and_ties_with_it_by_index():
    scores = torch.tensor([[NAN, -INF, -3.0, NAN]])
    i, v = topk_reference(scores, 4)
    assert i.tolist() == [[2, 0, 1, 3]]
    assert v.tolist() == [[-3.0, -INF, -INF, -INF]]  # NaN reports its ranking value


def test_minus_zero_equals_plus_zero_and_reports_plus_zero():
    scores = torch.tensor([[-0.0, 0.0, -0.0, -1e-45]])
    i, v = topk_reference(scores, 4)
    assert i.tolist() == [[0, 1, 2, 3]]
    assert [math.copysign(1.0, x) for x in v[0, :3].tolist()] == [1.0, 1.0, 1.0]


def test_forced_ranks_as_plus_inf_and_ties_with_real_inf_by_index():
    scores = torch.tensor([[1.0, INF, torch.finfo(torch.float32).max, -5.0, NAN]])
    forced = torch.tensor([[False, False, False, True, True]])
    i, v = topk_reference(scores, 5, forced=forced)
    # +inf (col 1) ties with forced cols 3 and 4: lower index first; FLT_MAX ranks below them
    assert i.tolist() == [[1, 3, 4, 2, 0]]
    assert v[0, :3].tolist() == [INF, INF, INF]


def test_valid_lengths_hide_columns_and_pad_with_minus_one():
    scores = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    valid = torch.tensor([2, 0, 99])
    i, v = topk_reference(scores, 4, valid_lengths=valid)
    assert i.tolist() == [[1, 0, -1, -1], [-1, -1, -1, -1], [2, 1, 0, -1]]
    assert v[0].tolist() == [2.0, 1.0, -INF, -INF]


def test_real_minus_inf_ranks_before_padding():
    i, v = topk_reference(torch.tensor([[-INF]]), 2)
    assert i.tolist() == [[0, -1]]
    assert v.tolist() == [[-INF, -INF]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_values_keep_the_input_dtype_and_bits(dtype):
    scores = torch.randn(4, 50, generator=torch.Generator().manual_seed(1)).to(dtype)
    i, v = topk_reference(scores, 7)
    assert v.dtype == dtype and i.dtype == torch.int64
    assert torch.equal(v, torch.gather(scores, 1, i))


def test_keys_are_distinct_and_above_the_sentinel():
    scores = torch.tensor([[NAN, -INF, -0.0, 0.0, INF]])
    keys = order_keys(scores, valid_lengths=torch.tensor([4]))
    assert keys[0, :4].unique().numel() == 4
    assert (keys[0, :4] > SENTINEL_KEY).all() and keys[0, 4] == SENTINEL_KEY


def test_reference_matches_an_independent_oracle(ci_case, make_case, oracle):
    scores, k, valid, forced = make_case(ci_case)
    got = lists(*topk_reference(scores, k, valid, forced))
    want = oracle(scores, k, valid, forced)
    assert got == want


def split_merge(scores, k, cuts, forced=None, topk_fn=topk_reference):
    """Top-k of each part [a, b) with global indices, then merged in the same order."""
    edges = [0, *cuts, scores.shape[1]]
    parts_i, parts_v = [], []
    for a, b in zip(edges, edges[1:]):
        if a == b:
            continue
        part_forced = None if forced is None else forced[:, a:b].contiguous()
        i, v = topk_fn(scores[:, a:b].contiguous(), k, None, part_forced)
        parts_i.append(torch.where(i >= 0, i + a, -1))
        parts_v.append(v)
    return merge_topk(torch.cat(parts_i, 1), torch.cat(parts_v, 1), k)


VALUES = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, INF, -INF, NAN, 2.0, 1e-40])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    row=st.lists(VALUES | st.floats(-4, 4, width=32), min_size=1, max_size=80),
    k=st.integers(1, 20),
    cut_points=st.lists(st.floats(0, 1), max_size=5),
    forced_every=st.integers(0, 9),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def test_split_then_merge_equals_the_whole_row(row, k, cut_points, forced_every, dtype):
    scores = torch.tensor([row], dtype=torch.float32).to(dtype)
    cols = scores.shape[1]
    forced = None
    if forced_every:
        forced = (torch.arange(cols) % (forced_every + 3) == forced_every)[None, :]
    cuts = sorted(int(p * cols) for p in cut_points)
    whole = topk_reference(scores, k, None, forced)
    merged = split_merge(scores, k, cuts, forced)
    assert torch.equal(merged[0], whole[0])
    assert torch.equal(merged[1].float().view(torch.int32), whole[1].float().view(torch.int32))


def test_public_topk_on_cpu_is_the_reference():
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(6, 333, generator=g).to(torch.bfloat16)
    valid = torch.tensor([333, 5, 0, 100, 400, 17])
    forced = torch.rand(6, 333, generator=g) < 0.05
    got = topk(scores, 16, valid, forced)
    want = topk_reference(scores, 16, valid, forced)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_public_topk_accepts_non_contiguous_scores():
    scores = torch.randn(40, 8, generator=torch.Generator().manual_seed(4)).t()
    got = topk(scores, 3)
    want = topk_reference(scores.contiguous(), 3)
    assert torch.equal(got[0], want[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"k": 0}, ValueError, "k must be at least 1"),
        ({"k": -3}, ValueError, "k must be at least 1"),
        ({"k": 2.0}, TypeError, "k must be an int"),
        ({"k": True}, TypeError, "k must be an int"),
        ({"scores": torch.zeros(5)}, ValueError, "scores must be 2-D"),
        ({"scores": torch.zeros(2, 3, 4)}, ValueError, "scores must be 2-D"),
        ({"scores": torch.zeros(2, 5, dtype=torch.float64)}, TypeError, "float32, bfloat16"),
        ({"scores": torch.zeros(2, 5, dtype=torch.int32)}, TypeError, "float32, bfloat16"),
        ({"scores": [[1.0]]}, TypeError, "scores must be a torch.Tensor"),
        ({"valid_lengths": torch.tensor([1.0, 2.0])}, TypeError, "int32 or int64"),
        ({"valid_lengths": torch.tensor([1, 2, 3])}, ValueError, r"shape \[rows\]"),
        ({"valid_lengths": [1, 2]}, TypeError, "valid_lengths must be a torch.Tensor"),
        ({"forced": torch.zeros(2, 5)}, TypeError, "bool mask"),
        ({"forced": torch.zeros(2, 4, dtype=torch.bool)}, ValueError, "shape of scores"),
    ],
)
def test_bad_arguments_raise_a_specific_error(kwargs, error, message):
    args = {"scores": torch.zeros(2, 5), "k": 3, "valid_lengths": None, "forced": None}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        topk(**args)


def test_empty_shapes():
    i, v = topk(torch.zeros(0, 5), 3)
    assert i.shape == (0, 3) and v.shape == (0, 3)
    i, v = topk(torch.zeros(2, 0), 3)
    assert i.tolist() == [[-1] * 3] * 2


def test_custom_op_passes_opcheck():
    scores = torch.randn(3, 20, generator=torch.Generator().manual_seed(5))
    valid = torch.tensor([20, 4, 0])
    forced = torch.zeros(3, 20, dtype=torch.bool)
    forced[0, 7] = True
    torch.library.opcheck(torch.ops.hedgerow.topk.default, (scores, 5, valid, forced))
    torch.library.opcheck(torch.ops.hedgerow.topk.default, (scores, 25, None, None))
