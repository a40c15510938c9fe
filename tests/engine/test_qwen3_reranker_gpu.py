"""Qwen3-Reranker on the CUDA step path (buckets, CUDA graphs, the head captured with the
model) against `transformers` on the CPU. Needs CUDA.

The checkpoint and reference are tests/qwen3_reranker.py's (the model card's prompt, P("yes")
from the full LM head). In float32 the probabilities agree within 1e-3 per pair, in every
graph state (eager first hit, capture, replay), in the same order; bfloat16 within 0.05
(random weights: 0.026 measured on one H200).
"""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.engine.batch import RaggedBatch  # noqa: E402
from hedgerow.engine.engine import Engine  # noqa: E402
from hedgerow.engine.graphs import State  # noqa: E402
from hedgerow.gpu_settings import GpuSettings  # noqa: E402
from tests.qwen3_reranker import (reference_pairs, reference_scores,  # noqa: E402
                                  write_qwen3_reranker)

QUERY = "which shrubs make a good hedge for birds?"
DOCUMENTS = ["Hawthorn and blackthorn hedges give birds food and shelter.",
             "A stone wall runs beside the lane.", "Holly and ivy berries feed thrushes.",
             "yes"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_qwen3_reranker(tmp_path_factory.mktemp("qwen3-reranker"), seed=2)


@pytest.fixture(scope="module")
def reference(model_dir):
    pairs = reference_pairs(model_dir, QUERY, DOCUMENTS, 512)
    return pairs, reference_scores(model_dir, pairs)[0]


def _engine(model_dir, dtype):
    # float32: the padded-SDPA attention and cuBLAS, which take float32 (the flash kernels
    # and QuACK's products are for 16-bit types); bfloat16: the measured defaults.
    exact = {"attention_backend": "sdpa", "quack_mlp": False} if dtype == "float32" else {}
    settings = GpuSettings(graph_hot_set=(), graph_max_tokens=1024, graph_max_seqs=8,
                           graph_seq_buckets=(1, 2, 4, 8), compile=False, **exact)
    return Engine.load(model_dir, device="cuda", dtype=dtype, task="rerank",
                       gpu_settings=settings)


def _order(scores) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def test_float32_in_every_graph_state_matches_transformers(model_dir, reference):
    pairs, expected = reference
    engine = _engine(model_dir, "float32")
    assert (engine.info.task, engine.info.pooling, engine.info.dimensions) == ("rerank", "last", 1)
    batch = RaggedBatch.from_sequences(pairs)
    cache = engine._gpu.cache
    config = cache.grid.config_for(batch.num_seqs, batch.num_tokens)
    assert config is not None and len({len(p) for p in pairs}) > 1  # on the grid, ragged
    states = []
    for _ in range(3):  # cold (eager), warm (capture), captured (replay)
        states.append(cache.state(config))
        scores = engine.step(batch).synchronize()
        assert scores.shape == (len(pairs), 1) and scores.dtype == torch.float32
        probabilities = torch.sigmoid(scores[:, 0].double()).numpy()
        np.testing.assert_allclose(probabilities, expected, rtol=0, atol=1e-3)
        assert _order(probabilities.tolist()) == _order(expected)
    assert states == [State.COLD, State.WARM, State.CAPTURED]
    report = engine.warmup_report()
    assert report["captured"] == 1 and report["replays"] == 2


def test_bfloat16_stays_close(model_dir, reference):
    pairs, expected = reference
    scores = _engine(model_dir, "bfloat16").step(RaggedBatch.from_sequences(pairs)).synchronize()
    np.testing.assert_allclose(torch.sigmoid(scores[:, 0].double()).numpy(), expected,
                               rtol=0, atol=0.05)


def test_one_pair_alone_scores_as_in_the_batch(model_dir, reference):
    pairs, _ = reference
    engine = _engine(model_dir, "float32")
    together = engine.step(RaggedBatch.from_sequences(pairs)).synchronize()[:, 0]
    alone = torch.cat([engine.step(RaggedBatch.from_sequences([p])).synchronize()[:, 0]
                       for p in pairs])
    torch.testing.assert_close(alone, together, rtol=0, atol=1e-4)
