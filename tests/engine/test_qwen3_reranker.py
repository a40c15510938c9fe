"""Qwen3-Reranker (a Qwen3ForCausalLM loaded with task rerank) against `transformers`.

The checkpoint is random-weight, of small real shapes, with a real BPE tokenizer
(tests/qwen3_reranker.py). The reference is the model card's: the pairs in its prompt and
P("yes") from the full LM head's logits at the last token, pair by pair; ours runs every pair
in one ragged batch and reads only the LM head's two answer rows. Probabilities must agree
within 1e-3 (float32) per pair and rank the pairs in the same order.
"""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.errors import ModelLoadError
from tests.qwen3_reranker import (reference_pairs, reference_scores, write_qwen3_reranker,
                                  write_sequence_classification)

QUERY = "which shrubs make a good hedge for birds?"
DOCUMENTS = ["Hawthorn and blackthorn hedges give birds food and shelter.",
             "A stone wall runs beside the lane.", "Motorway verges are mown in May.",
             "Holly and ivy berries feed thrushes in winter.", "yes",
             "Hawthorn and blackthorn hedges give birds food and shelter."]


def _batch(pairs: list[list[int]]) -> RaggedBatch:
    lengths = [len(p) for p in pairs]
    return RaggedBatch(torch.tensor([t for p in pairs for t in p], dtype=torch.int32),
                       torch.tensor(np.cumsum([0, *lengths]), dtype=torch.int32), max(lengths))


def _order(scores) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


@pytest.mark.parametrize("tied", [True, False], ids=["tied-lm-head", "own-lm-head"])
def test_yes_probabilities_match_transformers(tmp_path, tied):
    directory = write_qwen3_reranker(tmp_path, seed=11, tied=tied)
    with safe_open(str(directory / "model.safetensors"), "pt") as weights:
        # the tied checkpoint really has no LM head of its own
        assert ("lm_head.weight" in weights.keys()) is not tied
    engine = Engine.load(directory, task="rerank")
    assert (engine.info.task, engine.info.dimensions, engine.info.pooling) == ("rerank", 1, "last")
    assert engine.info.token_types == 1
    pairs = reference_pairs(directory, QUERY, DOCUMENTS, engine.info.max_tokens)
    ours = engine.step(_batch(pairs)).synchronize()
    assert ours.shape == (len(DOCUMENTS), 1) and ours.dtype == torch.float32
    expected, _ = reference_scores(directory, pairs)
    probabilities = torch.sigmoid(ours[:, 0].double()).numpy()
    np.testing.assert_allclose(probabilities, expected, rtol=0, atol=1e-3)
    assert _order(ours[:, 0].tolist()) == _order(expected)
    # Guards the comparison: random weights still spread the scores apart.
    assert max(expected) - min(expected) > 0.05


def test_without_task_rerank_it_stays_an_embedding_model(tmp_path):
    """Qwen3-Embedding ships as Qwen3ForCausalLM too: only `--task rerank` makes a reranker."""
    engine = Engine.load(write_qwen3_reranker(tmp_path))
    assert (engine.info.task, engine.info.pooling) == ("embed", "last")
    assert engine.info.dimensions == 96


def test_the_answer_tokens_must_be_in_the_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models

    directory = write_qwen3_reranker(tmp_path)
    # a real tokenizer whose vocabulary has "no" but no "yes"
    Tokenizer(models.WordLevel({"[UNK]": 0, "no": 1}, unk_token="[UNK]")).save(
        str(directory / "tokenizer.json"))
    with pytest.raises(ModelLoadError, match=r"tokenizer.json has no token 'yes': a "
                                             r"Qwen3-Reranker scores the answers"):
        Engine.load(directory, task="rerank")
    (directory / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match=r"no tokenizer.json in"):
        Engine.load(directory, task="rerank")


def test_a_reranker_needs_the_causal_mask(tmp_path):
    with pytest.raises(ModelLoadError, match=r"Qwen3-Reranker reads its prompt with the causal "
                                             r"mask"):
        Engine.load(write_qwen3_reranker(tmp_path), task="rerank", causal=False)


def test_an_untied_checkpoint_without_its_lm_head_is_refused(tmp_path):
    directory = write_qwen3_reranker(tmp_path, tied=False)
    from safetensors.torch import load_file, save_file

    tensors = load_file(directory / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"missing tensor 'lm_head.weight' in .*a reranker "
                                             r"reads its answers' rows"):
        Engine.load(directory, task="rerank")


def test_a_qwen3_model_without_an_lm_head_is_no_reranker(tmp_path):
    directory = write_qwen3_reranker(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["architectures"] = ["Qwen3Model"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"is a checkpoint for task 'embed' \(Qwen3Model\), "
                                             r"not the 'rerank' asked for"):
        Engine.load(directory, task="rerank")


def test_the_sequence_classification_form_scores_the_same(tmp_path):
    """Qwen3ForSequenceClassification (the "seq-cls" conversion) is a reranker by its
    architecture, reads the same prompt and answers the causal LM's probabilities."""
    import transformers

    source = write_qwen3_reranker(tmp_path / "causal", seed=13)
    directory = write_sequence_classification(source, tmp_path / "seq-cls")
    assert json.loads((directory / "config.json").read_text())["architectures"] == [
        "Qwen3ForSequenceClassification"]
    engine = Engine.load(directory)
    assert (engine.info.task, engine.info.pooling) == ("rerank", "last")
    pairs = reference_pairs(source, QUERY, DOCUMENTS, engine.info.max_tokens)
    ours = engine.step(_batch(pairs)).synchronize()[:, 0]
    expected, _ = reference_scores(source, pairs)
    np.testing.assert_allclose(torch.sigmoid(ours.double()).numpy(), expected, rtol=0, atol=1e-3)
    classifier = transformers.Qwen3ForSequenceClassification.from_pretrained(directory).eval()
    with torch.inference_mode():
        logits = [float(classifier(input_ids=torch.tensor([p])).logits[0, 0]) for p in pairs]
    np.testing.assert_allclose(ours.numpy(), logits, rtol=0, atol=1e-3)
    assert _order(ours.tolist()) == _order(expected)


def test_a_two_label_qwen3_classifier_ranks_by_label_one(tmp_path):
    """Two labels, none named relevant: label 1's log-odds, as for the BERT family."""
    import shutil

    import transformers

    source = write_qwen3_reranker(tmp_path / "causal", seed=17)
    config = transformers.Qwen3Config.from_pretrained(source, num_labels=2)
    torch.manual_seed(17)
    classifier = transformers.Qwen3ForSequenceClassification(config).eval()
    classifier.save_pretrained(tmp_path / "two")
    shutil.copy(source / "tokenizer.json", tmp_path / "two" / "tokenizer.json")
    engine = Engine.load(tmp_path / "two")
    pairs = reference_pairs(source, QUERY, DOCUMENTS, engine.info.max_tokens)
    ours = engine.step(_batch(pairs)).synchronize()[:, 0]
    with torch.inference_mode():
        expected = [float(torch.softmax(classifier(input_ids=torch.tensor([p])).logits[0], 0)[1])
                    for p in pairs]
    np.testing.assert_allclose(torch.sigmoid(ours.double()).numpy(), expected, rtol=0, atol=1e-3)
    assert _order(ours.tolist()) == _order(expected)
