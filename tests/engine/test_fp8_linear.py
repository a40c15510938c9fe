"""FP8 products (engine/fp8_linear.py, `--dtype float8`) on the CPU: torch runs
`torch._scaled_mm` with row-wise scales there too, so the quantization, both paths of the
wrapper, the model rewrite and the refusals are checked here; on a GPU (the FP8 tensor cores,
the compiled and captured engine) in tests/engine/test_gpu_engine.py."""

import pytest
import torch
from torch import nn

from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.cuda_linear import LinearSwiGLU, use_gelu_epilogues
from hedgerow.engine.fp8_linear import Fp8Linear, Fp8Mlp, use_fp8_products
from hedgerow.kernels.fp8_up_gelu import FP8, FP8_MAX, quantize_rows
from hedgerow.engine.models.bert import BertConfig, BertModel, MaskedLM
from hedgerow.errors import ConfigError, ModelLoadError


def _relative_error(got, expected):
    return ((got.float() - expected.float()).norm() / expected.float().norm()).item()


def test_each_row_uses_the_whole_e4m3_range():
    torch.manual_seed(0)
    x = torch.randn(37, 48, dtype=torch.bfloat16) * torch.logspace(-3, 3, 37)[:, None]
    values, scales = quantize_rows(x)
    assert values.dtype == FP8 and scales.dtype == torch.float32 and scales.shape == (37, 1)
    assert torch.equal(values.float().abs().amax(dim=1), torch.full((37,), FP8_MAX))
    # e4m3 keeps 3 mantissa bits: each element within 1/16 of itself, or of the row's smallest
    # normal step for tiny ones
    back = values.float() * scales
    assert ((back - x.float()).abs() <= x.float().abs() / 16 + scales * 2 ** -6).all()


def test_a_zero_row_stays_zero_and_a_non_finite_row_stays_non_finite():
    x = torch.zeros(3, 16)
    x[1, 4] = 1.0
    x[2, 0] = float("inf")
    values, scales = quantize_rows(x)
    assert torch.equal(values[0].float(), torch.zeros(16)) and scales[0].item() > 0
    assert values[1, 4].float().item() == FP8_MAX
    assert not torch.isfinite(values[2].float() * scales[2]).all()


def _linear(k=64, n=48, bias=True, seed=1):
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=bias).to(torch.bfloat16)


@pytest.mark.parametrize("fast", [True, False])
def test_the_products_sum_as_fp8_fast_accum_says_when_the_wrapper_is_built(monkeypatch, fast):
    # The CPU's _scaled_mm sums in float32 either way, so the flag is checked where it is passed.
    from hedgerow.engine import fp8_linear
    monkeypatch.setattr(fp8_linear, "FP8_FAST_ACCUM", fast)
    mlp = Fp8Mlp(nn.Sequential(_linear(64, 96), nn.GELU("tanh")), _linear(96, 64), min_tokens=1)
    linear = Fp8Linear(_linear(), min_tokens=1)
    monkeypatch.setattr(fp8_linear, "FP8_FAST_ACCUM", not fast)  # read at build time only
    seen = []
    scaled_mm = torch._scaled_mm

    def spy(*args, **kwargs):
        seen.append(kwargs["use_fast_accum"])
        return scaled_mm(*args, **kwargs)
    monkeypatch.setattr(torch, "_scaled_mm", spy)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    linear(x), mlp(x)
    # the QKV-style product, then the down product (the up product is kernels/fp8_up_gelu.py's)
    assert seen == [fast] * 2


def test_below_its_row_count_the_wrapper_is_the_module_it_wraps():
    linear = _linear()
    wrapped = Fp8Linear(linear, min_tokens=64)
    x = torch.randn(63, 64, dtype=torch.bfloat16)
    assert torch.equal(wrapped(x), linear(x))


@pytest.mark.parametrize("bias", [True, False])
def test_from_its_row_count_the_product_runs_in_fp8(bias):
    linear = _linear(bias=bias)
    wrapped = Fp8Linear(linear, min_tokens=64)
    x = torch.randn(97, 64, dtype=torch.bfloat16)  # an odd row count
    got = wrapped(x)
    expected = nn.functional.linear(x.float(), linear.weight.float(),
                                    None if linear.bias is None else linear.bias.float())
    assert got.dtype == torch.bfloat16 and got.shape == (97, 48)
    error = _relative_error(got, expected)
    assert 0.004 < error < 0.06  # FP8's rounding: not bf16's (about 0.003), not a wrong answer
    # the same rows as the first rows of a bigger batch: row-wise scales, so row by row alike
    torch.testing.assert_close(wrapped(torch.cat((x, x)))[:97], got)


def test_a_weight_whose_sides_are_not_multiples_of_16_is_refused():
    with pytest.raises(ValueError, match="multiples of 16, got \\(40, 64\\)"):
        Fp8Linear(_linear(n=40))


def _bert(layers=2, act="gelu_pytorch_tanh"):
    torch.manual_seed(3)
    config = BertConfig(vocab_size=50, hidden_size=32, num_layers=layers, num_heads=2,
                        intermediate_size=64, max_position_embeddings=80, hidden_act=act)
    return BertModel(config).to(torch.bfloat16).eval()


def _forward(model, tokens=70):
    torch.manual_seed(4)
    ids = torch.randint(0, 50, (tokens,))
    cu = torch.tensor([0, 30, tokens], dtype=torch.int32)
    pos = torch.cat((torch.arange(30), torch.arange(tokens - 30)))
    with torch.inference_mode():
        return model(ids, pos, cu, tokens - 30, CpuRaggedAttention()).float()


def test_the_rewrite_wraps_each_layers_qkv_product_and_mlp_and_keeps_the_model():
    model = _bert(layers=3)
    before = _forward(model)
    use_gelu_epilogues(model)
    assert use_fp8_products(model, min_tokens=64) == 9
    for layer in model.layers:
        assert isinstance(layer.qkv, Fp8Linear) and isinstance(layer.up, Fp8Mlp)
        assert type(layer.down) is nn.Identity and type(layer.attn_out) is nn.Linear
    after = _forward(model)  # 70 tokens: the QKV products and the MLPs in FP8
    cosine = nn.functional.cosine_similarity(after, before, dim=-1)
    assert cosine.min().item() > 0.99
    assert not torch.equal(after, before)
    torch.testing.assert_close(_forward(model, tokens=60), _forward(_bert(layers=3), 60),
                               rtol=2e-2, atol=2e-2)  # under 64 tokens: the bf16 modules
    assert use_fp8_products(model) == 0  # nothing left to wrap


def test_the_products_to_take_can_be_named():
    model = _bert(layers=2)
    assert use_fp8_products(model, min_tokens=64, products=("qkv",)) == 2
    assert type(model.layers[0].down) is nn.Linear
    assert use_fp8_products(model, min_tokens=64, products=("mlp",)) == 4
    assert type(model.layers[0].down) is nn.Identity


@pytest.mark.parametrize("act", ["relu", "silu"])
def test_an_mlp_whose_activation_is_not_gelu_stays_bf16(act):
    model = _bert(layers=1, act=act)
    assert use_fp8_products(model, min_tokens=1) == 1  # the QKV product only
    assert type(model.layers[0].down) is nn.Linear


def _mlp(approximate="tanh", fused=True, k=32, i=64):
    torch.manual_seed(5)
    up = nn.Sequential(nn.Linear(k, i), nn.GELU(approximate=approximate)).to(torch.bfloat16)
    down = nn.Linear(i, k).to(torch.bfloat16)
    if fused:
        holder = nn.Module()
        holder.up = up
        use_gelu_epilogues(holder)
        up = holder.up
    return up, down


@pytest.mark.parametrize("approximate,fused", [("tanh", True), ("tanh", False),
                                               ("none", False)])
def test_the_mlp_runs_in_fp8_from_its_row_count_and_as_its_modules_below(approximate, fused):
    up, down = _mlp(approximate, fused)
    mlp = Fp8Mlp(up, down, min_tokens=64)
    assert mlp.approximate == approximate
    small = torch.randn(63, 32, dtype=torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(mlp(small), down(up(small)))
        x = torch.randn(101, 32, dtype=torch.bfloat16)
        got = mlp(x)
        linear = up if fused else up[0]
        expected = nn.functional.linear(
            nn.functional.gelu(nn.functional.linear(x.float(), linear.weight.float(),
                                                    linear.bias.float()),
                               approximate=approximate),
            down.weight.float(), down.bias.float())
    assert got.dtype == torch.bfloat16 and got.shape == (101, 32)
    assert 0.004 < _relative_error(got, expected) < 0.08  # FP8's rounding, twice


def test_the_up_products_row_scale_bounds_its_gelu_before_the_product():
    """Each row's scale comes from the row's norm (Cauchy-Schwarz, REACH_MARGIN): no value
    saturates, and the bound is loose by a small factor only, on inputs of every size."""
    up, down = _mlp("tanh", False)
    mlp = Fp8Mlp(up, down, min_tokens=1)
    torch.manual_seed(3)
    x = torch.randn(64, 32, dtype=torch.bfloat16) * torch.logspace(-2, 2, 64)[:, None]
    x_values, x_scales = quantize_rows(x)
    y = ((x_values.float() * x_scales) @ (mlp.up_fp8.float() * mlp.up_scale.t()).t()
         + up[0].bias.float())
    largest = nn.functional.gelu(y, approximate="tanh").abs().amax(dim=1)
    bound = x.float().norm(dim=1) * mlp.up_reach + mlp.up_bias_reach
    assert (largest <= bound).all() and (bound <= 20 * largest).all()


@pytest.mark.parametrize("wrapper", ["linear", "mlp"])
def test_the_compiled_wrapper_takes_each_path_by_the_row_count(wrapper):
    """One dynamic-shape compile per side of the row count (Dynamo guards on it), each the
    same as eager: the quantization of the input is plain torch that Inductor compiles with
    the product. The MLP's row scales come from each row's norm, a float32 sum Inductor orders
    its own way, so there a scale may move by an ulp and a value of the GELU round to the
    next e4m3 step: close, not equal."""
    module = (Fp8Linear(_linear(k=32), min_tokens=64) if wrapper == "linear"
              else Fp8Mlp(*_mlp(), min_tokens=64))
    compiled = torch.compile(module, dynamic=True, fullgraph=True)
    tolerance = 0 if wrapper == "linear" else 2e-2
    for rows in (10, 30, 70, 100):
        x = torch.randn(rows, 32, dtype=torch.bfloat16)
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x), module(x), rtol=tolerance, atol=tolerance)


def test_an_mlp_whose_sides_are_not_multiples_of_16_is_refused():
    with pytest.raises(ValueError, match="multiples of 16, got \\(40, 32\\)"):
        Fp8Mlp(*_mlp(i=40))


def test_heads_and_embeddings_stay_bf16():
    model = MaskedLM(_bert(layers=1))
    assert use_fp8_products(model, min_tokens=1) == 3
    assert type(model.decoder) is nn.Linear and type(model.transform[0]) is nn.Linear


def test_qwen3s_qkv_products_are_wrapped_and_nothing_else():
    from hedgerow.engine.cuda_linear import use_swiglu_products
    from hedgerow.engine.models.qwen3 import Qwen3Config, Qwen3Model

    config = Qwen3Config(vocab_size=50, hidden_size=32, num_layers=2, num_heads=2,
                         num_kv_heads=1, head_dim=16, intermediate_size=48,
                         max_position_embeddings=32)
    model = Qwen3Model(config).to(torch.bfloat16)
    use_swiglu_products(model)
    assert use_fp8_products(model, min_tokens=1) == 2
    layer = model.layers[0]
    assert isinstance(layer.qkv, Fp8Linear) and layer.qkv.inner.bias is None
    assert isinstance(layer.gate_up, LinearSwiGLU)
    assert type(layer.o_proj) is nn.Linear and type(layer.down) is nn.Linear


def test_a_layer_whose_qkv_sides_do_not_fit_stays_bf16():
    config = BertConfig(vocab_size=50, hidden_size=24, num_layers=1, num_heads=2,
                        intermediate_size=64, max_position_embeddings=80)
    assert use_fp8_products(BertModel(config), min_tokens=1) == 0  # qkv [72, 24]


def test_float8_is_refused_off_a_gpu():
    from hedgerow.engine.dtype_choice import check_float8_device
    from hedgerow.server_settings import ServerSettings

    with pytest.raises(ConfigError, match="--dtype float8 needs --device cuda"):
        ServerSettings(dtype="float8", device="cpu")
    with pytest.raises(ConfigError, match="not on cpu"):
        check_float8_device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available here"):
            check_float8_device("cuda")
