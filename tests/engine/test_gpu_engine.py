"""The CUDA step path end to end on small random-weight checkpoints (bf16). Needs CUDA.

- replay equals eager in every cache state (cold: eager, warm: capture + replay, captured:
  replay), and both equal the unbucketed eager path;
- tail padding and empty sequence slots change nothing: a sequence's embedding is the same
  alone, in a bucket with a long padded tail, and in a batch with others (ragged equals
  per-sequence);
- past the grid runs eagerly; warmup captures the hot set; the LazyTensor protocol holds;
- the optional paths keep the embeddings: the GELU epilogue, the resident layers, QuACK's
  products, FP8.

Checkpoints: an XLM-R encoder (MHA, head dim 64, CLS pooling) and Qwen3 (GQA 4/2 heads of
128, causal and bidirectional, last-token and mean pooling), written with `transformers`.
"""

import json
from unittest import mock

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

import transformers  # noqa: E402

from hedgerow.engine.attention_cuda import (BACKEND_NAMES, AttentionTable,  # noqa: E402
                                            Cell, available_backends, shape_key)
from hedgerow.engine.batch import RaggedBatch  # noqa: E402
from hedgerow.engine import resident  # noqa: E402
from hedgerow.engine.engine import Engine  # noqa: E402
from hedgerow.engine.graphs import State  # noqa: E402
from hedgerow.engine.models.bert import BertModel  # noqa: E402
from hedgerow.gpu_settings import GpuSettings  # noqa: E402
from hedgerow.graph_grid import Config  # noqa: E402

VOCAB = 301


def assert_same_embeddings(got, expected):
    """bf16 agreement: cosine >= 0.999 per row, and no element off by more than 5% of the
    row's largest magnitude."""
    assert got.shape == expected.shape
    cosine = torch.nn.functional.cosine_similarity(got, expected, dim=-1)
    assert cosine.min().item() >= 0.999, cosine
    scale = expected.abs().amax(dim=-1, keepdim=True)
    assert ((got - expected).abs() <= 0.05 * scale).all()


def _write(directory, kind):
    torch.manual_seed(0)
    if kind == "xlmr":
        config = transformers.XLMRobertaConfig(
            vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=256, max_position_embeddings=1100, type_vocab_size=1,
            initializer_range=0.1)
        model = transformers.XLMRobertaModel(config, add_pooling_layer=False)
        pooling = {"pooling_mode_cls_token": True}
    else:
        config = transformers.Qwen3Config(
            vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=128, intermediate_size=256,
            max_position_embeddings=2048, initializer_range=0.1,
            use_bidirectional_attention=(kind == "qwen3-bidirectional"))
        model = transformers.Qwen3Model(config)
        pooling = {"pooling_mode_mean_tokens": True} if kind == "qwen3-bidirectional" else {
            "pooling_mode_lasttoken": True}
    model.to(torch.bfloat16).save_pretrained(str(directory))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return directory


KINDS = ["xlmr", "qwen3-causal", "qwen3-bidirectional"]


@pytest.fixture(scope="module", params=KINDS)
def model_dir(request, tmp_path_factory):
    return _write(tmp_path_factory.mktemp(request.param), request.param)


def _engine(model_dir, dtype="bfloat16", **settings):
    defaults = dict(graph_hot_set=(), graph_max_tokens=1024, graph_max_seqs=8,
                    graph_seq_buckets=(1, 2, 4, 8), compile=False)
    defaults.update(settings)
    return Engine.load(model_dir, device="cuda", dtype=dtype,
                       gpu_settings=GpuSettings(**defaults))


def _sequences(lengths, seed):
    generator = torch.Generator().manual_seed(seed)
    sequences = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in lengths]
    # XLM-R's padding id (1) as a token too, first and last: it takes the position padding_idx
    # without being counted, a cumulative sum that must also hold inside graphs and compiled.
    sequences[0][0] = sequences[-1][-1] = 1
    return sequences


def _embed(engine, sequences):
    lazy = engine.step(RaggedBatch.from_sequences(sequences))
    return lazy.synchronize().clone()


def test_replay_equals_eager_in_every_state(model_dir):
    engine = _engine(model_dir)
    plain = _engine(model_dir, graphs=False)
    sequences = _sequences([37, 5, 80], seed=1)     # 122 tokens: bucket 4 x 128
    config = Config(4, 128)
    expected = _embed(plain, sequences)
    cache = engine._gpu.cache
    results = {}
    for state in (State.COLD, State.WARM, State.CAPTURED):
        assert cache.state(config) is state
        results[state] = _embed(engine, sequences)
    assert cache.state(config) is State.CAPTURED
    report = engine.warmup_report()
    assert report["captured"] == 1 and report["replays"] == 2 and report["eager_runs"] == 1
    assert report["graph_memory_bytes"] > 0
    for state, got in results.items():
        assert got.shape == (3, 128) and got.dtype == torch.float32, state
        assert_same_embeddings(got, expected)
    # the same batch through the same kernels: replay reproduces the eager first hit
    torch.testing.assert_close(results[State.CAPTURED], results[State.COLD], rtol=1e-2,
                               atol=1e-2)
    # the graph replays new data, not the captured batch
    other = _sequences([60, 3, 50], seed=2)
    assert_same_embeddings(_embed(engine, other), _embed(plain, other))


def test_tail_padding_and_neighbours_change_nothing(model_dir):
    engine = _engine(model_dir)
    plain = _engine(model_dir, graphs=False)
    target = _sequences([45], seed=3)[0]
    others = _sequences([19, 64, 1, 200], seed=4)
    alone = _embed(plain, [target])[0]
    batches = [
        [target],                    # 1 x 64: 19 tail padding tokens
        [target] + others[:1],       # 2 x 64: exactly full, empty padding slot
        others[:2] + [target],       # 4 x 192: an empty slot and a padded tail
        others + [target],           # 8 x 384
    ]
    for batch in batches:
        position = batch.index(target)
        for _ in range(3):           # eager, capture + replay, replay
            got = _embed(engine, batch)
            assert_same_embeddings(got[position], alone)
    # ragged equals per-sequence, for every member of the largest batch
    batch = others + [target]
    got = _embed(engine, batch)
    for i, seq in enumerate(batch):
        assert_same_embeddings(got[i], _embed(plain, [seq])[0])


def test_past_the_grid_runs_eagerly(model_dir):
    engine = _engine(model_dir, graph_max_tokens=128)
    sequences = _sequences([100, 90], seed=5)       # 190 tokens > 128
    plain = _engine(model_dir, graphs=False)
    for _ in range(2):
        assert_same_embeddings(_embed(engine, sequences), _embed(plain, sequences))
    report = engine.warmup_report()
    assert report["eager_past_grid"] == 2 and report["captured"] == 0


def test_warmup_captures_the_hot_set_and_lazy_tensor_protocol(model_dir):
    engine = _engine(model_dir, graph_hot_set=("1x64", "2x128", "8x1024"))
    assert engine.warmup_report()["coverage"] == 0.0
    engine.warmup()
    report = engine.warmup_report()
    assert report["loaded"] and report["hot_set_captured"] == 3 and report["coverage"] == 1.0
    assert set(report["attention"].values()) <= set(BACKEND_NAMES)
    lazy = engine.step(RaggedBatch.from_sequences(_sequences([50], seed=6)))
    value = lazy.synchronize()
    assert lazy.ready() and value.is_pinned() and value.shape == (1, 128)
    assert engine.warmup_report()["replays"] == 1


@pytest.mark.parametrize("backend", ["varlen", "fa4", "sdpa"])
def test_each_backend_through_the_engine(model_dir, backend):
    if backend not in available_backends():
        pytest.skip(f"{backend} is not available here")
    engine = _engine(model_dir, attention_backend=backend)
    plain = _engine(model_dir, graphs=False, attention_backend="sdpa")
    sequences = _sequences([30, 70, 2], seed=7)
    expected = _embed(plain, sequences)
    for _ in range(3):
        assert_same_embeddings(_embed(engine, sequences), expected)


def test_compiled_forward_matches_eager(model_dir):
    if "xlmr" not in model_dir.name:
        pytest.skip("one architecture is enough to check the compiled path (compiles are slow)")
    engine = _engine(model_dir, compile=True)
    plain = _engine(model_dir, graphs=False)
    for lengths in ([37, 5, 80], [200], [64, 64], [300, 300, 300, 300]):  # the last: eager
        sequences = _sequences(lengths, seed=len(lengths))
        expected = _embed(plain, sequences)
        for _ in range(3):
            assert_same_embeddings(_embed(engine, sequences), expected)
    report = engine.warmup_report()
    assert report["compiled"] and report["captured"] == 3 and report["eager_past_grid"] == 3


def test_padding_aware_positions_on_the_device_match_the_host():
    """The CUDA path feeds int32 ids and positions from its packed buffer; the host int64."""
    from hedgerow.engine.models.bert import padding_aware_positions
    from hedgerow.engine.positions import token_layout

    ids = torch.tensor([1, 5, 1, 7, 1, 1, 9, 8, 1, 0, 0], dtype=torch.int32)
    cu = torch.tensor([0, 5, 6, 9, 11], dtype=torch.int32)  # the last: tail padding
    host = padding_aware_positions(ids.long(), token_layout(cu).position_ids, 1)
    device = padding_aware_positions(ids.cuda(), token_layout(cu).position_ids.int().cuda(), 1)
    assert host.tolist() == [1, 2, 1, 3, 1, 1, 2, 3, 1, 2, 3]
    assert device.cpu().tolist() == host.tolist()


def _stepper_preferring_cudnn(model_dir, **settings):
    """A CUDA stepper whose attention table says cuDNN wins every uniform cell."""
    from hedgerow.engine.gpu import stepper_for
    from hedgerow.engine.loader import load_model

    loaded = load_model(model_dir, device="cuda", dtype="bfloat16")
    config = loaded.config
    key = shape_key(config.num_heads, getattr(config, "num_kv_heads", config.num_heads),
                    config.head_dim, bool(getattr(config, "causal", False)))
    table = AttentionTable({key: [Cell(4, 64, {"varlen": 20.0, "cudnn": 10.0})]})
    defaults = dict(graph_hot_set=(), graph_max_tokens=1024, graph_max_seqs=8,
                    graph_seq_buckets=(1, 2, 4, 8), compile=False)
    defaults.update(settings)
    return stepper_for(loaded, GpuSettings(**defaults), table=table)


def test_a_uniform_batch_runs_dense_and_equals_the_ragged_path(model_dir):
    if "cudnn" not in available_backends():
        pytest.skip("cudnn is not available here")
    stepper = _stepper_preferring_cudnn(model_dir)
    plain = _engine(model_dir, graphs=False)
    uniform = _sequences([96] * 3, seed=8)
    expected = _embed(plain, uniform)
    for _ in range(3):  # eager, capture + replay, replay
        got = stepper.step(RaggedBatch.from_sequences(uniform)).synchronize()
        assert_same_embeddings(got, expected)
    assert stepper.cache.state(Config.dense(3, 96)) is State.CAPTURED
    assert stepper.report()["attention"]["3x288u"] == "cudnn"
    # a batch of mixed lengths, or a single sequence, keeps its grid configuration
    mixed = _sequences([96, 95, 96], seed=9)
    got = stepper.step(RaggedBatch.from_sequences(mixed)).synchronize()
    assert_same_embeddings(got, _embed(plain, mixed))
    assert stepper.cache.state(Config(4, 320)) is State.WARM


def test_a_uniform_batch_falls_back_to_the_grid_without_graph_memory(model_dir):
    if "cudnn" not in available_backends():
        pytest.skip("cudnn is not available here")
    stepper = _stepper_preferring_cudnn(model_dir, graph_memory_limit_mib=0)
    uniform = _sequences([40] * 4, seed=10)
    got = stepper.step(RaggedBatch.from_sequences(uniform)).synchronize()
    assert_same_embeddings(got, _embed(_engine(model_dir, graphs=False), uniform))
    assert stepper.cache.state(Config.dense(4, 40)) is State.COLD
    assert stepper.cache.state(Config(4, 192)) is State.WARM


def test_the_gelu_epilogue_keeps_the_embeddings(model_dir):
    if "xlmr" not in model_dir.name:
        pytest.skip("only the BERT family has a GELU")
    engine = _engine(model_dir, gelu_epilogue=True)
    plain = _engine(model_dir, graphs=False)
    sequences = _sequences([37, 5, 80], seed=11)
    expected = _embed(plain, sequences)
    for _ in range(3):
        assert_same_embeddings(_embed(engine, sequences), expected)


def test_the_resident_layers_keep_the_embeddings(model_dir):
    if "xlmr" not in model_dir.name:
        pytest.skip("only the BERT family has the resident layers")
    with mock.patch.object(resident, "RESIDENT_LAYERS", True):
        engine = _engine(model_dir, gelu_epilogue=True)
    assert [m.resident_layers is not None for m in engine._gpu.model.modules()
            if isinstance(m, BertModel)] == [True]
    plain = _engine(model_dir, graphs=False)
    # up to 128 tokens (one sequence, ragged with a one-token one, a full 128) take the
    # kernel; 200 tokens the layers one by one; each through eager, capture and replay
    for lengths in ([37], [37, 1, 80], [128], [120, 80]):
        sequences = _sequences(lengths, seed=len(lengths) + sum(lengths))
        expected = _embed(plain, sequences)
        for _ in range(3):
            assert_same_embeddings(_embed(engine, sequences), expected)


def test_quack_mlp_products_keep_the_embeddings(model_dir):
    # a 700-token batch takes QuACK's SwiGLU product (from 512 tokens), a short one the kernel
    quack = _engine(model_dir, quack_mlp=True)
    plain = _engine(model_dir, quack_mlp=False, graphs=False)
    for lengths in ([700], [37, 5, 80]):
        sequences = _sequences(lengths, seed=len(lengths))
        expected = _embed(plain, sequences)
        for _ in range(2):
            assert_same_embeddings(_embed(quack, sequences), expected)


def test_float8_runs_wide_batches_in_fp8_and_the_rest_in_bf16(model_dir):
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9 or newer")
    plain = _engine(model_dir, graphs=False)
    short = _sequences([37, 5, 80], seed=21)
    wide = _sequences([700, 600, 500, 400], seed=22)  # 2,200 tokens: FP8_MIN_TOKENS and up
    # the compiled path once (compiles are slow): Dynamo guards on the row count, so the
    # short and the wide bucket each get their own graph
    compile = "xlmr" in model_dir.name
    fp8 = _engine(model_dir, dtype="float8", graph_max_tokens=4096, compile=compile)
    assert fp8.info.dtype == "float8"
    assert Config(1, 2048) in fp8._gpu.cache.hot_set  # the FP8 side compiles before SERVING
    for _ in range(3):  # eager, capture + replay, replay
        assert_same_embeddings(_embed(fp8, short), _embed(plain, short))
    expected = _embed(plain, wide)
    for _ in range(3):
        got = _embed(fp8, wide)
        cosine = torch.nn.functional.cosine_similarity(got, expected, dim=-1)
        # FP8's own error on these random checkpoints: 0.991-0.997 with the same arithmetic on
        # the CPU with every product in FP8 (the QKV products alone err less); a wrong scale
        # or layout would land far lower
        assert cosine.min().item() >= 0.98, cosine
        assert not torch.equal(got, expected)  # FP8's rounding, not bf16's
