"""Chunking is pure: token-budget cuts keep order, cover every sequence, and reassemble."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hedgerow.gateway.chunking import Chunk, pack, pack_with_query, plan_chunks, reassemble
from hedgerow.gateway.tokenizer import Sequences


def test_cuts_on_tokens_not_sequences():
    assert plan_chunks([3, 3, 3, 3], budget=6) == [Chunk(0, 2, 6), Chunk(2, 4, 6)]
    assert plan_chunks([1] * 5, budget=2) == [Chunk(0, 2, 2), Chunk(2, 4, 2), Chunk(4, 5, 1)]


def test_a_sequence_over_the_budget_travels_alone():
    assert plan_chunks([2, 10, 2], budget=4) == [Chunk(0, 1, 2), Chunk(1, 2, 10), Chunk(2, 3, 2)]


def test_no_sequences_no_chunks_and_a_bad_budget_is_refused():
    assert plan_chunks([], budget=8) == []
    with pytest.raises(ValueError, match="at least 1"):
        plan_chunks([1], budget=0)


@given(st.lists(st.integers(1, 600), max_size=200), st.integers(1, 3000))
def test_chunks_cover_every_sequence_in_order_within_budget(lengths, budget):
    chunks = plan_chunks(lengths, budget)
    assert [i for c in chunks for i in range(c.start, c.stop)] == list(range(len(lengths)))
    for chunk in chunks:
        assert chunk.tokens == sum(lengths[chunk.start:chunk.stop])
        assert chunk.tokens <= budget or chunk.size == 1
    for left, right in zip(chunks, chunks[1:]):  # greedy: the next sequence did not fit
        assert left.tokens + lengths[right.start] > budget


def test_pack_gives_each_chunk_its_own_ragged_layout():
    sequences = Sequences.from_lists([[10, 11], [12, 13, 14], [15]])
    ids, cu = pack(sequences.input_ids, sequences.starts(), Chunk(1, 3, 4))
    assert np.frombuffer(ids, "<i4").tolist() == [12, 13, 14, 15]
    assert np.frombuffer(cu, "<i4").tolist() == [0, 3, 4]
    query = Sequences.from_lists([[7, 8, 9]]).input_ids
    ids, cu = pack_with_query(query, sequences.input_ids, sequences.starts(), Chunk(0, 2, 5))
    assert np.frombuffer(ids, "<i4").tolist() == [7, 8, 9, 10, 11, 12, 13, 14]
    assert np.frombuffer(cu, "<i4").tolist() == [0, 3, 5, 8]


def test_reassemble_keeps_input_order_and_rejects_wrong_shapes():
    chunks = [Chunk(0, 2, 5), Chunk(2, 3, 1)]
    first = np.array([[0.0], [1.0]], dtype=np.float32)
    second = np.array([[2.0]], dtype=np.float32)
    assert reassemble(chunks, [first, second])[:, 0].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="expected 1 rows"):
        reassemble(chunks, [first, first])
    with pytest.raises(ValueError, match="different widths"):
        reassemble(chunks, [first, np.zeros((1, 2), np.float32)])
    with pytest.raises(ValueError, match="2 chunks but 1 results"):
        reassemble(chunks, [first])
