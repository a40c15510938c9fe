"""kernels/gelu_quantize.py's compiled Triton kernel against its plain-torch reference. Needs
CUDA (and e4m3, which every CUDA GPU torch runs on can store).

The kernel's GELU is its own float32 formula (x sigmoid(2u) for the tanh one, libdevice's erf),
a few ulps from torch's, so a value sitting on an e4m3 rounding boundary may round the other
way: bytes must match almost everywhere, and where they do not, by one e4m3 step.
"""

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.kernels.gelu_quantize import (gelu_quantize_rows,  # noqa: E402
                                            gelu_quantize_rows_reference)

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _assert_matches(y, approximate):
    values, scale = gelu_quantize_rows(y, approximate)
    want_values, want_scale = gelu_quantize_rows_reference(y, approximate)
    assert values.shape == y.shape and values.dtype == torch.float8_e4m3fn
    assert scale.shape == (y.shape[0], 1) and scale.dtype == torch.float32
    assert torch.equal(scale.isfinite(), want_scale.isfinite())
    kept = want_scale.isfinite()
    torch.testing.assert_close(scale[kept], want_scale[kept], rtol=1e-5, atol=0)
    rows = kept.squeeze(1)
    got, want = values[rows].view(torch.uint8), want_values[rows].view(torch.uint8)
    differ = got != want
    assert differ.float().mean().item() <= 1e-3, differ.float().mean().item()
    # the same sign, one e4m3 step apart (neighbouring codes of one sign are neighbouring bytes)
    steps = (got[differ].int() - want[differ].int()).abs()
    assert (steps == 1).all(), steps.max()


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,width", [(1, 1), (3, 7), (127, 1030), (2049, 4096), (5, 3072),
                                        (2, 16384)])
def test_the_kernel_matches_its_reference(rows, width, dtype, approximate):
    torch.manual_seed(rows + width)
    y = (torch.randn(rows, width, device="cuda") * 3).to(dtype)
    _assert_matches(y, approximate)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_special_values_and_a_strided_input(approximate):
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e38, -1e38,
                             88.0, -88.0, 1.5, -2.5, 1e-30], device="cuda")
    y = torch.randn(len(specials), 40, device="cuda")
    y[:, 3] = specials
    y[-1] = 0.0  # a row of zeros gets the smallest scale, not 0/0
    _assert_matches(y.to(torch.bfloat16), approximate)
    values, scale = gelu_quantize_rows(y.to(torch.bfloat16), approximate)
    assert scale[0].isnan() and scale[-1].item() == pytest.approx(1e-12 / 448)
    _assert_matches(torch.randn(6, 64, device="cuda")[:, ::2], approximate)


def test_it_compiles_and_captures_as_one_op():
    y = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(lambda t: gelu_quantize_rows(t, "tanh"), fullgraph=True)
    eager = gelu_quantize_rows(y, "tanh")
    for got, want in zip(compiled(y), eager):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        captured = gelu_quantize_rows(y, "tanh")
    y.mul_(2)
    graph.replay()
    for got, want in zip(captured, gelu_quantize_rows(y, "tanh")):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
