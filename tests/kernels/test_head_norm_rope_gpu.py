"""kernels/head_norm_rope.py's Triton kernel against its reference on CUDA: odd sizes, three
dtypes, special values, under torch.compile and in a CUDA graph. Needs CUDA."""

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.kernels.head_norm_rope import head_norm_rope, head_norm_rope_reference  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _inputs(tokens, nq, nk, nv, dim, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    qkv = (torch.randn(tokens, nq + nk + nv, dim, device="cuda", generator=g) * 3).to(dtype)
    qw = (torch.rand(dim, device="cuda", generator=g) + 0.5).to(dtype)
    kw = (torch.rand(dim, device="cuda", generator=g) + 0.5).to(dtype)
    angles = torch.rand(tokens, dim // 2, device="cuda", generator=g) * 40_000
    return qkv, qw, kw, angles.cos(), angles.sin()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tokens,nq,nk,nv,dim", [
    (1, 1, 1, 1, 2), (3, 2, 1, 1, 8), (7, 3, 2, 2, 12), (129, 16, 8, 8, 128),
    (1000, 32, 8, 8, 128), (33, 5, 3, 1, 96), (17, 14, 2, 2, 64), (5, 4, 0, 0, 64)])
def test_the_kernel_matches_its_reference(tokens, nq, nk, nv, dim, dtype):
    args = (*_inputs(tokens, nq, nk, nv, dim, dtype, seed=tokens), nq, nk, 1e-6)
    for got, want in zip(head_norm_rope(*args), head_norm_rope_reference(*args)):
        assert got.shape == want.shape and got.dtype == dtype and got.is_contiguous()
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_values_come_out_as_the_reference_computes_them(dtype):
    qkv, qw, kw, cos, sin = _inputs(6, 2, 1, 1, 16, dtype)
    big = torch.finfo(dtype).max
    qkv[0] = 0.0                       # all zeros: eps keeps the scale finite, the output 0
    qkv[1, 0, 3] = float("inf")
    qkv[2, 1, 0] = float("nan")
    qkv[3, 2, 5] = -float("inf")
    qkv[4, 0] = big                    # the float32 sum of squares overflows to inf
    qkv[5, 1] = torch.finfo(dtype).tiny
    args = (qkv, qw, kw, cos, sin, 2, 1, 1e-6)
    for got, want in zip(head_norm_rope(*args), head_norm_rope_reference(*args)):
        torch.testing.assert_close(got, want, equal_nan=True)


def test_a_strided_view_of_the_fused_projection_is_read_in_place():
    # the layer's input: a [T, H, D] view of the product with a wider row
    wide, qw, kw, cos, sin = _inputs(9, 6, 3, 3, 128, torch.bfloat16)
    qkv = wide[:, :, :64]
    args = (qkv, qw[:64], kw[:64], cos[:, :32].contiguous(), sin[:, :32].contiguous(), 6, 3,
            1e-6)
    for got, want in zip(head_norm_rope(*args), head_norm_rope_reference(*args)):
        torch.testing.assert_close(got, want)


def test_it_traces_under_torch_compile_and_replays_in_a_cuda_graph():
    qkv, qw, kw, cos, sin = _inputs(512, 16, 8, 8, 128, torch.bfloat16)

    def layer(qkv, cos, sin):  # the op between two generated kernels
        q, k = head_norm_rope(qkv * 2, qw, kw, cos, sin, 16, 8, 1e-6)
        return torch.cat((q, k), dim=1) + 1

    compiled = torch.compile(layer, fullgraph=True)
    with torch.inference_mode():
        expected = layer(qkv, cos, sin)
        torch.testing.assert_close(compiled(qkv, cos, sin), expected)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = compiled(qkv, cos, sin)
        qkv.mul_(-1)
        expected = layer(qkv, cos, sin)
        graph.replay()
        torch.cuda.synchronize()
    torch.testing.assert_close(out, expected)


def test_no_tokens_gives_empty_outputs():
    args = (*_inputs(0, 2, 1, 1, 8, torch.bfloat16), 2, 1, 1e-6)
    q, k = head_norm_rope(*args)
    assert q.shape == (0, 2, 8) and k.shape == (0, 1, 8)
