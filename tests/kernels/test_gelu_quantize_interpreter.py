"""kernels/gelu_quantize_triton.py in Triton's CPU interpreter against the reference (the CI
subset), and the public function's argument checks and CPU path.

Triton decides interpreted-or-compiled when it is first imported, so the kernel runs in a fresh
child process with TRITON_INTERPRET=1. The interpreter's own e4m3 cast rounds wrongly where the
mantissa carries into the exponent and in e4m3's subnormals (-7.96 becomes -4, not -8), so here
the scales are compared exactly and the values within their binade; test_gelu_quantize_gpu.py
compares the compiled kernel's bytes on a GPU, whose cast is the hardware's.
"""

import pytest
import torch

from hedgerow.kernels.gelu_quantize import (gelu_quantize_rows, gelu_quantize_rows_reference,
                                            quantize_rows)

CHILD = """
import torch
from hedgerow.kernels.gelu_quantize import gelu_quantize_rows_reference
from hedgerow.kernels.gelu_quantize_triton import gelu_quantize_rows_triton
torch.manual_seed(0)
specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e38, -1e38,
                         88.0, -88.0, 1.5, -2.5, 1e-30])
cases = [(torch.randn(rows, width) * 3).to(dtype) for rows, width, dtype in
         ((1, 1, torch.float32), (3, 7, torch.bfloat16), (5, 1030, torch.bfloat16),
          (2, 4096, torch.float16))]
cases += [torch.zeros(2, 5), torch.randn(4, 16)[:, ::2], torch.empty(0, 8)]
column = torch.ones(len(specials), 1)
cases += [torch.cat((column, specials[:, None], -2 * column), 1)]
for approximate in ("tanh", "none"):
    for y in cases:
        values, scale = gelu_quantize_rows_triton(y, approximate)
        want_values, want_scale = gelu_quantize_rows_reference(y, approximate)
        assert values.dtype == torch.float8_e4m3fn and values.shape == y.shape
        assert scale.dtype == torch.float32 and scale.shape == (y.shape[0], 1)
        # non-finite rows alike (torch's exact GELU gives NaN at inf, the kernel inf)
        assert torch.equal(scale.isfinite(), want_scale.isfinite())
        has_nan = y.isnan().any(1, keepdim=True)
        assert torch.equal(scale.isnan() & has_nan, has_nan)
        kept = want_scale.isfinite()
        torch.testing.assert_close(scale[kept], want_scale[kept], rtol=2e-6, atol=0)
        finite = want_scale.isfinite().expand_as(y) & want_values.float().isfinite()
        got, want = values.float()[finite], want_values.float()[finite]
        assert ((got - want).abs() <= 0.5 * want.abs() + 2.0 ** -9).all(), (got, want)
print("ok", 2 * len(cases))
"""


def test_the_kernel_matches_its_reference_interpreted(run_interpreted):
    assert run_interpreted(CHILD) == "ok 16"


def test_off_cuda_the_reference_runs():
    y = torch.randn(3, 10)
    for got, want in zip(gelu_quantize_rows(y, "tanh"), gelu_quantize_rows_reference(y, "tanh")):
        assert torch.equal(got.view(torch.uint8) if got.dtype != torch.float32 else got,
                           want.view(torch.uint8) if want.dtype != torch.float32 else want)


def test_the_reference_is_gelu_then_row_wise_e4m3():
    y = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [float("nan"), 1.0, 1.0]])
    values, scale = gelu_quantize_rows_reference(y, "none")
    gelu = torch.nn.functional.gelu(y)
    assert scale[0].item() == pytest.approx(gelu[0].abs().max().item() / 448)
    assert values[0].float().abs().max().item() == 448  # the row's whole e4m3 range
    torch.testing.assert_close(values[0].float() * scale[0], gelu[0], rtol=0.07, atol=0)
    assert scale[1].item() == pytest.approx(1e-12 / 448) and (values[1].float() == 0).all()
    assert scale[2].isnan().all()  # a NaN keeps its row non-finite through the product
    torch.testing.assert_close(quantize_rows(gelu)[1], scale, equal_nan=True)


@pytest.mark.parametrize("y,approximate,message", [
    (torch.zeros(2, 3, 4), "tanh", r"\[M, N\]"),
    (torch.zeros(2, 0), "tanh", r"N >= 1"),
    (torch.zeros(2, 3), "erf", "approximate must be one of"),
    (torch.zeros(2, 3, dtype=torch.int32), "tanh", "bf16, fp16 or float32"),
    (torch.zeros(2, 3, dtype=torch.float8_e4m3fn), "tanh", "bf16, fp16 or float32"),
])
def test_misshapen_inputs_are_refused_by_name(y, approximate, message):
    with pytest.raises(ValueError, match=message):
        gelu_quantize_rows(y, approximate)
