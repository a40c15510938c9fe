"""Pooling on the ragged layout and postprocess (truncate, then normalise), against plain
per-sequence loops."""

import numpy as np
import pytest
import torch

from hedgerow.engine.pooling import pool, postprocess
from hedgerow.engine.positions import token_layout
from hedgerow.errors import InvalidInputError

LENGTHS = [3, 1, 7, 2]


@pytest.fixture
def ragged():
    torch.manual_seed(0)
    hidden = torch.randn(sum(LENGTHS), 5)
    cu = torch.tensor([0, 3, 4, 11, 13], dtype=torch.int32)
    return hidden, cu, token_layout(cu)


def test_token_layout_numbers_positions_per_sequence():
    layout = token_layout(torch.tensor([0, 3, 4, 6], dtype=torch.int32))
    assert layout.position_ids.tolist() == [0, 1, 2, 0, 0, 1]
    assert layout.seq_index.tolist() == [0, 0, 0, 1, 2, 2]
    assert layout.lengths.tolist() == [3, 1, 2]
    assert layout.position_ids.dtype == layout.seq_index.dtype == torch.int64


@pytest.mark.parametrize("mode", ["cls", "mean", "last"])
def test_pool_matches_a_loop(ragged, mode):
    hidden, cu, layout = ragged
    got = pool(hidden, cu, layout.seq_index, layout.lengths, mode)
    bounds = cu.tolist()
    pick = {"cls": lambda s: s[0], "mean": lambda s: s.mean(0), "last": lambda s: s[-1]}[mode]
    expected = torch.stack([pick(hidden[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    assert got.dtype == torch.float32 and got.shape == (4, 5)
    torch.testing.assert_close(got, expected)


def test_pool_bfloat16_hidden_gives_float32(ragged):
    hidden, cu, layout = ragged
    got = pool(hidden.bfloat16(), cu, layout.seq_index, layout.lengths, "mean")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, pool(hidden, cu, layout.seq_index, layout.lengths, "mean"),
                               rtol=2e-2, atol=2e-2)


def test_pool_rejects_an_unknown_mode(ragged):
    hidden, cu, layout = ragged
    with pytest.raises(ValueError, match="max"):
        pool(hidden, cu, layout.seq_index, layout.lengths, "max")


def test_postprocess_truncates_then_normalises():
    embeddings = np.array([[3.0, 4.0, 12.0], [0.0, 2.0, 1.0]], dtype=np.float32)
    out = postprocess(embeddings, normalize=True, dimensions=2)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 1.0]], rtol=1e-6)


def test_postprocess_matches_torch_normalize():
    embeddings = torch.randn(17, 33, generator=torch.Generator().manual_seed(1)) * 40
    want = torch.nn.functional.normalize(embeddings[:, :31], dim=-1).numpy()
    np.testing.assert_allclose(postprocess(embeddings.numpy(), True, 31), want,
                               rtol=0, atol=2e-7)


def test_postprocess_without_normalising_keeps_values():
    embeddings = np.array([[3.0, 4.0, 12.0]], dtype=np.float32)
    assert postprocess(embeddings, normalize=False, dimensions=None) is embeddings
    np.testing.assert_array_equal(postprocess(embeddings, False, 1), [[3.0]])
    np.testing.assert_allclose(np.linalg.norm(postprocess(embeddings, True, None), axis=-1),
                               [1.0], rtol=1e-6)


def test_postprocess_normalising_a_zero_vector_gives_zeros_not_nan():
    out = postprocess(np.zeros((1, 4), dtype=np.float32), normalize=True, dimensions=None)
    np.testing.assert_array_equal(out, np.zeros((1, 4)))


@pytest.mark.parametrize("dimensions", [0, -1, 4])
def test_postprocess_rejects_dimensions_out_of_range(dimensions):
    with pytest.raises(InvalidInputError, match="between 1 and the model's width 3"):
        postprocess(np.ones((2, 3), dtype=np.float32), normalize=True, dimensions=dimensions)
