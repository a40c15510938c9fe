"""Cross-encoders against `transformers` on random-weight checkpoints of small real shapes.

Each `*ForSequenceClassification` checkpoint is made with `transformers`, saved with
`save_pretrained` and loaded by our engine. The reference scores each pair on its own
([CLS] q [SEP] d [SEP], token type ids 0 then 1 where the model has two types); ours runs all
pairs in one ragged batch, the document tokens' types folded into their ids. Scores must agree
within 1e-3 (float32) per pair and rank the pairs in the same order.
"""

import json

import numpy as np
import pytest
import torch
import transformers

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine, fold_segments
from hedgerow.errors import ModelLoadError
from tests.conftest import random_pairs

VOCAB = 301
CLS, SEP = 2, 3
PAIRS = [(1, 1), (3, 9), (12, 30), (5, 60), (20, 2), (7, 44)]  # (query, document) tokens


def _config(cls, **extra):
    return cls(vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
               intermediate_size=160, max_position_embeddings=128, initializer_range=0.2,
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **extra)


CASES = {
    "bert-one-logit": (transformers.BertForSequenceClassification,
                       lambda: _config(transformers.BertConfig, num_labels=1)),
    "bert-two-labels": (transformers.BertForSequenceClassification,
                        lambda: _config(transformers.BertConfig, num_labels=2)),
    "xlm-roberta-one-logit": (transformers.XLMRobertaForSequenceClassification,
                              lambda: _config(transformers.XLMRobertaConfig, num_labels=1,
                                              type_vocab_size=1)),
}


def _pairs(seed: int) -> tuple[list[list[int]], list[list[int]]]:
    return random_pairs(PAIRS, seed, VOCAB, CLS, SEP)


def _reference_scores(model, ids, types, two_types: bool) -> list[float]:
    scores = []
    with torch.inference_mode():
        for seq, seq_types in zip(ids, types):
            kwargs = {"token_type_ids": torch.tensor([seq_types])} if two_types else {}
            logits = model(input_ids=torch.tensor([seq]), **kwargs).logits[0]
            # one label: the logit; two: log-odds of label 1, whose sigmoid is its softmax
            scores.append(float(logits[0] if logits.numel() == 1 else logits[1] - logits[0]))
    return scores


def _order(scores) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


@pytest.mark.parametrize("name", list(CASES))
def test_scores_match_transformers(name, tmp_path):
    model_class, make_config = CASES[name]
    torch.manual_seed(4321)
    reference = model_class(make_config()).eval()
    reference.config._attn_implementation = "eager"
    reference.save_pretrained(tmp_path)

    engine = Engine.load(tmp_path)
    two_types = reference.config.type_vocab_size > 1
    assert (engine.info.task, engine.info.dimensions, engine.info.pooling) == ("rerank", 1, "cls")
    assert engine.info.token_types == (2 if two_types else 1)
    ids, types = _pairs(seed=len(name))
    flat = np.array([t for s in ids for t in s], dtype=np.int32)
    flat_types = np.array([t for s in types for t in s], dtype=np.int32)
    if two_types:
        flat = fold_segments(flat, flat_types, VOCAB)
    lengths = [len(s) for s in ids]
    batch = RaggedBatch(torch.from_numpy(flat),
                        torch.tensor(np.cumsum([0, *lengths]), dtype=torch.int32), max(lengths))
    ours = engine.step(batch).synchronize()
    assert ours.shape == (len(PAIRS), 1) and ours.dtype == torch.float32
    expected = _reference_scores(reference, ids, types, two_types)
    np.testing.assert_allclose(ours[:, 0].numpy(), expected, rtol=0, atol=1e-3)
    assert _order(ours[:, 0].tolist()) == _order(expected)


def test_the_token_types_change_the_scores(tmp_path):
    """Guards the test above: a BERT cross-encoder reads the document's segment (the scores
    with every type 0 differ), so folding really carries the types."""
    torch.manual_seed(7)
    transformers.BertForSequenceClassification(
        _config(transformers.BertConfig, num_labels=1)).save_pretrained(tmp_path)
    engine = Engine.load(tmp_path)
    ids, types = _pairs(seed=1)
    seq, seq_types = np.array(ids[2], dtype=np.int32), np.array(types[2], dtype=np.int32)
    cu = torch.tensor([0, len(seq)], dtype=torch.int32)

    def score(tokens):
        return float(engine.step(RaggedBatch(torch.from_numpy(tokens), cu, len(seq)))
                     .synchronize()[0, 0])

    assert abs(score(fold_segments(seq, seq_types, VOCAB)) - score(seq)) > 1e-3


def test_several_labels_none_named_relevant_are_refused(tmp_path):
    transformers.BertForSequenceClassification(
        _config(transformers.BertConfig, num_labels=3)).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=r"labels 0=LABEL_0, 1=LABEL_1, 2=LABEL_2 names "
                                             r"no one relevance label"):
        Engine.load(tmp_path)


def test_the_label_id2label_names_relevant_ranks(tmp_path):
    torch.manual_seed(3)
    config = _config(transformers.BertConfig, num_labels=3,
                     id2label={0: "contradiction", 1: "entailment", 2: "neutral"})
    reference = transformers.BertForSequenceClassification(config).eval()
    reference.save_pretrained(tmp_path)
    ids, types = _pairs(seed=2)
    seq, seq_types = ids[1], types[1]
    with torch.inference_mode():
        logits = reference(input_ids=torch.tensor([seq]),
                           token_type_ids=torch.tensor([seq_types])).logits[0]
    folded = fold_segments(np.array(seq, dtype=np.int32), np.array(seq_types, dtype=np.int32),
                           VOCAB)
    ours = Engine.load(tmp_path).step(RaggedBatch(
        torch.from_numpy(folded), torch.tensor([0, len(seq)], dtype=torch.int32), len(seq)))
    probability = torch.sigmoid(ours.synchronize()[0, 0])
    assert abs(float(probability) - float(torch.softmax(logits, 0)[1])) < 1e-4


def test_a_task_other_than_the_checkpoints_is_refused(tmp_path):
    transformers.BertForSequenceClassification(
        _config(transformers.BertConfig, num_labels=1)).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match=r"checkpoint for task 'rerank' "
                                             r"\(BertForSequenceClassification\), not the 'embed' asked for"):
        Engine.load(tmp_path, task="embed")
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
