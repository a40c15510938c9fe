"""The Score RPC over real gRPC: a real `hedgerow server` process with the packaged model on CPU.

Small batches (128 tokens, 8 sequences) so a query and its documents are spread over several
engine steps shared with other requests. The expected answers come from the same server's Embed
(unnormalised rows), scored with engine.scoring.cosine_scores and ranked by the reference top-k.
"""

import asyncio

import grpc
import numpy as np
import pytest
import torch

from hedgerow.engine.scoring import cosine_scores
from hedgerow.kernels.topk_reference import topk_reference
from hedgerow.server.convert import decode_embeddings
from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.server.conftest import CLS, SEP, embed_request, sentence

MAX_REQUEST = 4096


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("--cpu-threads", "1", "--max-batch-tokens", "128", "--max-batch-seqs", "8",
                        "--max-request-tokens", str(MAX_REQUEST))


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield embed_pb2_grpc.EmbedderStub(channel)


def score_request(query, documents, top_n, dimensions=0) -> embed_pb2.ScoreRequest:
    packed = embed_request([query, *documents])
    return embed_pb2.ScoreRequest(input_ids=packed.input_ids, cu_seqlens=packed.cu_seqlens,
                                  top_n=top_n, dimensions=dimensions)


def expected(stub, query, documents, top_n, dimensions=0):
    """(indices, scores) from Embed's unnormalised rows, cosine, and the reference top-k."""
    rows = decode_embeddings(stub.Embed(embed_request([query, *documents], normalize=False,
                                                      dimensions=dimensions)))
    rows = torch.from_numpy(rows.copy())
    scores = cosine_scores(rows[0], rows[1:])
    indices, values = topk_reference(scores[None, :], min(top_n, len(documents)))
    return indices[0].tolist(), values[0].numpy()


QUERY = sentence(2129, 2079, 2057, 4521)                 # "how do we eat"
DOCUMENTS = [sentence(7592, 2088), sentence(2129, 2079, 2057, 4521), sentence(4937, 4521),
             sentence(2023, 2003, 1037, 3231, length=90), sentence(7592, 2088),
             sentence(2057, 4521, 6207), sentence(3899, length=40), sentence(7592, 2088)]


@pytest.mark.parametrize("top_n, dimensions", [(1, 0), (3, 0), (8, 0), (50, 0), (4, 128)])
def test_score_equals_the_cosine_of_embed_outputs(stub, top_n, dimensions):
    response = stub.Score(score_request(QUERY, DOCUMENTS, top_n, dimensions), timeout=120)
    want_indices, want_scores = expected(stub, QUERY, DOCUMENTS, top_n, dimensions)
    assert list(response.indices) == want_indices
    assert len(response.indices) == min(top_n, len(DOCUMENTS))
    np.testing.assert_array_equal(np.asarray(response.scores, np.float32), want_scores)
    assert response.prompt_tokens == len(QUERY) + sum(len(d) for d in DOCUMENTS)


def test_identical_documents_tie_and_rank_by_index(stub):
    response = stub.Score(score_request(QUERY, DOCUMENTS, 8), timeout=120)
    order = list(response.indices)
    scores = dict(zip(order, response.scores))
    assert order[0] == 1                                  # the query's own text
    assert scores[1] == pytest.approx(1.0, abs=1e-6)
    assert scores[0] == scores[4] == scores[7]            # bit-identical, three batches apart
    duplicates = [i for i in order if i in (0, 4, 7)]
    assert duplicates == [0, 4, 7]
    assert order.index(4) == order.index(0) + 1 and order.index(7) == order.index(4) + 1


def test_concurrent_scores_and_embeds_share_batches_and_keep_their_answers(server, stub):
    queries = [sentence(1000 + i, 2000 + i) for i in range(6)]
    documents = [sentence(1000 + i, length=20 + 7 * i) for i in range(10)]
    wants = [expected(stub, q, documents, 5) for q in queries]

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            aio = embed_pb2_grpc.EmbedderStub(channel)
            calls = [aio.Score(score_request(q, documents, 5), timeout=120) for q in queries]
            calls += [aio.Embed(embed_request(documents[:3]), timeout=120) for _ in range(4)]
            return await asyncio.gather(*calls)

    tokens_before = server.metric("hedgerow_server_tokens_total")
    outcomes = asyncio.run(main())
    for (want_indices, want_scores), got in zip(wants, outcomes):
        assert list(got.indices) == want_indices
        np.testing.assert_array_equal(np.asarray(got.scores, np.float32), want_scores)
    score_tokens = sum(len(q) + sum(len(d) for d in documents) for q in queries)
    embed_tokens = 4 * sum(len(d) for d in documents[:3])
    assert server.metric("hedgerow_server_tokens_total") - tokens_before == score_tokens + embed_tokens


def _raw(input_ids, cu_seqlens, **options):
    return embed_pb2.ScoreRequest(input_ids=np.asarray(input_ids, "<i4").tobytes(),
                                  cu_seqlens=np.asarray(cu_seqlens, "<i4").tobytes(), **options)


BAD_INPUTS = {
    "empty request": (embed_pb2.ScoreRequest(top_n=1), "empty request"),
    "only the query": (score_request(QUERY, [], 1), "no documents"),
    "top_n 0": (score_request(QUERY, DOCUMENTS[:2], 0), "top_n must be at least 1"),
    "cu_seqlens not increasing": (_raw([CLS, 7592, SEP, CLS, SEP], [0, 3, 3, 5], top_n=1),
                                  "strictly increasing"),
    "cu_seqlens not ending at the token count": (_raw([CLS, 7592, SEP, CLS, SEP], [0, 3, 4],
                                                      top_n=1), "ends at 4 but input_ids holds 5"),
    "token id past the vocabulary": (score_request(QUERY, [[CLS, 30522, SEP]], 1),
                                     "outside the vocabulary"),
    "document longer than the model allows": (
        score_request(QUERY, [sentence(7592, length=257)], 1), "at most 256 tokens per sequence"),
    "more tokens than the per-request limit": (
        score_request(QUERY, [sentence(7592, length=256)] * 16, 1), "per-request limit"),
    "dimensions wider than the model": (score_request(QUERY, DOCUMENTS[:2], 1, dimensions=385),
                                        "exceeds the model's width of 384"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_gets_invalid_argument_with_the_reason(stub, name):
    request, reason = BAD_INPUTS[name]
    with pytest.raises(grpc.RpcError) as caught:
        stub.Score(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in caught.value.details(), caught.value.details()


def test_rerank_on_an_embedding_model_names_its_task(stub):
    packed = embed_request([QUERY])
    with pytest.raises(grpc.RpcError) as raised:
        stub.Rerank(embed_pb2.RerankRequest(input_ids=packed.input_ids,
                                            cu_seqlens=packed.cu_seqlens, top_n=1), timeout=30)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("Rerank needs a model of task 'rerank'; model all-MiniLM-L6-v2 is of task 'embed'"
            in raised.value.details())
