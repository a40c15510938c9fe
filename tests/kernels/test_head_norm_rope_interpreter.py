"""kernels/head_norm_rope_triton.py in Triton's CPU interpreter against the reference (the CI
subset), and the public function's argument checks.

Triton decides interpreted-or-compiled when it is first imported, so the kernel runs in a fresh
child process with TRITON_INTERPRET=1. With CUDA present, test_head_norm_rope_gpu.py runs the
compiled kernel instead.
"""


import pytest
import torch

from hedgerow.kernels.head_norm_rope import head_norm_rope

CHILD = """
import torch
from hedgerow.kernels.head_norm_rope import head_norm_rope_reference
from hedgerow.kernels.head_norm_rope_triton import head_norm_rope_triton
torch.manual_seed(0)
checked = 0
# (tokens, query heads, key heads, value heads, head dim): odd head counts and dims that are
# not powers of two, a key-less call, one token
for tokens, nq, nk, nv, dim, dtype in ((3, 2, 1, 1, 8, torch.float32), (5, 3, 2, 2, 12, torch.bfloat16),
                                       (1, 16, 8, 8, 128, torch.bfloat16), (4, 1, 0, 0, 6, torch.float32),
                                       (2, 5, 3, 1, 64, torch.float16)):
    qkv = (torch.randn(tokens, nq + nk + nv, dim) * 3).to(dtype)
    qw, kw = torch.rand(dim) + 0.5, torch.rand(dim) + 0.5
    angles = torch.rand(tokens, dim // 2) * 1000
    cos, sin = angles.cos(), angles.sin()
    got = head_norm_rope_triton(qkv, qw, kw, cos, sin, nq, nk, 1e-6)
    want = head_norm_rope_reference(qkv, qw, kw, cos, sin, nq, nk, 1e-6)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype and g.is_contiguous()
        torch.testing.assert_close(g, w)
    checked += 1
# a strided view (the layer's own input), zeros (eps keeps it finite) and special values
qkv = torch.randn(3, 6, 16)[:, :, :8]
qkv[0, 0] = 0.0
qkv[1, 1, 3] = float("inf")
qkv[2, 2, 0] = float("nan")
cos, sin = torch.ones(3, 4), torch.zeros(3, 4)
got = head_norm_rope_triton(qkv, torch.ones(8), torch.ones(8), cos, sin, 3, 2, 1e-6)
want = head_norm_rope_reference(qkv, torch.ones(8), torch.ones(8), cos, sin, 3, 2, 1e-6)
for g, w in zip(got, want):
    torch.testing.assert_close(g, w, equal_nan=True)
assert (got[0][0, 0] == 0).all()
print("ok", checked + 1)
"""


def test_the_kernel_matches_its_reference_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 6"


def _inputs(tokens=3, heads=4, dim=8):
    qkv = torch.randn(tokens, heads, dim)
    return qkv, torch.ones(dim), torch.ones(dim), torch.ones(tokens, dim // 2), \
        torch.zeros(tokens, dim // 2)


def test_with_no_rotation_it_is_the_rms_norm_of_each_head():
    qkv, qw, kw, cos, sin = _inputs()
    q, k = head_norm_rope(qkv, qw * 2, kw, cos, sin, 2, 1, 1e-6)
    torch.testing.assert_close(q, torch.nn.functional.rms_norm(qkv[:, :2], (8,), qw * 2, 1e-6))
    torch.testing.assert_close(k, torch.nn.functional.rms_norm(qkv[:, 2:3], (8,), kw, 1e-6))


def test_a_quarter_turn_swaps_the_halves():
    qkv, qw, kw, cos, sin = _inputs(tokens=1, heads=2)
    q, _ = head_norm_rope(qkv, qw, kw, sin, cos, 1, 1, 1e-6)  # cos 0, sin 1
    normed = torch.nn.functional.rms_norm(qkv[:, :1], (8,), qw, 1e-6)
    torch.testing.assert_close(q, torch.cat((-normed[..., 4:], normed[..., :4]), dim=-1))


@pytest.mark.parametrize("change,message", [
    (lambda a: {**a, "qkv": a["qkv"][0]}, "must be \\[T, heads, D\\]"),
    (lambda a: {**a, "qkv": torch.randn(3, 4, 7)}, "must be even"),
    (lambda a: {**a, "num_q": 4}, "do not fit"),
    (lambda a: {**a, "num_q": 0}, "do not fit"),
    (lambda a: {**a, "q_weight": torch.ones(4)}, "q_weight must be \\[8\\]"),
    (lambda a: {**a, "cos": a["cos"].double()}, "cos must be float32 \\[3, 4\\]"),
    (lambda a: {**a, "sin": a["sin"][:2]}, "sin must be float32 \\[3, 4\\]"),
])
def test_bad_arguments_are_named(change, message):
    qkv, qw, kw, cos, sin = _inputs()
    arguments = {"qkv": qkv, "q_weight": qw, "k_weight": kw, "cos": cos, "sin": sin,
                 "num_q": 2, "num_k": 1, "eps": 1e-6}
    with pytest.raises(ValueError, match=message):
        head_norm_rope(**change(arguments))
