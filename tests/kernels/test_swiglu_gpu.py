"""The CUDA paths of the fused SwiGLU and GELU products against plain-torch formulas. Needs CUDA.

- kernels/swiglu.py against its reference on odd sizes, three dtypes and special values;
- LinearSwiGLU (QuACK's gated GEMM from QUACK_SWIGLU_MIN_TOKENS, cuBLAS + the kernel below)
  and LinearGelu (QuACK from QUACK_GELU_MIN_TOKENS, cuBLASLt below) against the float32
  formula on token counts either side of each threshold; QuACK cases skip where it does not
  import (the engine then never calls it).
"""

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.engine import cuda_linear  # noqa: E402
from hedgerow.engine.cuda_linear import LinearGelu, LinearSwiGLU  # noqa: E402
from hedgerow.engine.models.qwen3 import SwiGLU  # noqa: E402
from hedgerow.kernels.swiglu import swiglu_interleaved, swiglu_reference  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,width", [(1, 2), (3, 6), (127, 258), (1000, 1030), (5, 6144)])
def test_the_kernel_matches_its_reference(rows, width, dtype):
    torch.manual_seed(rows)
    y = (torch.randn(rows, width, device="cuda") * 4).to(dtype)
    torch.testing.assert_close(swiglu_interleaved(y), swiglu_reference(y))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_values_come_out_as_torch_computes_them(dtype):
    big = torch.finfo(dtype).max
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, big, -big,
                             1e-30, 88.0, -88.0, 100.0, -100.0], device="cuda")
    gate, up = torch.meshgrid(specials, specials, indexing="ij")
    y = torch.stack((gate.flatten(), up.flatten()), dim=1).reshape(-1, 2).to(dtype)
    loose = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}  # exp's last bit
    torch.testing.assert_close(swiglu_interleaved(y), swiglu_reference(y), equal_nan=True,
                               **loose)


def test_empty_and_misshapen_inputs():
    assert swiglu_interleaved(torch.empty(0, 8, device="cuda")).shape == (0, 4)
    with pytest.raises(ValueError, match="contiguous"):
        swiglu_interleaved(torch.empty(4, 7, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        swiglu_interleaved(torch.empty(8, 4, device="cuda").t())


def _close_to_float32(got, expected):
    scale = expected.abs().amax().clamp_min(1e-6)
    assert ((got.float() - expected).abs() <= 0.02 * scale).all(), \
        (got.float() - expected).abs().max().item() / scale.item()


@pytest.mark.parametrize("quack", [False, True])
@pytest.mark.parametrize("rows", [1, 129, 511, 512, 1000, 4097])
def test_the_swiglu_product_on_both_sides_of_its_threshold(rows, quack):
    if quack and cuda_linear.quack_gemm_act() is None:
        pytest.skip("QuACK does not run here")
    torch.manual_seed(rows)
    linear = nn.Linear(1024, 2 * 768, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        got = LinearSwiGLU(linear, quack=quack)(x)
        expected = SwiGLU()(nn.functional.linear(x.float(), linear.weight.float()))
    assert got.shape == (rows, 768) and got.dtype == torch.bfloat16
    _close_to_float32(got, expected)


@pytest.mark.parametrize("quack", [False, True])
@pytest.mark.parametrize("rows", [3, 4095, 4096, 5000])
def test_the_gelu_product_on_both_sides_of_its_threshold(rows, quack):
    if quack and cuda_linear.quack_gemm_act() is None:
        pytest.skip("QuACK does not run here")
    torch.manual_seed(rows)
    linear = nn.Linear(1024, 4096, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        got = LinearGelu(linear, quack=quack)(x)
        expected = nn.functional.gelu(
            nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float()),
            approximate="tanh")
    _close_to_float32(got, expected)


def test_the_products_replay_in_a_cuda_graph():
    linear = nn.Linear(1024, 1536, bias=False, device="cuda", dtype=torch.bfloat16)
    module = LinearSwiGLU(linear, quack=cuda_linear.quack_gemm_act() is not None)
    outs = {}
    graphs = []
    for rows in (64, 2048):  # the kernel's path and QuACK's
        x = torch.randn(rows, 1024, device="cuda", dtype=torch.bfloat16)
        with torch.inference_mode():
            expected = module(x)  # the first call compiles, outside capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outs[rows] = module(x)
            graph.replay()
            torch.cuda.synchronize()
            torch.testing.assert_close(outs[rows], expected)
        graphs.append(graph)
