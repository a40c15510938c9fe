"""kernels/fp8_up_gelu.py's compiled Triton kernel against its plain-torch reference. Needs CUDA
with FP8 tensor cores (compute capability 8.9 or newer).

The tensor cores sum e4m3 products in their own order and precision (on Hopper in their own
accumulator, as the engine's cuBLAS products do) and the tanh GELU takes the hardware's
tanh.approx, the reference float32 throughout, so a value on an e4m3 rounding boundary may
round the other way (1.1-1.7 % of the bytes on an H100), and one whose sum cancels may move a
little more: bytes must match almost everywhere, and every value lie within one e4m3 step
(an eighth of itself at most) or two e4m3 units (of 448) of the reference's.
"""

from unittest import mock

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
    pytest.skip("needs CUDA with FP8 tensor cores", allow_module_level=True)

from hedgerow.kernels import fp8_up_gelu_triton  # noqa: E402
from hedgerow.kernels.fp8_up_gelu import (quantize_rows, up_gelu_quantize,  # noqa: E402
                                          up_gelu_quantize_reference)


def _operands(rows, depth, width, bias=True, seed=0):
    torch.manual_seed(seed)
    x_values, x_scales = quantize_rows(torch.randn(rows, depth, device="cuda") * 3)
    w_values, w_scales = quantize_rows(torch.randn(width, depth, device="cuda") * 0.05)
    b = (torch.randn(width, device="cuda") * 0.1).bfloat16() if bias else None
    operands = [x_values, x_scales, w_values, w_scales.t().contiguous(), b, None]
    # a row scale about 4x looser than the row's largest value, as Fp8Mlp's bound is
    loose = torch.ones(rows, 1, device="cuda")
    g = up_gelu_quantize_reference(*operands[:5], loose, "tanh").float()
    operands[5] = (g.abs().amax(dim=1, keepdim=True) * 4 / 448).clamp(min=1e-6)
    return operands


def _assert_matches(operands, approximate):
    values = up_gelu_quantize(*operands, approximate)
    want = up_gelu_quantize_reference(*operands, approximate)
    assert values.shape == want.shape and values.dtype == torch.float8_e4m3fn
    got_f, want_f = values.float(), want.float()
    assert torch.equal(got_f.isnan(), want_f.isnan())
    kept = ~want_f.isnan()
    differ = values.view(torch.uint8)[kept] != want.view(torch.uint8)[kept]
    assert differ.float().mean().item() <= 0.05, differ.float().mean().item()
    # one e4m3 step is at most an eighth of the value, at the bottom of its binade
    gap = (got_f[kept] - want_f[kept]).abs()
    largest = torch.maximum(got_f[kept].abs(), want_f[kept].abs())
    assert (gap <= largest / 8 + 2).all(), gap.max()


@pytest.fixture(params=[0, 2], ids=["a-program-a-tile", "persistent"])
def programs_per_sm(request):
    """The kernel with one program a tile, and persistent (two programs an SM)."""
    with mock.patch.dict(fp8_up_gelu_triton.CONFIG, PROGRAMS_PER_SM=request.param):
        yield request.param


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("rows,depth,width,bias", [
    (1, 1024, 4096, True), (37, 1024, 4096, False), (2049, 1024, 4096, True),
    (130, 80, 200, True),   # K and N not multiples of the tiles (tensor descriptors on Hopper)
    (7, 40, 24, False),     # rows of 40 bytes: not 16-byte aligned, per-thread loads
])
def test_the_kernel_matches_its_reference(rows, depth, width, bias, approximate,
                                          programs_per_sm):
    _assert_matches(_operands(rows, depth, width, bias, seed=rows), approximate)


def test_nan_rows_zero_rows_and_a_saturating_row():
    operands = _operands(8, 256, 384)
    x = torch.randn(8, 256, device="cuda") * 3
    x[1, 5] = float("nan")   # a NaN in the input: its row NaN
    x[2] = 0.0               # a zero row: GELU(bias) alone
    operands[0], operands[1] = quantize_rows(x)
    operands[5][3] = 1e-6    # a scale too small: the row saturates at +-448
    operands[5][4] = float("nan")
    _assert_matches(operands, "tanh")
    values = up_gelu_quantize(*operands, "tanh").float()
    assert values[1].isnan().all() and values[4].isnan().all()
    assert (values[3].abs() == 448).sum() > 100


def test_no_rows_gives_no_values():
    operands = _operands(3, 64, 32)
    operands[0], operands[1], operands[5] = operands[0][:0], operands[1][:0], operands[5][:0]
    assert up_gelu_quantize(*operands, "tanh").shape == (0, 32)


def test_compiled_and_captured_it_gives_the_eager_bytes():
    operands = _operands(300, 256, 512)
    eager = up_gelu_quantize(*operands, "tanh")
    compiled = torch.compile(lambda *a: up_gelu_quantize(*a, "tanh"), fullgraph=True)
    assert torch.equal(compiled(*operands).view(torch.uint8), eager.view(torch.uint8))
    graph = torch.cuda.CUDAGraph()
    compiled(*operands)  # warm, outside the capture
    with torch.cuda.graph(graph):
        captured = compiled(*operands)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured.view(torch.uint8), eager.view(torch.uint8))
