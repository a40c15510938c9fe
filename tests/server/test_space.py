"""The weights digest among the embedding space's facts, started before the engine loads."""

import hashlib

import pytest
import torch
from safetensors.torch import save_file

from hedgerow.errors import ModelLoadError
from hedgerow.server.space import start_weights_digest, weights_digest


def test_the_digest_started_before_the_load_is_the_weights_digest(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"weight": torch.arange(12.0).reshape(3, 4)}, path)
    listing = f"model.safetensors {hashlib.sha256(path.read_bytes()).hexdigest()}"
    expected = hashlib.sha256(listing.encode()).hexdigest()
    assert start_weights_digest(tmp_path).result(timeout=60) == expected
    assert weights_digest(tmp_path) == expected


def test_a_digest_that_fails_raises_where_its_result_is_asked_for(tmp_path):
    future = start_weights_digest(tmp_path)  # no weight files here
    with pytest.raises(ModelLoadError):
        future.result(timeout=60)


class _RecordingEngine:
    """FOR THE TEST ONLY, not a model: answers each sequence's first id as its row and keeps
    the batches it was stepped with."""

    def __init__(self, dtype):
        from types import SimpleNamespace

        self.info = SimpleNamespace(dtype=dtype, max_tokens=512)
        self.batches = []

    def validate(self, batch):
        pass

    def step(self, batch):
        from hedgerow.engine.lazy import LazyTensor

        self.batches.append(batch)
        firsts = batch.input_ids[batch.cu_seqlens[:-1].long()].float()
        return LazyTensor.completed(firsts[:, None])


@pytest.mark.parametrize("dtype, stepped_tokens", [("bfloat16", 13), ("float8", 2048)])
def test_float8_measures_its_space_on_the_path_of_wide_batches(dtype, stepped_tokens):
    """Probe and golden-set batches are short; under float8 filler widens each to
    FP8_MIN_TOKENS tokens, so the vectors measured are those FP8 gives bulk traffic."""
    from hedgerow.server.space import _rows

    engine = _RecordingEngine(dtype)
    rows = _rows(engine, [[5, 6, 7], [8] * 10])
    assert rows.tolist() == [[5.0], [8.0]]  # the real sequences' rows, in order
    (stepped,) = engine.batches
    assert stepped.num_tokens == stepped_tokens
    assert max(stepped.cu_seqlens.diff().tolist()) <= 512  # filler within the model's length
