"""SPLADE through the CUDA step path (engine/gpu.py): bucketed, captured and replayed, the MLM
head and the max over tokens inside the graph, against the CPU engine in float32 on the same
checkpoint (tests/conftest.py `write_splade_model`). The GPU runs bfloat16, as it serves: values
agree within 0.1 (they reach about 2), and an id weighing more than 0.25 on either side is
non-zero on both; tail padding, empty slots and replay change nothing beyond that. Needs CUDA
and the packaged default model (its tokenizer files go into the test checkpoint).
"""

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from hedgerow.defaults import default_model_path  # noqa: E402
from hedgerow.errors import ModelLoadError  # noqa: E402

try:  # the checkpoint borrows its tokenizer files
    default_model_path()
except ModelLoadError as missing:
    pytest.skip(str(missing), allow_module_level=True)

from hedgerow.engine.batch import RaggedBatch  # noqa: E402
from hedgerow.engine.engine import Engine  # noqa: E402
from hedgerow.engine.graphs import State  # noqa: E402
from hedgerow.gpu_settings import GpuSettings  # noqa: E402
from hedgerow.graph_grid import Config  # noqa: E402
from tests.conftest import write_splade_model  # noqa: E402

VOCAB = 30522


@pytest.fixture(scope="module")
def splade_dir(tmp_path_factory):
    return write_splade_model(tmp_path_factory.mktemp("splade"), seed=4)


def _sequences(lengths, seed):
    generator = torch.Generator().manual_seed(seed)
    return [[101, *torch.randint(1000, VOCAB, (n - 2,), generator=generator).tolist(), 102]
            for n in lengths]


def _rows(engine, sequences):
    return engine.step(RaggedBatch.from_sequences(sequences)).synchronize().numpy().copy()


def _assert_same(got, expected):
    """bfloat16 against float32: within 0.1, and the same ids above 0.25 on either side."""
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= 0.1
    for ours, theirs in zip(got, expected):
        assert set(np.flatnonzero(ours > 0.25)) <= set(np.flatnonzero(theirs > 0))
        assert set(np.flatnonzero(theirs > 0.25)) <= set(np.flatnonzero(ours > 0))
    assert (expected > 0.25).sum() > 50  # the comparison means something


def test_splade_on_the_gpu_equals_the_cpu_in_every_cache_state(splade_dir):
    settings = GpuSettings(graph_hot_set=(), graph_max_tokens=256, graph_max_seqs=8,
                           graph_seq_buckets=(1, 2, 4, 8), compile=False)
    gpu = Engine.load(splade_dir, device="cuda", dtype="bfloat16", gpu_settings=settings)
    cpu = Engine.load(splade_dir, dtype="float32")
    assert (gpu.info.pooling, gpu.info.dimensions) == ("splade", VOCAB)
    sequences = _sequences([37, 5, 80], seed=1)  # 122 tokens: bucket 4 x 128, one empty slot
    expected = _rows(cpu, sequences)
    cache = gpu._gpu.cache
    for state in (State.COLD, State.WARM, State.CAPTURED):
        assert cache.state(Config(4, 128)) is state
        _assert_same(_rows(gpu, sequences), expected)
    assert gpu.warmup_report()["captured"] == 1
    other = _sequences([60, 3, 50], seed=2)  # the graph replays new data
    _assert_same(_rows(gpu, other), _rows(cpu, other))
    alone = _sequences([60], seed=2)  # a sequence alone equals it among others
    _assert_same(_rows(gpu, alone), _rows(gpu, other)[:1])
    past = _sequences([300, 200], seed=3)  # past the grid (256): the eager, unpadded path
    _assert_same(_rows(gpu, past), _rows(cpu, past))
