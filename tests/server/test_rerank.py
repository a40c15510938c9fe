"""The Rerank RPC over real gRPC: a real `hedgerow server` serving a random-weight
BertForSequenceClassification directory (tests/conftest.py `write_cross_encoder`) on CPU.

Small batches (128 tokens, 8 sequences), so the pairs are spread over several engine steps.
The expected scores are `transformers`' logits of the same checkpoint, pair by pair.
"""

import re

import grpc
import numpy as np
import pytest
import torch
import transformers

from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.conftest import write_cross_encoder
from tests.server.conftest import CLS, SEP, embed_request

QUERY = [2129, 2079, 2057, 4521]
DOCUMENTS = [[7592, 2088], [2129, 2079, 2057, 4521], [4937, 4521], [2023, 2003, 1037] * 30,
             [7592, 2088], [2057, 4521, 6207], [3899] * 40, [1037]]


def pair(query, document):
    return [CLS, *query, SEP, *document, SEP], [0] * (len(query) + 2) + [1] * (len(document) + 1)


def rerank_request(pairs, top_n, types=True) -> embed_pb2.RerankRequest:
    packed = embed_request([ids for ids, _ in pairs])
    flat_types = [t for _, seq_types in pairs for t in seq_types]
    return embed_pb2.RerankRequest(
        input_ids=packed.input_ids, cu_seqlens=packed.cu_seqlens, top_n=top_n,
        token_type_ids=np.asarray(flat_types, dtype="<i4").tobytes() if types else b"")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_cross_encoder(tmp_path_factory.mktemp("cross-encoder") / "reranker")


@pytest.fixture(scope="module")
def stub(start_server, model_dir):
    server = start_server("--model", str(model_dir), "--cpu-threads", "1",
                          "--max-batch-tokens", "128", "--max-batch-seqs", "8")
    with grpc.insecure_channel(server.address) as channel:
        yield embed_pb2_grpc.EmbedderStub(channel)


def reference_scores(model_dir, pairs) -> list[float]:
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir).eval()
    with torch.inference_mode():
        return [float(model(input_ids=torch.tensor([ids]),
                            token_type_ids=torch.tensor([types])).logits[0, 0])
                for ids, types in pairs]


def test_info_names_the_task(stub):
    info = stub.Info(embed_pb2.InfoRequest(), timeout=30)
    assert (info.task, info.dimensions, info.token_types, info.pooling) == ("rerank", 1, 2, "cls")


@pytest.mark.parametrize("top_n", [1, 3, 8, 50])
def test_rerank_ranks_by_the_cross_encoders_logits(stub, model_dir, top_n):
    pairs = [pair(QUERY, document) for document in DOCUMENTS]
    response = stub.Rerank(rerank_request(pairs, top_n), timeout=120)
    expected = reference_scores(model_dir, pairs)
    order = sorted(range(len(pairs)), key=lambda i: (-expected[i], i))[:top_n]
    assert list(response.indices) == order
    np.testing.assert_allclose(response.scores, [expected[i] for i in order], rtol=0, atol=1e-3)
    # Identical pairs (documents 0 and 4) score identically: their ties go to the lower index.
    scores = dict(zip(response.indices, response.scores))
    if 0 in scores and 4 in scores:
        assert scores[0] == scores[4]
    assert response.prompt_tokens == sum(len(ids) for ids, _ in pairs)
    assert response.space.startswith("s1-")


def test_the_token_types_reach_the_model(stub):
    """The same ids with every token in segment 0 score otherwise: types are not dropped."""
    pairs = [pair(QUERY, DOCUMENTS[3])]
    typed = stub.Rerank(rerank_request(pairs, 1), timeout=60).scores[0]
    untyped = stub.Rerank(rerank_request(pairs, 1, types=False), timeout=60).scores[0]
    assert abs(typed - untyped) > 1e-4


@pytest.mark.parametrize("call", ["Embed", "Score"])
def test_an_embedding_call_to_a_reranker_names_its_task(stub, call):
    packed = embed_request([[CLS, 7592, SEP]] * 2)
    request = packed if call == "Embed" else embed_pb2.ScoreRequest(
        input_ids=packed.input_ids, cu_seqlens=packed.cu_seqlens, top_n=1)
    with pytest.raises(grpc.RpcError) as raised:
        getattr(stub, call)(request, timeout=30)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{call} needs a model of task 'embed'" in raised.value.details()
    assert "is of task 'rerank'" in raised.value.details()


@pytest.mark.parametrize("types, message", [
    ([0, 0, 2, 0, 0], r"token_type_ids\[2\] is 2; this model reads token types 0..1"),
    ([0, 0], r"token_type_ids holds 2 entries for 5 tokens"),
])
def test_bad_token_types_are_named(stub, types, message):
    packed = embed_request([[CLS, 7592, SEP, 2088, SEP]])
    request = embed_pb2.RerankRequest(input_ids=packed.input_ids, cu_seqlens=packed.cu_seqlens,
                                      top_n=1,
                                      token_type_ids=np.asarray(types, dtype="<i4").tobytes())
    with pytest.raises(grpc.RpcError) as raised:
        stub.Rerank(request, timeout=30)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(message, raised.value.details())
