"""Wire bytes to tensors and back, without a model."""

import numpy as np
import pytest
import torch

from hedgerow.errors import InvalidInputError
from hedgerow.server.convert import (
    decode_batch, decode_embeddings, decode_int32, decode_options, encode_embeddings,
)
from hedgerow.wire import embed_pb2
from tests.server.conftest import embed_request


def test_token_bytes_decode_to_int32_little_endian():
    data = np.array([1, -2, 70000], dtype="<i4").tobytes()
    assert decode_int32(data, "input_ids").tolist() == [1, -2, 70000]
    with pytest.raises(InvalidInputError, match="input_ids must be packed .* got 5 bytes"):
        decode_int32(data[:5], "input_ids")


def test_a_request_decodes_to_a_checked_ragged_batch():
    batch = decode_batch(embed_request([[1, 2, 3], [4], [5, 6]]), max_request_tokens=6)
    assert batch.lengths() == [3, 1, 2] and batch.max_seqlen == 3
    with pytest.raises(InvalidInputError, match="7 tokens, more than .* limit of 6"):
        decode_batch(embed_request([[1] * 7]), max_request_tokens=6)
    with pytest.raises(InvalidInputError, match="empty request"):
        decode_batch(embed_pb2.EmbedRequest(cu_seqlens=np.array([0], "<i4").tobytes()), 6)


def test_options_default_to_the_model_and_are_checked():
    options = decode_options(embed_request([[1]]), width=8, default_normalize=True)
    assert (options.normalize, options.dimensions, options.dtype) == (True, None, 0)
    options = decode_options(embed_request([[1]], normalize=False, dimensions=3, dtype=2),
                             width=8, default_normalize=True)
    assert (options.normalize, options.dimensions, options.dtype) == (False, 3, 2)
    with pytest.raises(InvalidInputError, match="exceeds the model's width of 8"):
        decode_options(embed_request([[1]], dimensions=9), width=8, default_normalize=True)
    with pytest.raises(InvalidInputError, match="dtype 5 is not one of"):
        decode_options(embed_request([[1]], dtype=5), width=8, default_normalize=True)


@pytest.mark.parametrize("dtype, atol", [(0, 0.0), (1, 1e-3), (2, 1e-2)])
def test_embeddings_round_trip_through_every_wire_dtype(dtype, atol):
    rows = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    options = decode_options(embed_request([[1]], dimensions=5, dtype=dtype), 8, True)
    response = encode_embeddings(rows, options, prompt_tokens=11)
    assert list(response.shape) == [3, 5] and response.dtype == dtype
    assert response.prompt_tokens == 11
    got = decode_embeddings(response)
    want = torch.nn.functional.normalize(rows[:, :5], dim=-1).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=max(atol * 3, 1e-6))


@pytest.mark.parametrize("sequences", [3, 100])  # a few sequences, and more than 64
def test_bad_layouts_are_rejected_with_their_reason(sequences):
    def request(cu, tokens):
        return embed_pb2.EmbedRequest(input_ids=np.ones(tokens, "<i4").tobytes(),
                                      cu_seqlens=np.asarray(cu, "<i4").tobytes())

    good = list(range(0, 2 * sequences + 1, 2))
    batch = decode_batch(request(good, good[-1]), 10_000)
    assert batch.lengths() == [2] * sequences and batch.max_seqlen == 2
    with pytest.raises(InvalidInputError, match="must start at 0, not 1"):
        decode_batch(request([1] + good[1:], good[-1]), 10_000)
    flat = good[:2] + [good[1]] + good[2:]  # sequence 1 is empty
    with pytest.raises(InvalidInputError, match="sequence 1 has length 0"):
        decode_batch(request(flat, flat[-1]), 10_000)
    with pytest.raises(InvalidInputError, match=f"ends at {good[-1]} but input_ids holds"):
        decode_batch(request(good, good[-1] + 1), 10_000)
    with pytest.raises(InvalidInputError, match="at least two entries"):
        decode_batch(request([0], 1), 10_000)
