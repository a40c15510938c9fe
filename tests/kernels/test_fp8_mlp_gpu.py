"""kernels/fp8_mlp.py's compiled Triton kernels against their plain-torch references. Needs CUDA
with FP8 tensor cores (compute capability 8.9 or newer).

The tensor cores sum e4m3 products in their own order and precision (Hopper's keep fewer
accumulator bits than float32: scales 0.3 % apart were seen on an H100), the reference in
float32 in another, so a value sitting on an e4m3 rounding boundary may round the other way:
scales must agree within 1 %, bytes almost everywhere and, where they do not, by one e4m3 step (a value
near zero may change sign).
"""

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
    pytest.skip("needs CUDA with FP8 tensor cores", allow_module_level=True)

from hedgerow.kernels import fp8_mlp_triton  # noqa: E402
from hedgerow.kernels.fp8_mlp import (down_product, down_product_blocks,  # noqa: E402
                                      down_product_blocks_reference, down_product_reference,
                                      quantize_weight_blocks, up_gelu_quantize,
                                      up_gelu_quantize_reference)
from hedgerow.kernels.gelu_quantize import quantize_rows  # noqa: E402


@pytest.fixture(params=[(128, False), (256, False), (128, True), (256, True)],
                ids=["tiles128", "tiles256", "tiles128-tma", "tiles256-tma"])
def up_tile_width(request):
    """The up kernel with tiles of 128 and of 256 columns (two scale blocks a tile), its tiles
    loaded per thread or through tensor descriptors."""
    before = dict(fp8_mlp_triton.UP_CONFIG)
    fp8_mlp_triton.UP_CONFIG["BLOCK_N"], fp8_mlp_triton.UP_CONFIG["TMA"] = request.param
    yield request.param
    fp8_mlp_triton.UP_CONFIG.clear()
    fp8_mlp_triton.UP_CONFIG.update(before)


def _weight(n, k, scale=0.05):
    values, scales = quantize_rows(torch.randn(n, k, device="cuda") * scale)
    return values, scales.t().contiguous()


def _operands(rows, depth, width, bias, seed):
    torch.manual_seed(seed)
    x_values, x_scales = quantize_rows(torch.randn(rows, depth, device="cuda") * 3)
    b = (torch.randn(width, device="cuda") * 0.1).bfloat16() if bias else None
    return x_values, x_scales, *_weight(width, depth), b


def _assert_up_matches(operands, approximate):
    values, scales = up_gelu_quantize(*operands, approximate)
    want_values, want_scales = up_gelu_quantize_reference(*operands, approximate)
    assert values.shape == want_values.shape and values.dtype == torch.float8_e4m3fn
    assert scales.shape == want_scales.shape and scales.dtype == torch.float32
    assert torch.equal(scales.isnan(), want_scales.isnan())
    kept = want_scales.isfinite()
    torch.testing.assert_close(scales[kept], want_scales[kept], rtol=1e-2, atol=0)
    rows = kept.all(0)
    got, want = values[rows].view(torch.uint8), want_values[rows].view(torch.uint8)
    differ = got != want
    assert differ.float().mean().item() <= 2e-2, differ.float().mean().item()
    # one e4m3 step apart (an eighth of the larger magnitude), plus about a thousandth of the
    # block's range (448): Hopper's FP8 tensor cores keep fewer accumulator bits than float32,
    # which moves small values, near zero even across it (bytes 139 codes apart on an H200)
    a, b = values[rows].float()[differ], want_values[rows].float()[differ]
    assert ((a - b).abs() <= torch.maximum(a.abs(), b.abs()) / 8 + 0.5).all()
    return values, scales


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("rows,depth,width,bias", [
    (1, 128, 128, True), (127, 384, 1536, True), (2049, 1024, 4096, True),
    (300, 256, 512, False), (8192, 1024, 4096, True)])
def test_the_kernels_match_their_references(rows, depth, width, bias, approximate,
                                            up_tile_width):
    operands = _operands(rows, depth, width, bias, rows + width)
    values, scales = _assert_up_matches(operands, approximate)
    down = (*_weight(depth, width, 0.02), operands[-1][:depth] if bias else None)
    for out_dtype in (torch.bfloat16, torch.float32):
        got = down_product(values, scales, *down, out_dtype)
        want = down_product_reference(values, scales, *down, torch.float32)
        assert got.dtype == out_dtype and got.shape == (rows, depth)
        torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-3 * want.abs().max())


@pytest.mark.parametrize("rows,depth,width,bias", [
    (1, 128, 128, True), (127, 384, 1536, True), (2049, 1024, 4096, True),
    (8191, 1024, 4096, False)])
def test_cublas_block_scaled_down_product_matches_its_reference(rows, depth, width, bias):
    """cuBLAS's 1 x 128 by 128 x 128 product, M padded to a multiple of 4 and cut back."""
    operands = _operands(rows, depth, width, bias, rows)
    values, scales = up_gelu_quantize(*operands, "tanh")
    torch.manual_seed(rows + 1)
    weight = torch.randn(depth, width, device="cuda") * 0.02
    down = (*quantize_weight_blocks(weight), operands[-1][:depth] if bias else None)
    got = down_product_blocks(values, scales, *down, torch.bfloat16)
    want = down_product_blocks_reference(values, scales, *down, torch.float32)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, depth)
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-3 * want.abs().max())


def test_special_values_keep_their_rows_non_finite():
    x_values, x_scales, *up = _operands(64, 256, 256, True, 1)
    x_values[3, 5] = float("nan")
    x_scales[7] = float("inf")
    values, scales = _assert_up_matches((x_values, x_scales, *up), "tanh")
    assert scales[:, 3].isnan().all() and not scales[:, 7].isfinite().all()
    assert scales[:, [0, 1, 2, 4, 5, 6]].isfinite().all()
    out = down_product(values, scales, *_weight(256, 256), None, torch.bfloat16)
    assert not out[3].isfinite().any() and out[0].isfinite().all()


def test_a_zero_input_gives_the_gelu_of_the_bias():
    x_values, x_scales, *up = _operands(5, 128, 256, True, 2)
    x_values.zero_()
    values, scales = up_gelu_quantize(x_values, x_scales, *up, "none")
    gelu = torch.nn.functional.gelu(up[-1].float())
    deq = values.float().unflatten(1, (2, 128)) * scales.t()[:, :, None]
    torch.testing.assert_close(deq.flatten(1), gelu.expand(5, -1), rtol=0.07, atol=1e-6)


def test_the_ops_compile_and_capture():
    operands = _operands(4096, 1024, 4096, True, 3)
    down = (*_weight(1024, 4096, 0.02), None)

    def mlp(*args):
        return down_product(*up_gelu_quantize(*args, "tanh"), *down, torch.bfloat16)

    eager = mlp(*operands)
    compiled = torch.compile(mlp, fullgraph=True)
    torch.testing.assert_close(compiled(*operands), eager, rtol=0, atol=0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = compiled(*operands)
    graph.replay()
    torch.testing.assert_close(captured, eager, rtol=0, atol=0)
