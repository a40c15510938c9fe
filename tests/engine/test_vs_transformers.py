"""Our models against `transformers` on small random-weight checkpoints of odd sizes.

Each checkpoint is made with `transformers`, saved with `save_pretrained` (safetensors) to a
temporary directory and loaded by our loader, so the test covers loading as well as math. The
reference runs each sequence on its own (batch 1, no padding); ours runs all of them in one
ragged batch. Every pooling (cls, mean, last) of the hidden states must agree to cosine >= 0.999.

Bidirectional Qwen3: `transformers` Qwen3 is causal; the reference gets a custom 4D attention
mask of zeros ([1, 1, L, L], "every query sees every key"), which transformers uses as is.
"""

import json

import pytest
import torch
import transformers

from hedgerow.engine.attention import CpuRaggedAttention
from hedgerow.engine.loader import load_model
from hedgerow.engine.pooling import POOLING_MODES, pool
from hedgerow.engine.positions import token_layout

LENGTHS = [1, 2, 7, 19, 33, 50]
VOCAB = 211


def _encoder_config(cls):
    return cls(vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
               intermediate_size=160, max_position_embeddings=80, initializer_range=0.2,
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _qwen3_config():
    return transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, head_dim=16, intermediate_size=136, max_position_embeddings=128,
        initializer_range=0.2, rms_norm_eps=1e-6)


CASES = {
    # name: (transformers class to save, how its config is made)
    "bert": (transformers.BertModel, lambda: _encoder_config(transformers.BertConfig)),
    # Tensors under a head prefix ("bert.", "roberta."), config.json naming no architectures
    # (with `architectures: [...ForMaskedLM]` the loader refuses it: test_loader.py).
    "bert-prefixed": (transformers.BertForMaskedLM,
                      lambda: _encoder_config(transformers.BertConfig)),
    "roberta-prefixed": (transformers.RobertaForMaskedLM,
                         lambda: _encoder_config(transformers.RobertaConfig)),
    "xlm-roberta": (transformers.XLMRobertaModel,
                    lambda: _encoder_config(transformers.XLMRobertaConfig)),
    "qwen3-causal": (transformers.Qwen3Model, _qwen3_config),
    "qwen3-bidirectional-with-lm-head": (transformers.Qwen3ForCausalLM, _qwen3_config),
}


PAD = 1  # RoBERTa's padding id: such tokens take position padding_idx and are not counted


def _sequences(seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    sequences = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in LENGTHS]
    # The padding id as a token: alone, first, inside and last in a sequence.
    sequences[0][0] = PAD
    sequences[3][0] = sequences[3][5] = sequences[3][6] = sequences[3][-1] = PAD
    sequences[5][20] = PAD
    return sequences


def _reference_hidden(model, name: str, seq: list[int]) -> torch.Tensor:
    ids = torch.tensor([seq])
    base = getattr(model, model.base_model_prefix, model)
    kwargs = {}
    if name.startswith("qwen3-bidirectional"):
        kwargs["attention_mask"] = torch.zeros(1, 1, len(seq), len(seq))
    return base(input_ids=ids, **kwargs).last_hidden_state[0]


@pytest.mark.parametrize("name", list(CASES))
def test_matches_transformers(name, tmp_path):
    model_class, make_config = CASES[name]
    torch.manual_seed(1234)
    reference = model_class(make_config()).eval()
    reference.config._attn_implementation = "eager"
    reference.save_pretrained(tmp_path)
    if name.endswith("-prefixed"):
        config = json.loads((tmp_path / "config.json").read_text())
        del config["architectures"]
        (tmp_path / "config.json").write_text(json.dumps(config))

    causal = None if name == "qwen3-causal" else (False if name.startswith("qwen3") else None)
    loaded = load_model(tmp_path, causal=causal)
    if name.startswith("qwen3"):
        assert loaded.config.causal is (name == "qwen3-causal")
        assert loaded.config.num_kv_heads == 2 and loaded.config.head_dim == 16
    sequences = _sequences(seed=len(name))
    flat = torch.tensor([t for s in sequences for t in s], dtype=torch.int32)
    cu = torch.tensor([0] + torch.tensor(LENGTHS).cumsum(0).tolist(), dtype=torch.int32)
    layout = token_layout(cu)
    with torch.inference_mode():
        hidden = loaded.model(flat, layout.position_ids, cu, max(LENGTHS), CpuRaggedAttention())
        refs = [_reference_hidden(reference, name, s) for s in sequences]
    ref_hidden = torch.cat(refs)
    torch.testing.assert_close(hidden, ref_hidden, rtol=1e-3, atol=1e-3)
    for mode in POOLING_MODES:
        ours = pool(hidden, cu, layout.seq_index, layout.lengths, mode)
        expected = torch.stack([{"cls": r[0], "last": r[-1], "mean": r.mean(0)}[mode]
                                for r in refs])
        cosine = torch.nn.functional.cosine_similarity(ours, expected, dim=-1)
        assert bool((cosine >= 0.999).all()), f"{name} {mode}: cosines {cosine.tolist()}"


def test_the_bidirectional_reference_is_not_causal():
    """Guards the test above: the 4D mask of zeros really changes transformers' attention
    (the first token's output differs; under a causal mask it could only see itself)."""
    torch.manual_seed(5)
    model = transformers.Qwen3Model(_qwen3_config()).eval()
    model.config._attn_implementation = "eager"
    seq = _sequences(seed=3)[3]
    with torch.inference_mode():
        causal = _reference_hidden(model, "qwen3-causal", seq)
        bidirectional = _reference_hidden(model, "qwen3-bidirectional", seq)
        first_alone = _reference_hidden(model, "qwen3-causal", seq[:1])
    torch.testing.assert_close(causal[0], first_alone[0])
    assert not torch.allclose(causal[0], bidirectional[0], atol=1e-3)
