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
