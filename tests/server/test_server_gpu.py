"""The real server process on a CUDA device: graphs warm before SERVING, results that arrive
asynchronously (LazyTensor not ready when `step` returns) reach the right callers. Needs CUDA.

The checkpoint is a small random-weight XLM-R encoder (bf16) written with `transformers`;
references come from the same engine loaded in this process, one request at a time.
"""

import asyncio
import json

import grpc
import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

import transformers  # noqa: E402

from hedgerow.engine.batch import RaggedBatch  # noqa: E402
from hedgerow.engine.engine import Engine  # noqa: E402
from hedgerow.gpu_settings import GpuSettings  # noqa: E402
from hedgerow.engine.pooling import postprocess  # noqa: E402
from hedgerow.server.convert import decode_embeddings  # noqa: E402
from hedgerow.wire import embed_pb2, embed_pb2_grpc  # noqa: E402
from tests.server.conftest import embed_request  # noqa: E402

VOCAB = 1000
HOT_SET = ("1x64", "2x128", "4x256")
GRAPH_FLAGS = ("--graph-max-tokens", "1024", "--graph-max-seqs", "8",
               "--graph-seq-buckets", "1,2,4,8", "--graph-hot-set", ",".join(HOT_SET))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("xlmr")
    torch.manual_seed(0)
    config = transformers.XLMRobertaConfig(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=1100, type_vocab_size=1,
        initializer_range=0.1)
    model = transformers.XLMRobertaModel(config, add_pooling_layer=False)
    model.to(torch.bfloat16).save_pretrained(str(directory))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True}))
    return directory


@pytest.fixture(scope="module")
def server(start_server, model_dir):
    return start_server("--model", str(model_dir), "--device", "cuda", "--dtype", "bfloat16",
                        "--max-batch-tokens", "512", "--max-batch-seqs", "8", *GRAPH_FLAGS)


@pytest.fixture(scope="module")
def engine(model_dir):
    settings = GpuSettings(graph_max_tokens=1024, graph_max_seqs=8,
                           graph_seq_buckets=(1, 2, 4, 8), graph_hot_set=())
    return Engine.load(model_dir, device="cuda", dtype="bfloat16", gpu_settings=settings)


def reference(engine, sequences) -> np.ndarray:
    rows = engine.step(RaggedBatch.from_sequences(sequences)).synchronize().numpy().copy()
    return postprocess(rows, True, None)


def test_the_hot_set_is_captured_before_serving(server):
    warmup = server.warmup()
    assert warmup["loaded"] and warmup["serving"]
    assert warmup["hot_set"] == len(HOT_SET) and warmup["hot_set_captured"] == len(HOT_SET)
    assert warmup["coverage"] == 1.0


def test_concurrent_requests_on_the_gpu_get_their_own_results(server, engine):
    generator = torch.Generator().manual_seed(3)
    requests = []
    for r in range(96):
        lengths = torch.randint(2, 200, (1 + r % 4,), generator=generator).tolist()
        requests.append([torch.randint(3, VOCAB, (n,), generator=generator).tolist()
                         for n in lengths])

    async def main():
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = embed_pb2_grpc.EmbedderStub(channel)
            return await asyncio.gather(
                *(stub.Embed(embed_request(seqs), timeout=120) for seqs in requests))

    responses = asyncio.run(main())
    for seqs, response in zip(requests, responses):
        got = torch.from_numpy(decode_embeddings(response))
        want = torch.from_numpy(reference(engine, seqs))
        assert got.shape == want.shape
        cosine = torch.nn.functional.cosine_similarity(got, want, dim=-1)
        assert cosine.min().item() >= 0.999, cosine
    assert server.metric("hedgerow_server_tokens_total") >= sum(len(s) for r in requests for s in r)
    assert server.warmup()["steps"] >= 2


def test_a_second_start_of_the_model_reports_the_same_space(server, start_server, model_dir):
    """The fingerprint's probe part survives GPU run-to-run noise: a gateway treats two
    replicas of one model as one space only if their starts agree."""
    again = start_server("--model", str(model_dir), "--device", "cuda", "--dtype", "bfloat16",
                         "--max-batch-tokens", "512", "--max-batch-seqs", "8", *GRAPH_FLAGS)
    with grpc.insecure_channel(server.address) as first, \
            grpc.insecure_channel(again.address) as second:
        spaces = [embed_pb2_grpc.EmbedderStub(channel).Info(embed_pb2.InfoRequest(), timeout=30)
                  .space for channel in (first, second)]
    assert spaces[0].startswith("s1-") and spaces[0] == spaces[1], spaces
