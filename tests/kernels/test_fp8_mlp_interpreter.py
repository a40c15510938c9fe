"""kernels/fp8_mlp_triton.py in Triton's CPU interpreter against the references (the CI subset),
and the public functions' argument checks and CPU path.

Triton decides interpreted-or-compiled when it is first imported, so the kernels run in a fresh
child process with TRITON_INTERPRET=1, with small tiles (the interpreter is slow). Its e4m3
cast rounds wrongly where the mantissa carries into the exponent and in e4m3's subnormals, so
here the up product's scales are compared closely and its values within their binade, and the
down product runs on the reference's values; test_fp8_mlp_gpu.py compares the compiled kernels'
bytes on a GPU.
"""

import pytest
import torch

from hedgerow.kernels.fp8_mlp import (BLOCK, down_product, down_product_reference,
                                      up_gelu_quantize, up_gelu_quantize_reference)
from hedgerow.kernels.gelu_quantize import quantize_rows

CHILD = """
import itertools
import torch
from hedgerow.kernels import fp8_mlp_triton as k
from hedgerow.kernels.fp8_mlp import up_gelu_quantize_reference, down_product_reference
from hedgerow.kernels.gelu_quantize import quantize_rows
k.UP_CONFIG.update(BLOCK_M=32, BLOCK_K=128)
k.DOWN_CONFIG.update(BLOCK_M=32)
torch.manual_seed(0)

def weight(n, k):
    values, scales = quantize_rows(torch.randn(n, k) * 0.05)
    return values, scales.t().contiguous()

cases = 0
for (block_n, rows, depth, width, bias, approximate), tma in itertools.product((
        (128, 37, 256, 384, True, "tanh"), (128, 5, 128, 256, False, "none"),
        (128, 1, 128, 128, True, "none"), (128, 0, 128, 128, True, "tanh"),
        (256, 37, 128, 512, True, "tanh"),    # two blocks of 128 in a tile
        (256, 5, 128, 384, False, "none")),   # 384 is not a multiple: 128-wide tiles
        (False, True)):                       # per-thread loads, tensor descriptors
    k.UP_CONFIG.update(BLOCK_N=block_n, TMA=tma)
    x = torch.randn(rows, depth) * 3
    if rows > 2:
        x[1, 3] = float("nan")  # a NaN row: every block's scale NaN
        x[2] = 0.0              # a zero row: GELU(bias) only
    x_values, x_scales = quantize_rows(x)
    up = (*weight(width, depth), (torch.randn(width) * 0.1).bfloat16() if bias else None)
    values, scales = k.up_gelu_quantize_triton(x_values, x_scales, *up, approximate)
    want_values, want_scales = up_gelu_quantize_reference(x_values, x_scales, *up, approximate)
    assert values.dtype == torch.float8_e4m3fn and values.shape == (rows, width)
    assert scales.dtype == torch.float32 and scales.shape == (width // 128, rows)
    torch.testing.assert_close(scales, want_scales, rtol=2e-5, atol=0, equal_nan=True)
    finite = want_values.float().isfinite()
    got, want = values.float()[finite], want_values.float()[finite]
    assert ((got - want).abs() <= 0.5 * want.abs() + 2.0 ** -9).all(), (got, want)
    down = (*weight(depth, width), torch.zeros(depth).bfloat16() if bias else None)
    for out_dtype in (torch.bfloat16, torch.float32):
        out = k.down_product_triton(want_values, want_scales, *down, out_dtype)
        expected = down_product_reference(want_values, want_scales, *down, torch.float32)
        assert out.dtype == out_dtype and out.shape == (rows, depth)
        torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2, equal_nan=True)
    cases += 1
print("ok", cases)
"""


def test_the_kernels_match_their_references_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 12"


def _weight(n, k, seed=0):
    torch.manual_seed(seed)
    values, scales = quantize_rows(torch.randn(n, k) * 0.05)
    return values, scales.t().contiguous()


def test_the_reference_blocks_are_128_columns_of_gelu_at_e4m3_range():
    x_values, x_scales = quantize_rows(torch.randn(3, BLOCK) * 2)
    weight = _weight(2 * BLOCK, BLOCK)
    values, scales = up_gelu_quantize_reference(x_values, x_scales, *weight, None, "tanh")
    y = (x_values.float() * x_scales) @ (weight[0].float() * weight[1].t()).t()
    gelu = torch.nn.functional.gelu(y, approximate="tanh")
    assert scales.shape == (2, 3)
    for block in range(2):
        columns = slice(block * BLOCK, (block + 1) * BLOCK)
        torch.testing.assert_close(scales[block], gelu[:, columns].abs().amax(1) / 448)
        assert (values[:, columns].float().abs().amax(1) == 448).all()  # each block's range
        torch.testing.assert_close(values[:, columns].float() * scales[block][:, None],
                                   gelu[:, columns], rtol=0.07, atol=1e-6)


def test_the_down_reference_applies_each_blocks_scale_to_its_part_of_k():
    values = torch.ones(2, 2 * BLOCK).to(torch.float8_e4m3fn)
    scales = torch.tensor([[1.0, 2.0], [0.5, 0.0]])  # [K / 128, M]
    weight = torch.ones(BLOCK, 2 * BLOCK).to(torch.float8_e4m3fn)
    out = down_product_reference(values, scales, weight, torch.ones(1, BLOCK), None,
                                 torch.float32)
    assert torch.equal(out, torch.tensor([[1.5 * BLOCK] * BLOCK, [2.0 * BLOCK] * BLOCK]))


def test_off_cuda_the_references_run():
    x_values, x_scales = quantize_rows(torch.randn(4, BLOCK))
    up = (*_weight(BLOCK, BLOCK), torch.randn(BLOCK).bfloat16())
    got = up_gelu_quantize(x_values, x_scales, *up, "none")
    want = up_gelu_quantize_reference(x_values, x_scales, *up, "none")
    assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8))
    assert torch.equal(got[1], want[1])
    down = (*_weight(BLOCK, BLOCK, 1), None)
    assert torch.equal(down_product(*got, *down, torch.bfloat16),
                       down_product_reference(*got, *down, torch.bfloat16))


FP8 = torch.float8_e4m3fn
X = torch.zeros(4, BLOCK).to(FP8)
S = torch.ones(4, 1)
W = torch.zeros(BLOCK, BLOCK).to(FP8)
WS = torch.ones(1, BLOCK)


@pytest.mark.parametrize("args,message", [
    ((torch.zeros(4, BLOCK), S, W, WS, None, "tanh"), "x_values must be"),
    ((X, torch.ones(4), W, WS, None, "tanh"), r"x_scales must be \[4, 1\]"),
    ((X, S, W, WS, None, "erf"), "approximate must be one of"),
    ((X, S, torch.zeros(BLOCK, 2 * BLOCK).to(FP8), WS, None, "tanh"), "K = 128"),
    ((X[:, :64], S, W[:, :64], WS, None, "tanh"), "multiples of 128"),
    ((X, S, W, torch.ones(BLOCK, 1), None, "tanh"), r"weight_scales must be \[1, 128\]"),
    ((X, S, W, WS, torch.zeros(3), "tanh"), r"bias must be \[128\]"),
])
def test_misshapen_up_inputs_are_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        up_gelu_quantize(*args)


@pytest.mark.parametrize("args,message", [
    ((X.float(), torch.ones(1, 4), W, WS, None, torch.bfloat16), "values must be"),
    ((X, torch.ones(4, 1), W, WS, None, torch.bfloat16), r"scales must be \[1, 4\]"),
    ((X, torch.ones(1, 4), W, WS, None, torch.int8), "out_dtype must be"),
    ((X, torch.ones(1, 4), W[:, :64], WS, None, torch.bfloat16), "K = 128"),
])
def test_misshapen_down_inputs_are_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        down_product(*args)
