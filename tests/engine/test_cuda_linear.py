"""The GELU-epilogue product (engine/cuda_linear.py) on the CPU: `torch._addmm_activation` runs
there too (without cuBLASLt), so the function, the module rewrite and the custom op's fake
implementation under torch.compile are checked here; its speed is measured on a GPU."""

import torch
from torch import nn

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.cuda_linear import LinearGelu, use_gelu_epilogues
from hedgerow.engine.models.bert import BertConfig, BertModel


def test_linear_gelu_is_the_tanh_gelu_of_the_linear_layer():
    torch.manual_seed(0)
    linear = nn.Linear(24, 37)
    x = torch.randn(13, 24)
    expected = nn.functional.gelu(linear(x), approximate="tanh")
    torch.testing.assert_close(LinearGelu(linear)(x), expected, rtol=1e-5, atol=1e-5)


def test_the_rewrite_swaps_every_up_projection_and_nothing_else():
    config = BertConfig(vocab_size=50, hidden_size=16, num_layers=3, num_heads=2,
                        intermediate_size=40, max_position_embeddings=32,
                        hidden_act="gelu_pytorch_tanh")
    model = BertModel(config).eval()
    ids = torch.randint(0, 50, (11,))
    cu = torch.tensor([0, 4, 11], dtype=torch.int32)
    pos = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6])
    from hedgerow.engine.attention import CpuRaggedAttention

    with torch.inference_mode():
        before = model(ids, pos, cu, 7, CpuRaggedAttention())
    assert use_gelu_epilogues(model) == 3
    assert all(isinstance(layer.up, LinearGelu) for layer in model.layers)
    assert isinstance(model.layers[0].down, nn.Linear)
    with torch.inference_mode():
        after = model(ids, pos, cu, 7, CpuRaggedAttention())
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)  # a tanh model: same math
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
