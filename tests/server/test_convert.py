"""Wire bytes to arrays and back, without a model."""

import numpy as np
import pytest
import torch

from hedgerow.errors import InvalidInputError
from hedgerow.server.convert import (
    bfloat16_bits, decode_batch, decode_embeddings, decode_int32, decode_options,
    encode_embeddings,
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
    assert batch.lengths == [3, 1, 2] and batch.max_seqlen == 3
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


@pytest.mark.parametrize("dtype, atol", [(0, 1e-7), (1, 1e-3), (2, 1e-2)])
def test_embeddings_round_trip_through_every_wire_dtype(dtype, atol):
    rows = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    options = decode_options(embed_request([[1]], dimensions=5, dtype=dtype), 8, True)
    response = embed_pb2.EmbedResponse.FromString(
        encode_embeddings(rows.numpy(), options, prompt_tokens=11))
    assert list(response.shape) == [3, 5] and response.dtype == dtype
    assert response.prompt_tokens == 11
    got = decode_embeddings(response)
    want = torch.nn.functional.normalize(rows[:, :5], dim=-1).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=max(atol * 3, 1e-6))


def test_hand_written_responses_are_what_protobuf_writes():
    options = decode_options(embed_request([[1]], normalize=False), 300, True)
    for count, width, tokens in [(1, 4, 0), (2, 300, 11), (130, 1, 1 << 40)]:
        rows = np.arange(count * width, dtype=np.float32).reshape(count, width)
        cut = decode_options(embed_request([[1]], normalize=False, dimensions=width), 300, True)
        for opts in (options, cut):
            ours = encode_embeddings(rows, opts, tokens)
            theirs = embed_pb2.EmbedResponse(
                embeddings=rows.astype("<f4").tobytes(), shape=[count, width],
                prompt_tokens=tokens).SerializeToString()
            assert ours == theirs


def test_bfloat16_bits_round_as_torch_does():
    special = [0.0, -0.0, 1.0, -1.5, 3.4e38, -3.4e38, 1e-40, float("inf"), float("-inf"),
               float("nan"), 1.00390625, 1.0078125, 1.01171875]  # ties round to even
    values = np.concatenate([np.asarray(special, dtype=np.float32),
                             np.random.default_rng(0).standard_normal(997).astype(np.float32)
                             * np.float32(1e3)])
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = bfloat16_bits(values)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan((got[nan].astype(np.uint32) << 16).view(np.float32)).all()


@pytest.mark.parametrize("sequences", [3, 100])  # a few sequences, and more than 64
def test_bad_layouts_are_rejected_with_their_reason(sequences):
    def request(cu, tokens):
        return embed_pb2.EmbedRequest(input_ids=np.ones(tokens, "<i4").tobytes(),
                                      cu_seqlens=np.asarray(cu, "<i4").tobytes())

    good = list(range(0, 2 * sequences + 1, 2))
    batch = decode_batch(request(good, good[-1]), 10_000)
    assert batch.lengths == [2] * sequences and batch.max_seqlen == 2
    with pytest.raises(InvalidInputError, match="must start at 0, not 1"):
        decode_batch(request([1] + good[1:], good[-1]), 10_000)
    flat = good[:2] + [good[1]] + good[2:]  # sequence 1 is empty
    with pytest.raises(InvalidInputError, match="sequence 1 has length 0"):
        decode_batch(request(flat, flat[-1]), 10_000)
    with pytest.raises(InvalidInputError, match=f"ends at {good[-1]} but input_ids holds"):
        decode_batch(request(good, good[-1] + 1), 10_000)
    with pytest.raises(InvalidInputError, match="at least two entries"):
        decode_batch(request([0], 1), 10_000)
