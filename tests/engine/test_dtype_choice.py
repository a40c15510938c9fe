"""`--dtype auto`: the decision rule on made-up measurements, and the real choice on this CPU."""

import time

import numpy as np
import pytest

from hedgerow.engine import dtype_choice
from hedgerow.engine.engine import Engine

ROWS = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


def runner(rows: np.ndarray, seconds: float):
    def run(batch):
        time.sleep(seconds)
        return rows
    return run


def probe():
    return dtype_choice.probe_batch(vocab_size=30522, max_tokens=512)


def test_bfloat16_is_kept_when_faster_and_in_the_same_space():
    close = ROWS + np.float32(1e-4) * ROWS[::-1]
    choice = dtype_choice.compare(runner(ROWS, 0.02), runner(close, 0.005), probe())
    assert choice.dtype == "bfloat16" and "smallest cosine" in choice.reason


def test_float32_is_kept_when_bfloat16_is_not_faster():
    choice = dtype_choice.compare(runner(ROWS, 0.005), runner(ROWS, 0.005), probe())
    assert choice.dtype == "float32" and "not faster" in choice.reason


def test_float32_is_kept_when_bfloat16_leaves_the_space():
    far = ROWS.copy()
    far[2] = -far[2]
    choice = dtype_choice.compare(runner(ROWS, 0.02), runner(far, 0.001), probe())
    assert choice.dtype == "float32" and "below 0.9999" in choice.reason
    broken = ROWS.copy()
    broken[0, 0] = np.nan
    assert dtype_choice.compare(runner(ROWS, 0.02), runner(broken, 0.001),
                                probe()).dtype == "float32"


def test_the_probe_batch_is_ordinary_tokens_within_the_model_limits():
    batch = dtype_choice.probe_batch(vocab_size=30522, max_tokens=64)
    ids = batch.input_ids
    assert int(ids.min()) >= 1000 and int(ids.max()) < 30000
    assert batch.max_seqlen <= 64 and batch.num_seqs == len(dtype_choice.PROBE_LENGTHS)


def test_a_cpu_without_bfloat16_flags_is_recognised(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t: fpu sse2 avx2 avx512f\n")
    assert not dtype_choice.cpu_has_native_bfloat16(info)
    info.write_text("flags\t: fpu avx512f avx512_bf16\n")
    assert dtype_choice.cpu_has_native_bfloat16(info)
    assert not dtype_choice.cpu_has_native_bfloat16(tmp_path / "missing")


@pytest.mark.slow
def test_auto_loads_one_engine_and_says_why(default_model_dir):
    engine = Engine.load(default_model_dir, dtype="auto")
    assert engine.info.dtype in ("float32", "bfloat16") and engine.info.dtype_reason
    if not dtype_choice.cpu_has_native_bfloat16():
        assert engine.info.dtype == "float32" and "no native bfloat16" in engine.info.dtype_reason
