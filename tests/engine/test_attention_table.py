"""The CUDA attention choice table and the SDPA fallback's ragged layout, on the CPU.

The table is plain data (no GPU needed). `SdpaPaddedAttention` uses only device-agnostic torch
ops, so its scatter/mask/gather logic is checked here against the float64 reference too; the
CUDA runs of every backend, eager and in a graph, are in test_gpu_attention.py.
"""

import json

import pytest
import torch

from hedgerow.engine.attention_cuda import (AttentionChooser, AttentionTable, Cell,
                                            SdpaPaddedAttention, shape_key)
from hedgerow.errors import ConfigError
from hedgerow.kernels.ragged_attention import reference_attention

KEY = shape_key(16, 8, 128, True)
TABLE = AttentionTable({KEY: [
    Cell(1, 128, {"varlen": 10.0, "sdpa": 20.0}),
    Cell(64, 4096, {"varlen": 900.0, "sdpa": 800.0, "flash_attn": 700.0}),
]})


def test_pick_is_the_fastest_available_backend_of_the_nearest_cell():
    assert KEY == "q16-kv8-d128-causal"
    assert TABLE.pick(KEY, 1, 100, ["varlen", "sdpa"]) == "varlen"
    assert TABLE.pick(KEY, 32, 4000, ["varlen", "sdpa"]) == "sdpa"
    assert TABLE.pick(KEY, 32, 4000, ["varlen", "flash_attn", "sdpa"]) == "flash_attn"
    assert TABLE.pick(KEY, 32, 4000, ["varlen"]) == "varlen"
    # a shape never measured: the first available backend (preference order)
    assert TABLE.pick("q1-kv1-d8-causal", 4, 4, ["varlen", "sdpa"]) == "varlen"
    with pytest.raises(ConfigError, match="no CUDA attention backend"):
        TABLE.pick(KEY, 1, 1, [])


def test_table_round_trips_through_json(tmp_path):
    path = tmp_path / "table.json"
    TABLE.save(path)
    raw = json.loads(path.read_text())
    assert raw["shapes"][KEY][1]["winner"] == "flash_attn"
    again = AttentionTable.load(path)
    assert again.pick(KEY, 64, 4096, ["varlen", "sdpa"]) == "sdpa"
    assert AttentionTable.load(tmp_path / "absent.json").shapes == {}
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="--attention-sweep"):
        AttentionTable.load(path)


def test_the_packaged_table_loads():
    AttentionTable.load()


def test_chooser_forced_and_unknown_backends():
    fake = {"varlen": object(), "sdpa": object()}
    chooser = AttentionChooser(16, 8, 128, True, table=TABLE, backends=fake)
    assert chooser.name_for(32, 4000) == "sdpa" and chooser.for_batch(1, 128) is fake["varlen"]
    forced = AttentionChooser(16, 8, 128, True, forced="sdpa", table=TABLE, backends=fake)
    assert forced.name_for(1, 128) == "sdpa"
    with pytest.raises(ConfigError, match="not available here"):
        AttentionChooser(16, 8, 128, True, forced="flash_attn", table=TABLE, backends=fake)
    with pytest.raises(ConfigError, match="unknown"):
        AttentionChooser(16, 8, 128, True, forced="xformers", table=TABLE, backends=fake)


def test_the_uniform_only_kernel_is_picked_for_uniform_batches_alone():
    key = shape_key(16, 16, 64, False)
    table = AttentionTable({key: [Cell(16, 512, {"varlen": 72.0, "fa4": 63.0, "cudnn": 48.0}),
                                  Cell(1, 4096, {"varlen": 226.0, "fa4": 143.0,
                                                 "cudnn": 147.0})]})
    fake = {"varlen": object(), "fa4": object(), "cudnn": object()}
    chooser = AttentionChooser(16, 16, 64, False, table=table, backends=fake)
    assert chooser.uniform_name_for(16, 512) == "cudnn"
    assert chooser.name_for(16, 512) == "fa4"      # a ragged batch never gets cuDNN
    assert chooser.uniform_name_for(1, 4096) == chooser.name_for(1, 4096) == "fa4"
    # below the shortest length cuDNN is given (it refuses length 1), the ragged pick
    assert chooser.uniform_name_for(16, 63) == "fa4"
    forced = AttentionChooser(16, 16, 64, False, forced="varlen", table=table, backends=fake)
    assert forced.uniform_name_for(16, 512) == forced.name_for(16, 512) == "varlen"
    with pytest.raises(ConfigError, match="unknown"):
        AttentionChooser(16, 16, 64, False, forced="cudnn", table=table, backends=fake)


@pytest.mark.parametrize("heads", [(4, 4, 16), (4, 2, 32)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_fallback_layout_matches_the_reference(heads, causal):
    q_heads, kv_heads, head_dim = heads
    lengths = [1, 7, 0, 13, 5]
    generator = torch.Generator().manual_seed(3)
    total = sum(lengths)
    q = torch.randn(total, q_heads, head_dim, generator=generator)
    k = torch.randn(total, kv_heads, head_dim, generator=generator)
    v = torch.randn(total, kv_heads, head_dim, generator=generator)
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths), 0)
    out = SdpaPaddedAttention()(q, k, v, cu, 20, causal)  # max_seqlen above the longest
    ref = reference_attention(q.double(), k.double(), v.double(), cu, 13, causal)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
