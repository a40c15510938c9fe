"""Engine.validate: what only the engine knows (vocabulary size, positions) is checked before
a batch runs, with messages that say the limit."""

import pytest
import torch
import transformers

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.errors import InvalidInputError


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    transformers.BertModel(transformers.BertConfig(
        vocab_size=97, hidden_size=48, num_hidden_layers=1, num_attention_heads=3,
        intermediate_size=64, max_position_embeddings=40)).save_pretrained(path)
    return Engine.load(path)


def test_a_good_batch_passes(engine):
    engine.validate(RaggedBatch.from_sequences([[0, 96], list(range(40))]))


@pytest.mark.parametrize("bad", [97, 1000, -1])
def test_token_ids_outside_the_vocabulary(engine, bad):
    batch = RaggedBatch.from_sequences([[1, 2], [3, bad, 4]])
    with pytest.raises(InvalidInputError,
                       match=rf"token id {bad} in sequence 1 is outside the vocabulary \[0, 97\)"):
        engine.validate(batch)


def test_a_sequence_longer_than_the_positions(engine):
    batch = RaggedBatch.from_sequences([[1], [2] * 41])
    with pytest.raises(InvalidInputError,
                       match="sequence 1 has 41 tokens; the model accepts at most 40 tokens"):
        engine.validate(batch)


def test_step_gives_one_float32_row_per_sequence(engine):
    out = engine.step(RaggedBatch.from_sequences([[1, 2, 3], [4], [5, 6]])).synchronize()
    assert out.shape == (3, 48) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
