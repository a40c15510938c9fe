"""engine/resident.py on the CPU: which models get the one-launch layers, that the layers' own
weights then view the stack (no second copy), and that BertModel's forward takes it for batches
of up to 128 tokens and the layer loop above (kernels/resident_layers.py's reference runs on the
CPU; the kernel itself in tests/kernels/test_resident_layers_interpreter.py)."""

from unittest import mock

import pytest
import torch

from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.cuda_linear import use_gelu_epilogues
from hedgerow.engine.models.bert import BertConfig, BertModel
from hedgerow.engine.resident import MAX_TOKENS, use_resident_layers
from hedgerow.kernels import resident_layers


def _model(hidden=512, intermediate=1024, heads=8, layers=2, gelu_epilogue=True):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=hidden, num_layers=layers, num_heads=heads,
                        intermediate_size=intermediate, max_position_embeddings=300,
                        layer_norm_eps=1e-5)
    model = BertModel(config).eval()
    if gelu_epilogue:
        use_gelu_epilogues(model)
    return model


def _batch(lengths):
    ids = torch.randint(0, 50, (sum(lengths),))
    pos = torch.cat([torch.arange(n) for n in lengths])
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    return ids, pos, cu, max(lengths), CpuRaggedAttention()


def test_the_layers_view_one_stack_and_small_batches_run_it():
    model = _model()
    batch = _batch([5, 40, 17])
    with torch.no_grad():
        want = model(*batch)
        assert use_resident_layers(model) == 1
        stack = model.resident_layers
        assert model.layers[1].up.weight.data_ptr() == stack.up_w[1].data_ptr()
        assert model.layers[0].qkv.bias.data_ptr() == stack.qkv_b[0].data_ptr()
        with mock.patch.object(resident_layers, "reference_bert_layers",
                               wraps=resident_layers.reference_bert_layers) as taken:
            got = model(*batch)
    assert taken.call_count == 1
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert use_resident_layers(model) == 0  # once per model


def test_past_its_tokens_the_layer_loop_runs():
    model = _model(layers=1)
    use_resident_layers(model)
    with torch.no_grad(), mock.patch.object(resident_layers, "reference_bert_layers") as taken:
        model(*_batch([MAX_TOKENS, 1]))
    assert taken.call_count == 0


@pytest.mark.parametrize("model", [
    _model(gelu_epilogue=False),                   # the model's own GELU, not the tanh one
    _model(hidden=320, intermediate=1280, heads=10),  # sides off the kernel's tiles
], ids=["no-gelu-epilogue", "sides-off-the-tiles"])
def test_models_the_kernel_does_not_compute_keep_their_layers(model):
    assert use_resident_layers(model) == 0
    assert model.resident_layers is None
