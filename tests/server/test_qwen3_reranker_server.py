"""One Qwen3ForCausalLM directory, two real `hedgerow server` processes over real gRPC: what
the task decides (tests/qwen3_reranker.py writes the random-weight checkpoint and tokenizer).

`--task auto` (the default) serves it as the embedding model config.json says it is, and
refuses Rerank naming the task; `--task rerank` serves Qwen3-Reranker: Rerank ranks pairs by
the log-odds of "yes" (held to `transformers`' full LM head), and Embed is refused naming the
task. Neither is ever taken for the other without the flag.
"""

import grpc
import numpy as np
import pytest

from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.qwen3_reranker import reference_pairs, reference_scores, write_qwen3_reranker
from tests.server.conftest import embed_request

QUERY = "which shrubs make a good hedge for birds?"
DOCUMENTS = ["Hawthorn and blackthorn hedges give birds food and shelter.",
             "A stone wall runs beside the lane.", "Holly and ivy berries feed thrushes."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_qwen3_reranker(tmp_path_factory.mktemp("qwen3") / "qwen3-reranker", seed=9)


@pytest.fixture(scope="module")
def pairs(model_dir):
    return reference_pairs(model_dir, QUERY, DOCUMENTS, 512)


def _stub(start_server, model_dir, *flags):
    server = start_server("--model", str(model_dir), "--cpu-threads", "1", *flags)
    return grpc.insecure_channel(server.address)


def _rerank_request(pairs, top_n):
    packed = embed_request(pairs)
    return embed_pb2.RerankRequest(input_ids=packed.input_ids, cu_seqlens=packed.cu_seqlens,
                                   top_n=top_n)


def test_auto_serves_embeddings_and_refuses_rerank(start_server, model_dir, pairs):
    with _stub(start_server, model_dir) as channel:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        info = stub.Info(embed_pb2.InfoRequest(), timeout=30)
        assert (info.task, info.architecture, info.dimensions) == ("embed", "qwen3", 96)
        with pytest.raises(grpc.RpcError) as raised:
            stub.Rerank(_rerank_request(pairs, 1), timeout=30)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ("Rerank needs a model of task 'rerank'; model qwen3-reranker is of task "
                "'embed'") in raised.value.details()


def test_task_rerank_serves_the_reranker_and_refuses_embed(start_server, model_dir, pairs):
    with _stub(start_server, model_dir, "--task", "rerank") as channel:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        info = stub.Info(embed_pb2.InfoRequest(), timeout=30)
        assert (info.task, info.pooling, info.dimensions, info.token_types) == (
            "rerank", "last", 1, 1)
        response = stub.Rerank(_rerank_request(pairs, len(pairs)), timeout=60)
        _, log_odds = reference_scores(model_dir, pairs)
        order = sorted(range(len(pairs)), key=lambda i: (-log_odds[i], i))
        assert list(response.indices) == order
        np.testing.assert_allclose(response.scores, [log_odds[i] for i in order], rtol=0,
                                   atol=1e-3)
        with pytest.raises(grpc.RpcError) as raised:
            stub.Embed(embed_request(pairs[:1]), timeout=30)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Embed needs a model of task 'embed'" in raised.value.details()
        assert "is of task 'rerank'" in raised.value.details()
