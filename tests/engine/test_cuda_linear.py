"""The fused MLP products (engine/cuda_linear.py) on the CPU: `torch._addmm_activation` runs
there too (without cuBLASLt), and the SwiGLU op has a CPU branch, so the functions, the module
rewrites and the custom ops' fake implementations under torch.compile are checked here; the
CUDA kernels (cuBLASLt, QuACK, kernels/swiglu.py) in tests/kernels/test_swiglu_gpu.py, their
speed on a GPU."""

import torch
from torch import nn

from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.cuda_linear import (LinearGelu, LinearSwiGLU, interleave_rows,
                                         use_gelu_epilogues, use_swiglu_products)
from hedgerow.engine.models.bert import BertConfig, BertModel


def test_linear_gelu_is_the_tanh_gelu_of_the_linear_layer():
    torch.manual_seed(0)
    linear = nn.Linear(24, 37)
    x = torch.randn(13, 24)
    expected = nn.functional.gelu(linear(x), approximate="tanh")
    torch.testing.assert_close(LinearGelu(linear)(x), expected, rtol=1e-5, atol=1e-5)


def _forward(model):
    """Two ragged sequences (4 and 7 tokens) through `model` on the CPU."""
    torch.manual_seed(2)
    ids = torch.randint(0, 50, (11,))
    cu = torch.tensor([0, 4, 11], dtype=torch.int32)
    pos = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6])
    with torch.inference_mode():
        return model(ids, pos, cu, 7, CpuRaggedAttention())


def test_the_rewrite_swaps_every_up_projection_and_nothing_else():
    config = BertConfig(vocab_size=50, hidden_size=16, num_layers=3, num_heads=2,
                        intermediate_size=40, max_position_embeddings=32,
                        hidden_act="gelu_pytorch_tanh")
    model = BertModel(config).eval()
    before = _forward(model)
    assert use_gelu_epilogues(model) == 3
    assert all(isinstance(layer.up, LinearGelu) for layer in model.layers)
    assert isinstance(model.layers[0].down, nn.Linear)
    torch.testing.assert_close(_forward(model), before, rtol=1e-5, atol=1e-5)  # a tanh model: same math
    assert use_gelu_epilogues(model) == 0  # nothing left to swap


def test_the_custom_op_compiles_through_its_fake():
    linear = nn.Linear(8, 12)
    module = LinearGelu(linear)
    compiled = torch.compile(module, dynamic=True, fullgraph=True)
    for rows in (3, 9):
        x = torch.randn(rows, 8)
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x), module(x))


def test_a_batch_knows_when_its_sequences_share_one_length():
    assert RaggedBatch.from_sequences([[1, 2, 3]] * 4).uniform_length() == 3
    assert RaggedBatch.from_sequences([[1]]).uniform_length() == 1
    assert RaggedBatch.from_sequences([[1, 2], [3, 4, 5]]).uniform_length() == 0
    assert RaggedBatch.from_sequences([[1, 2, 3], [4], [5, 6]]).uniform_length() == 0


def _qwen3(layers=2):
    from hedgerow.engine.models.qwen3 import Qwen3Config, Qwen3Model

    config = Qwen3Config(vocab_size=50, hidden_size=16, num_layers=layers, num_heads=2,
                         num_kv_heads=1, head_dim=8, intermediate_size=24,
                         max_position_embeddings=32)
    return Qwen3Model(config).eval()


def test_linear_swiglu_equals_the_gate_up_pair_it_replaces():
    torch.manual_seed(1)
    pair = _qwen3().layers[0].gate_up
    x = torch.randn(13, 16)
    with torch.inference_mode():
        torch.testing.assert_close(LinearSwiGLU(pair[0])(x), pair(x), rtol=1e-5, atol=1e-6)


def test_interleaving_pairs_each_gate_row_with_its_up_row():
    weight = torch.arange(6.0)[:, None].expand(6, 2)  # rows g0 g1 g2 u0 u1 u2
    assert interleave_rows(weight)[:, 0].tolist() == [0, 3, 1, 4, 2, 5]


def test_the_swiglu_rewrite_swaps_every_gate_up_pair_and_keeps_the_model():
    model = _qwen3(layers=3)
    before = _forward(model)
    assert use_swiglu_products(model) == 3
    assert all(isinstance(layer.gate_up, LinearSwiGLU) for layer in model.layers)
    assert use_gelu_epilogues(model) == 0 and use_swiglu_products(model) == 0
    torch.testing.assert_close(_forward(model), before, rtol=1e-5, atol=1e-5)


def test_the_swiglu_op_compiles_through_its_fake():
    module = LinearSwiGLU(nn.Linear(8, 12, bias=False))
    compiled = torch.compile(module, dynamic=True, fullgraph=True)
    for rows in (3, 9):
        x = torch.randn(rows, 8)
        with torch.inference_mode():
            torch.testing.assert_close(compiled(x), module(x))


def test_a_gate_up_product_with_a_bias_is_refused():
    import pytest

    with pytest.raises(ValueError, match="no bias"):
        LinearSwiGLU(nn.Linear(8, 12))
