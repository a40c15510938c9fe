"""SPLADE (task sparse on a Bert- or DistilBertForMaskedLM) against `transformers` and
SPLADE's formula.

The reference: `transformers`' BertForMaskedLM on the same random-weight checkpoint (the real
vocabulary and tokenizer; tests/conftest.py `write_splade_model`), the texts as one padded
batch with its attention mask, then sentence-transformers' SpladePooling formula: the max over
the masked-in tokens (special tokens included) of log(1 + relu(logits)). Ours: the engine's
rows for one ragged batch, then the server's `vocabulary_weights`. Values within 1e-3 and the
same non-zero ids (up to entries below 1e-5 on both sides, a logit within rounding of 0: see
NOISE), with the decoder tied to the word embeddings and with its own weight, and for a
DistilBertForMaskedLM.
"""

import json

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.errors import ModelLoadError
from hedgerow.model_files import model_task
from hedgerow.server.sparse import vocabulary_weights
from tests.conftest import write_splade_model

VOCAB = 30522
TEXTS = ["Hawthorn hedges shelter wrens, wrens and robins.", "A stone wall.", "ivy",
         "Blackthorn flowers before its leaves open, early in the spring, along the lane."]


@pytest.fixture(scope="module", params=["tied", "untied", "distilbert"])
def splade_dir(request, tmp_path_factory):
    return write_splade_model(tmp_path_factory.mktemp("splade"), seed=3,
                              tied=request.param != "untied",
                              distil=request.param == "distilbert")


def token_ids(directory, texts):
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()  # the packaged tokenizer.json pads to 128
    return [encoding.ids for encoding in tokenizer.encode_batch(texts)]


def reference(directory, sequences) -> np.ndarray:
    """float32 [B, V]: SpladePooling's max over masked tokens of log(1 + relu(MLM logits))."""
    model = transformers.AutoModelForMaskedLM.from_pretrained(directory).eval()
    width = max(map(len, sequences))
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, :len(sequence)] = torch.tensor(sequence)
        mask[row, :len(sequence)] = 1
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits
        return torch.max(torch.log1p(torch.relu(logits)) * mask[..., None], dim=1).values.numpy()


# A logit within float32 rounding of 0 may land on either side of it in two computations (one
# such entry of ~1e-6 among ~1600 in these texts): ids whose value is below this on both sides
# may be in one answer's set and not the other's; every other id must be in both.
NOISE = 1e-5


def assert_same_sparse(vectors, expected):
    for (ids, values), row in zip(vectors, expected, strict=True):
        nonzero = np.flatnonzero(row > 0)
        ours = dict(zip(ids.tolist(), values.tolist()))
        only = set(ours) ^ set(nonzero.tolist())
        assert all(ours.get(i, 0.0) < NOISE and row[i] < NOISE for i in only), only
        assert len(only) <= 2, only
        both = sorted(set(ours) & set(nonzero.tolist()))
        np.testing.assert_allclose([ours[i] for i in both], row[both], rtol=0, atol=1e-3)
        assert all(0 < i < len(row) for i in ours) and ids.tolist() == sorted(ours)


def test_splade_matches_transformers(splade_dir):
    sequences = token_ids(splade_dir, TEXTS)
    engine = Engine.load(splade_dir, dtype="float32")  # auto detection: the checkpoint's task
    assert (engine.info.task, engine.info.pooling, engine.info.dimensions) == (
        "sparse", "splade", VOCAB)
    rows = engine.step(RaggedBatch.from_sequences(sequences)).synchronize().numpy()
    assert rows.shape == (len(TEXTS), VOCAB)
    vectors = vocabulary_weights(rows)
    assert_same_sparse(vectors, reference(splade_dir, sequences))
    # The test can fail: a few percent of each text's vocabulary is non-zero, not all or none.
    counts = [ids.size for ids, _ in vectors]
    assert all(50 < count < VOCAB // 4 for count in counts), counts
    # [CLS] (101) and [SEP] (102) are tokens of every text: they count as SpladePooling's do.
    assert all(row.max() > 0 for row in rows)


def test_one_token_alone(splade_dir):
    engine = Engine.load(splade_dir, dtype="float32")
    rows = engine.step(RaggedBatch.from_sequences([[7592]])).synchronize().numpy()
    assert rows.shape == (1, VOCAB)
    assert_same_sparse(vocabulary_weights(rows), reference(splade_dir, [[7592]]))


def test_a_masked_lm_serves_task_sparse_only(splade_dir):
    assert Engine.load(splade_dir, task="sparse").info.pooling == "splade"
    with pytest.raises(ModelLoadError, match=r"task 'sparse' \((Distil)?BertForMaskedLM\), "
                       r"not the 'embed' asked for \(a masked-LM checkpoint serves SPLADE sparse "
                       r"vectors only\)"):
        Engine.load(splade_dir, task="embed")


def test_a_distilbert_config_without_architectures_is_an_embedding_model(tmp_path):
    """No `architectures` names no head: the encoder alone, mean-pooled as transformers'
    DistilBertModel computes it (the checkpoint's MLM head is left unread)."""
    directory = write_splade_model(tmp_path, seed=5, distil=True)
    config = json.loads((directory / "config.json").read_text())
    del config["architectures"]
    (directory / "config.json").write_text(json.dumps(config))
    engine = Engine.load(directory)
    assert (engine.info.task, engine.info.architecture) == ("embed", "distilbert")
    sequences = token_ids(directory, TEXTS)
    ours = engine.step(RaggedBatch.from_sequences(sequences)).synchronize().numpy()
    model = transformers.AutoModel.from_pretrained(directory).eval()
    with torch.inference_mode():
        expected = np.stack([model(input_ids=torch.tensor([s])).last_hidden_state[0].mean(0)
                             .numpy() for s in sequences])
    np.testing.assert_allclose(ours, expected, atol=1e-4, rtol=1e-4)


def test_other_masked_lm_heads_stay_refused(tmp_path):
    for name in ("RobertaForMaskedLM", "XLMRobertaForMaskedLM", "ModernBertForMaskedLM"):
        with pytest.raises(ModelLoadError, match=f"architecture '{name}' is not served"):
            model_task({"architectures": [name]}, tmp_path / "config.json")


def test_an_untied_config_needs_the_decoder_weight(tmp_path):
    write_splade_model(tmp_path, tied=True)  # the file holds no decoder weight
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(ModelLoadError, match=r"missing tensors in .*: "
                       r"cls\.predictions\.decoder\.weight"):
        Engine.load(tmp_path)


def _sparse_encoder_files(directory, pooling_config):
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
               {"idx": 1, "name": "1", "path": "1_SpladePooling",
                "type": "sentence_transformers.sparse_encoder.models.SpladePooling"}]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_SpladePooling").mkdir()
    (directory / "1_SpladePooling" / "config.json").write_text(json.dumps(pooling_config))


def test_a_sparse_encoders_splade_pooling_is_read(tmp_path):
    write_splade_model(tmp_path)
    _sparse_encoder_files(tmp_path, {"pooling_strategy": "max", "activation_function": "relu",
                                     "word_embedding_dimension": VOCAB})
    assert Engine.load(tmp_path).info.pooling == "splade"
    (tmp_path / "1_SpladePooling" / "config.json").write_text(json.dumps(
        {"pooling_strategy": "sum", "activation_function": "relu"}))
    with pytest.raises(ModelLoadError, match=r"SpladePooling with pooling_strategy 'sum' and "
                       r"activation_function 'relu' is not served"):
        Engine.load(tmp_path)


def test_the_fingerprint_names_the_index_space(splade_dir, tmp_path):
    from hedgerow.server.space import facts

    sparse = facts(Engine.load(splade_dir, dtype="float32"), splade_dir, "weights")
    assert sparse["index_space"] == {"kind": "vocabulary", "size": VOCAB}
    assert sparse["pooling"] == "splade" and sparse["tokenizer"] is not None
    dense = write_splade_model(tmp_path / "dense")  # the same encoder as an embedding model
    config = json.loads((dense / "config.json").read_text())
    (dense / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    assert "index_space" not in facts(Engine.load(dense, dtype="float32"), dense, "weights")
