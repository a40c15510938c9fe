"""kernels/fp8_up_gelu_triton.py in Triton's CPU interpreter against the reference (the CI
subset), and the public function's argument checks and CPU path.

Triton decides interpreted-or-compiled when it is first imported, so the kernel runs in a fresh
child process with TRITON_INTERPRET=1, with small tiles (the interpreter is slow) and its
per-thread loads (tensor descriptors are for Hopper's compiled kernels). The interpreter's own
e4m3 cast rounds wrongly where the mantissa carries into the exponent and in e4m3's subnormals,
and turns a NaN into 384, so the values are compared within their binade here and NaNs are left
to test_fp8_up_gelu_gpu.py, which compares the compiled kernel's bytes on a GPU.
"""

import pytest
import torch

from hedgerow.kernels.fp8_up_gelu import (FP8_MAX, quantize_rows, up_gelu_quantize,
                                          up_gelu_quantize_reference)

CHILD = """
import itertools
import torch
from hedgerow.kernels import fp8_up_gelu_triton as k
from hedgerow.kernels.fp8_up_gelu import quantize_rows, up_gelu_quantize_reference
k.CONFIG.update(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=2)
torch.manual_seed(0)
cases = 0
for (rows, depth, width, bias, approximate), per_sm in itertools.product((
        (37, 80, 72, True, "tanh"),   # K and N not multiples of the tiles: masked
        (5, 64, 32, False, "none"), (1, 16, 16, True, "none"), (0, 32, 32, True, "tanh")),
        (0, 2)):                      # one program a tile; two programs walking the tiles
    k.CONFIG["PROGRAMS_PER_SM"] = per_sm
    x = torch.randn(rows, depth) * 3
    out_scales = torch.rand(rows, 1) * 0.05 + 0.01
    if rows > 4:
        x[2] = 0.0                  # a zero row: GELU(bias) only
        out_scales[3] = 1e-6        # a scale too small: the row saturates at +-448
    x_values, x_scales = quantize_rows(x)
    w_values, w_scales = quantize_rows(torch.randn(width, depth) * 0.05)
    b = (torch.randn(width) * 0.1).bfloat16() if bias else None
    operands = (x_values, x_scales, w_values, w_scales.t().contiguous(), b, out_scales)
    values = k.up_gelu_quantize_triton(*operands, approximate)
    want = up_gelu_quantize_reference(*operands, approximate)
    assert values.dtype == torch.float8_e4m3fn and values.shape == (rows, width)
    got, want = values.float(), want.float()
    assert ((got - want).abs() <= 0.5 * want.abs() + 2.0 ** -9).all(), (got, want)
    if rows > 4:
        assert (got[3].abs() == 448).sum() > width // 4, got[3]
    cases += 1
print("ok", cases)
"""


def test_the_kernel_matches_its_reference_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 8"


def _operands(rows=3, depth=32, width=48, bias=True):
    torch.manual_seed(0)
    x_values, x_scales = quantize_rows(torch.randn(rows, depth))
    w_values, w_scales = quantize_rows(torch.randn(width, depth) * 0.1)
    b = torch.randn(width).bfloat16() if bias else None
    return [x_values, x_scales, w_values, w_scales.t().contiguous(), b,
            torch.full((rows, 1), 0.01)]


def test_the_reference_is_gelu_over_the_row_scale_saturating_at_e4m3s_range():
    operands = _operands()
    x_values, x_scales, w_values, w_scales, b, out_scales = operands
    y = (x_values.float() * x_scales) @ (w_values.float() * w_scales.t()).t() + b.float()
    scaled = torch.nn.functional.gelu(y, approximate="tanh") / out_scales
    values = up_gelu_quantize_reference(*operands, "tanh")
    assert torch.equal(values.view(torch.uint8),
                       scaled.clamp(-FP8_MAX, FP8_MAX).to(values.dtype).view(torch.uint8))
    operands[5] = torch.full((3, 1), 1e-9)
    assert values.float().abs().max() < FP8_MAX
    assert up_gelu_quantize_reference(*operands, "tanh").float().abs().max() == FP8_MAX


def test_off_cuda_the_reference_runs():
    operands = _operands(bias=False)
    assert torch.equal(up_gelu_quantize(*operands, "none").view(torch.uint8),
                       up_gelu_quantize_reference(*operands, "none").view(torch.uint8))


@pytest.mark.parametrize("index,value,message", [
    (0, torch.zeros(3, 32), "x_values must be 2-D float8_e4m3fn"),
    (2, torch.zeros(48, 16, dtype=torch.float8_e4m3fn), "must have K = 32 columns, got 16"),
    (1, torch.ones(3, 2), r"x_scales must be \[3, 1\] float32"),
    (3, torch.ones(48, 1), r"weight_scales must be \[1, 48\] float32"),
    (4, torch.zeros(47), r"bias must be \[48\]"),
    (5, torch.ones(3, 1, dtype=torch.float64), r"out_scales must be \[3, 1\] float32"),
])
def test_malformed_operands_are_refused_by_name(index, value, message):
    operands = _operands()
    operands[index] = value
    with pytest.raises(ValueError, match=message):
        up_gelu_quantize(*operands, "tanh")


def test_an_unknown_approximation_is_refused():
    with pytest.raises(ValueError, match="approximate must be one of"):
        up_gelu_quantize(*_operands(), "sigmoid")
