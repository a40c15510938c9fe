"""oneDNN dense layers on the CPU compute what `nn.Linear` (+ activation) computes."""

import pytest
import torch
from torch import nn

from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.cpu_linear import OneDnnLinear, onednn_available, use_onednn_linears
from hedgerow.engine.models.bert import BertConfig, BertModel
from hedgerow.engine.models.qwen3 import Qwen3Config, Qwen3Model
from hedgerow.engine.positions import token_layout

pytestmark = pytest.mark.skipif(not onednn_available(torch.float32),
                                reason="oneDNN fused linear is not available in this torch")


@pytest.mark.parametrize("activation", [nn.Identity(), nn.GELU(), nn.GELU(approximate="tanh"),
                                        nn.ReLU(), nn.SiLU()])
def test_fused_linear_matches_linear_then_activation(activation):
    torch.manual_seed(0)
    pair = nn.Sequential(nn.Linear(37, 53), activation)
    holder = nn.Module()
    holder.pair = pair if not isinstance(activation, nn.Identity) else pair[0]
    x = torch.randn(29, 37)
    expected = holder.pair(x)
    assert use_onednn_linears(holder) == 1 and isinstance(holder.pair, OneDnnLinear)
    torch.testing.assert_close(holder.pair(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_bert_with_onednn_equals_bert_with_torch(act):
    torch.manual_seed(1)
    config = BertConfig(vocab_size=50, hidden_size=48, num_layers=2, num_heads=3,
                        intermediate_size=70, max_position_embeddings=64, hidden_act=act)
    model = BertModel(config).eval()
    _compare(model, config.vocab_size)


def test_qwen3_with_onednn_equals_qwen3_with_torch():
    torch.manual_seed(2)
    config = Qwen3Config(vocab_size=50, hidden_size=48, num_layers=2, num_heads=6,
                         num_kv_heads=2, head_dim=8, intermediate_size=70,
                         max_position_embeddings=64, attention_bias=True)
    _compare(Qwen3Model(config).eval(), config.vocab_size)


def _compare(model, vocab):
    ids = torch.randint(0, vocab, (23,), dtype=torch.int32)
    cu = torch.tensor([0, 5, 6, 23], dtype=torch.int32)
    positions = token_layout(cu).position_ids
    with torch.inference_mode():
        expected = model(ids, positions, cu, 17, CpuRaggedAttention())
        swapped = use_onednn_linears(model)
        got = model(ids, positions, cu, 17, CpuRaggedAttention())
    assert swapped == sum(isinstance(m, OneDnnLinear) for m in model.modules()) > 0
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_the_kernel_caches_are_bounded_unless_the_environment_says_otherwise(monkeypatch):
    from hedgerow.engine.cpu_linear import KERNEL_CACHE_SHAPES, KERNEL_CACHES, bound_kernel_caches

    monkeypatch.delenv(KERNEL_CACHES[0], raising=False)
    monkeypatch.setenv(KERNEL_CACHES[1], "256")
    bound_kernel_caches()
    import os
    assert os.environ[KERNEL_CACHES[0]] == str(KERNEL_CACHE_SHAPES)
    assert os.environ[KERNEL_CACHES[1]] == "256"
