"""BGE-M3's lexical weights (task sparse) against its reference formula on random weights.

The reference is BGE-M3's own code path, written out: `relu(sparse_linear(last_hidden_state))`
of `transformers`' model on each sequence alone, then `_process_token_weights` (the largest
weight of each token id, the unused special ids and zero weights left out). Ours: the engine's
rows for one ragged batch, then the server's `lexical_weights`.
"""

import json

import numpy as np
import pytest
import torch
import transformers

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.engine import Engine
from hedgerow.errors import ModelLoadError
from hedgerow.server.sparse import lexical_weights

VOCAB = 211
UNUSED = {0, 1, 2, 3}  # BGE-M3's <s>, <pad>, </s>, <unk>
LENGTHS = [1, 3, 9, 30, 60]


def _write(directory, seed=11):
    torch.manual_seed(seed)
    config = transformers.XLMRobertaConfig(
        vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
        intermediate_size=160, max_position_embeddings=80, initializer_range=0.2)
    model = transformers.XLMRobertaModel(config).eval()
    model.save_pretrained(directory)
    head = torch.nn.Linear(96, 1)
    with torch.no_grad():  # weights about half of which are above 0, so relu keeps many
        head.weight.normal_(0, 0.3)
        head.bias.zero_()
    torch.save(head.state_dict(), directory / "sparse_linear.pt")
    return model, head


def _process_token_weights(weights, ids):
    """BGE-M3's `_process_token_weights`, as its reference code computes it."""
    result: dict[int, float] = {}
    for w, idx in zip(weights, ids):
        if idx not in UNUSED and w > 0 and w > result.get(idx, 0):
            result[idx] = w
    return result


def test_lexical_weights_match_the_reference(tmp_path):
    model, head = _write(tmp_path)
    generator = torch.Generator().manual_seed(5)
    sequences = [[0, *torch.randint(0, VOCAB, (n,), generator=generator).tolist(), 2]
                 for n in LENGTHS]
    sequences[3][4:8] = [17, 17, 3, 17]  # a repeated id (its max counts) and <unk>
    engine = Engine.load(tmp_path, task="sparse")
    assert (engine.info.task, engine.info.pooling, engine.info.dimensions) == ("sparse",
                                                                               "tokens", 78)
    batch = RaggedBatch.from_sequences(sequences)
    rows = engine.step(batch).synchronize().numpy()
    assert rows.shape == (len(sequences), 78)
    ours = lexical_weights(batch.input_ids.numpy(), batch.cu_seqlens.tolist(), rows,
                           frozenset(UNUSED))
    with torch.inference_mode():
        for seq, (ids, values), row in zip(sequences, ours, rows):
            hidden = model(input_ids=torch.tensor([seq])).last_hidden_state[0]
            weights = torch.relu(head(hidden))[:, 0]
            np.testing.assert_allclose(row[:len(seq)], weights.numpy(), rtol=0, atol=1e-4)
            assert not row[len(seq):].any()
            expected = _process_token_weights(weights.tolist(), seq)
            assert ids.tolist() == sorted(expected)
            np.testing.assert_allclose(values, [expected[i] for i in sorted(expected)],
                                       rtol=0, atol=1e-4)
    # The test can fail: most tokens keep a weight, and the repeated id is among them.
    kept = sum(ids.size for ids, _ in ours)
    assert kept > sum(LENGTHS) // 3, kept
    assert 17 in ours[3][0].tolist() and not set(ours[3][0].tolist()) & UNUSED


def test_task_sparse_needs_the_sparse_head(tmp_path):
    _write(tmp_path)
    (tmp_path / "sparse_linear.pt").unlink()
    with pytest.raises(ModelLoadError, match=r"task 'sparse' needs sparse_linear.pt"):
        Engine.load(tmp_path, task="sparse")
    # Without the task asked for, the same checkpoint is an embedding model.
    assert Engine.load(tmp_path).info.task == "embed"


def test_a_sparse_head_of_another_shape_is_refused(tmp_path):
    _write(tmp_path)
    torch.save(torch.nn.Linear(96, 2).state_dict(), tmp_path / "sparse_linear.pt")
    with pytest.raises(ModelLoadError, match=r"must hold a linear layer of 96 -> 1"):
        Engine.load(tmp_path, task="sparse")
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [
        "XLMRobertaModel"]
