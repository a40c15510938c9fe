"""The graph cache's state machine, on the CPU, with a fake backend (the grid's arithmetic is
tested in tests/test_graph_grid.py).

The fake stands in for CUDA (capture and replay need a GPU; the GPU tests in
test_gpu_graphs.py exercise the real backend): it records which of eager / capture / replay ran
for which configuration, reports a fixed number of bytes per capture, and can be told to fail a
capture. Also: the bucket-padding image `pack_bucket` and, with the CPU model and attention,
that tail padding and empty sequence slots change no real sequence's output.
"""

import pytest
import torch

from hedgerow.engine.graphs import Action, CaptureError, GraphCache, State
from hedgerow.graph_grid import Config, GraphGrid, parse_hot_set


class FakeBackend:
    def __init__(self, capture_bytes=1000, fail=()):
        self.calls = []
        self.capture_bytes = capture_bytes
        self.fail = set(fail)

    def run_eager(self, config, feed):
        self.calls.append(("eager", config))
        return ("eager", config, feed)

    def capture(self, config):
        self.calls.append(("capture", config))
        if config in self.fail:
            raise CaptureError(f"cannot capture {config}; use another attention backend")
        return self.capture_bytes

    def replay(self, config, feed):
        self.calls.append(("replay", config))
        return ("replay", config, feed)

    def warmup_feed(self, config):
        return ("warmup", config)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 0.25
        return self.now


# -- the state machine ------------------------------------------------------------------------

def test_cold_then_warm_then_captured():
    backend = FakeBackend()
    cache = GraphCache(GraphGrid(), backend, clock=FakeClock())
    config = Config(1, 128)
    assert cache.state(config) is State.COLD and cache.plan(config) is Action.EAGER
    assert cache.run(1, 100, "a") == ("eager", config, "a")
    assert cache.state(config) is State.WARM and cache.plan(config) is Action.CAPTURE
    assert cache.run(1, 128, "b") == ("replay", config, "b")
    assert cache.state(config) is State.CAPTURED and cache.plan(config) is Action.REPLAY
    assert cache.run(1, 65, "c") == ("replay", config, "c")
    assert backend.calls == [("eager", config), ("capture", config), ("replay", config),
                             ("replay", config)]
    report = cache.report()
    assert report["captured"] == 1 and report["replays"] == 2 and report["eager_runs"] == 1
    assert report["graph_memory_bytes"] == 1000
    assert report["capture_seconds_total"] == pytest.approx(0.25)
    assert report["graphs_by_state"]["captured"] == 1
    assert report["graphs_by_state"]["cold"] == cache.grid.size() - 1


def test_configurations_are_independent():
    backend = FakeBackend()
    cache = GraphCache(GraphGrid(), backend)
    cache.run(1, 100, None)
    cache.run(2, 100, None)   # another sequence-count bucket: its own first hit
    cache.run(1, 200, None)   # another token bucket
    assert [c[0] for c in backend.calls] == ["eager", "eager", "eager"]
    assert {row["state"] for row in cache.table()} == {"warm"}


def test_past_the_grid_runs_eager_and_is_counted():
    backend = FakeBackend()
    cache = GraphCache(GraphGrid(max_tokens=1024), backend)
    assert not cache.can_run(1, 2000) and cache.can_run(1, 1000)
    for _ in range(3):
        assert cache.run(1, 2000, "x") == ("eager", None, "x")
    report = cache.report()
    assert report["eager_past_grid"] == 3 and report["captured"] == 0
    assert report["configurations_seen"] == 0


def test_a_failed_capture_falls_back_to_eager_for_good():
    config = Config(1, 64)
    backend = FakeBackend(fail={config})
    cache = GraphCache(GraphGrid(), backend)
    cache.run(1, 10, None)
    assert cache.run(1, 10, "b") == ("eager", config, "b")
    assert cache.state(config) is State.FAILED
    assert cache.run(1, 10, "c") == ("eager", config, "c")
    assert [c[0] for c in backend.calls] == ["eager", "capture", "eager", "eager"]
    row = cache.table()[0]
    assert row["state"] == "failed" and "another attention backend" in row["message"]


def test_memory_limit_stops_capturing():
    backend = FakeBackend(capture_bytes=600)
    cache = GraphCache(GraphGrid(), backend, memory_limit_bytes=1000)
    for tokens in (64, 128, 192):
        cache.run(1, tokens, None)
        cache.run(1, tokens, None)
    states = [cache.state(Config(1, t)) for t in (64, 128, 192)]
    assert states == [State.CAPTURED, State.CAPTURED, State.OVER_BUDGET]
    assert cache.run(1, 192, "z") == ("eager", Config(1, 192), "z")
    report = cache.report()
    assert report["graph_memory_bytes"] == 1200 and report["graph_memory_limit_bytes"] == 1000
    assert "--graph-memory-limit-mib" in cache.table()[2]["message"]


def test_warmup_captures_the_hot_set_before_traffic():
    backend = FakeBackend()
    grid = GraphGrid()
    hot = parse_hot_set(["1x64", "1x128", "4x512"], grid)
    cache = GraphCache(grid, backend, hot_set=hot)
    assert cache.report()["coverage"] == 0.0
    cache.warmup()
    cache.loaded = True
    assert all(cache.state(c) is State.CAPTURED for c in hot)
    # each hot configuration: eager (warm the kernels), capture, one replay to check it runs
    assert [c[0] for c in backend.calls] == ["eager", "capture", "replay"] * 3
    report = cache.report()
    assert report["loaded"] and report["hot_set"] == 3 and report["hot_set_captured"] == 3
    assert report["coverage"] == 1.0 and report["configurations_seen"] == 0
    backend.calls.clear()
    assert cache.run(1, 100, "q") == ("replay", Config(1, 128), "q")
    assert backend.calls == [("replay", Config(1, 128))]
    cache.warmup()  # idempotent
    assert backend.calls == [("replay", Config(1, 128))]


def test_warmup_reports_partial_coverage_when_a_capture_fails():
    grid = GraphGrid()
    hot = parse_hot_set(["1x64", "1x128"], grid)
    cache = GraphCache(grid, FakeBackend(fail={Config(1, 128)}), hot_set=hot)
    cache.warmup()
    report = cache.report()
    assert report["hot_set_captured"] == 1 and report["coverage"] == 0.5
    assert report["graphs_by_state"]["failed"] == 1


def test_warmup_logs_how_far_along_it_is(caplog):
    grid = GraphGrid()
    hot = parse_hot_set(["1x64", "1x128"], grid)
    cache = GraphCache(grid, FakeBackend(fail={Config(1, 128)}), hot_set=hot)
    with caplog.at_level("INFO", logger="hedgerow.engine.graphs"):
        cache.warmup()
    lines = [r.getMessage() for r in caplog.records if "event=graph.warmup" in r.getMessage()]
    assert len(lines) == 2
    assert "done=1 total=2 state=captured" in lines[0]
    assert "done=2 total=2 state=failed" in lines[1]


def test_reset_forgets_states_but_not_past_work():
    backend = FakeBackend()
    cache = GraphCache(GraphGrid(), backend)
    for _ in range(3):
        cache.run(1, 64, None)
    cache.reset()
    assert cache.state(Config(1, 64)) is State.COLD and cache.memory_bytes == 0
    assert cache.run(1, 64, "again") == ("eager", Config(1, 64), "again")
    assert cache.report()["replays"] == 2 and cache.report()["captured"] == 1


def test_replay_share_counts_steps():
    cache = GraphCache(GraphGrid(), FakeBackend())
    for _ in range(4):
        cache.run(1, 64, None)
    report = cache.report()
    assert report["replays"] == 3 and report["eager_runs"] == 1
    assert report["replay_share"] == pytest.approx(0.75)
    row = cache.table()[0]
    assert (row["seq_slots"], row["tokens"], row["hits"], row["replays"]) == (1, 64, 4, 3)


def test_uniform_configurations_run_the_same_state_machine_off_the_grid():
    backend = FakeBackend(capture_bytes=600)
    cache = GraphCache(GraphGrid(), backend, memory_limit_bytes=1000)
    uniform = Config.dense(4, 100)
    assert cache.can_take(uniform)
    assert cache.run_config(uniform, "a")[0] == "eager"
    assert cache.run_config(uniform, "b")[0] == "replay"
    assert cache.state(uniform) is State.CAPTURED and cache.can_take(uniform)
    counts = cache.counts_by_state()
    # the grid's configurations are all still cold; the uniform one counts as captured
    assert counts["cold"] == GraphGrid().size() and counts["captured"] == 1
    assert cache.table()[0]["uniform"] == 100
    # a second capture passes the limit: the next new configuration could not be captured,
    # so the engine would not take it (it falls back to the grid)
    cache.run(1, 64, None)
    cache.run(1, 64, None)
    assert not cache.can_take(Config.dense(2, 50)) and cache.can_take(uniform)
    assert cache.counts_by_state()["cold"] == GraphGrid().size() - 1


# -- bucket padding, on the CPU model ---------------------------------------------------------

def _tiny_models():
    from hedgerow.engine.models.bert import BertConfig, BertModel
    from hedgerow.engine.models.qwen3 import Qwen3Config, Qwen3Model

    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4,
                                intermediate_size=48, max_position_embeddings=80,
                                position_offset=2)).eval()
    qwen = Qwen3Model(Qwen3Config(vocab_size=97, hidden_size=32, num_layers=2, num_heads=4,
                                  num_kv_heads=2, head_dim=16, intermediate_size=40,
                                  max_position_embeddings=128, causal=True)).eval()
    return {"bert": bert, "qwen3": qwen}


@pytest.mark.parametrize("arch", ["bert", "qwen3"])
@pytest.mark.parametrize("pooling", ["cls", "mean", "last"])
@pytest.mark.parametrize("lengths, config", [
    ([5, 1, 17], Config(4, 64)),     # empty slot and tail padding
    ([7, 9], Config(2, 16)),         # no padding at all
    ([3, 13], Config(8, 16)),        # empty slots, no tail padding (padding slot is empty)
    ([30], Config(1, 64)),           # one sequence, long tail
    ([6, 6, 6], Config.dense(3, 6)), # uniform: exactly three sequences of six, nothing padded
])
def test_bucket_padding_changes_no_real_output(arch, pooling, lengths, config):
    from hedgerow.engine.attention import CpuRaggedAttention
    from hedgerow.engine.batch import RaggedBatch
    from hedgerow.engine.gpu import bucket_views, pack_bucket
    from hedgerow.engine.pooling import pool
    from hedgerow.engine.positions import token_layout

    model = _tiny_models()[arch]
    generator = torch.Generator().manual_seed(len(lengths) * 31 + config.tokens)
    batch = RaggedBatch.from_sequences(
        [torch.randint(0, 97, (n,), generator=generator).tolist() for n in lengths])
    layout = token_layout(batch.cu_seqlens)
    attention = CpuRaggedAttention()
    with torch.inference_mode():
        hidden = model(batch.input_ids, layout.position_ids, batch.cu_seqlens, batch.max_seqlen,
                       attention)
        expected = pool(hidden, batch.cu_seqlens, layout.seq_index, layout.lengths, pooling)
        feed = batch
        packed = pack_bucket(feed, config, pooling)
        views = bucket_views(packed, config)
        assert views.cu_seqlens[-1] == config.tokens and views.seq_index.shape == (config.tokens,)
        hidden_padded = model(views.input_ids, views.position_ids, views.cu_seqlens,
                              config.tokens, attention)
        got = pool(hidden_padded, views.pool_starts, views.seq_index, views.lengths, pooling)
    assert got.shape == (config.seq_slots + 1, 32)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got[:len(lengths)], expected, rtol=1e-5, atol=1e-5)


def test_a_batch_that_does_not_fit_its_bucket_is_refused():
    from hedgerow.engine.batch import RaggedBatch
    from hedgerow.engine.gpu import pack_bucket

    batch = RaggedBatch.from_sequences([[1] * 70])
    feed = RaggedBatch(batch.input_ids, batch.cu_seqlens, 70)
    with pytest.raises(ValueError, match="does not fit"):
        pack_bucket(feed, Config(1, 64), "cls")


def test_unpadded_packing_matches_the_host_layout():
    from hedgerow.engine.batch import RaggedBatch
    from hedgerow.engine.gpu import pack_unpadded
    from hedgerow.engine.positions import token_layout

    batch = RaggedBatch.from_sequences([[5, 6, 7], [8], [9, 10]])
    packed = pack_unpadded(RaggedBatch(batch.input_ids, batch.cu_seqlens, 3))
    layout = token_layout(batch.cu_seqlens)
    t = 6
    assert packed[:t].tolist() == [5, 6, 7, 8, 9, 10]
    assert packed[t:2 * t].tolist() == layout.position_ids.tolist() == [0, 1, 2, 0, 0, 1]
    assert packed[2 * t:3 * t].tolist() == layout.seq_index.tolist()
    assert packed[3 * t:3 * t + 4].tolist() == [0, 3, 4, 6]
    assert packed[3 * t + 4:].tolist() == [3, 1, 2]
