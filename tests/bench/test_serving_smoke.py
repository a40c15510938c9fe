"""The GPU serving benchmark's harness, end to end on CPU (`--smoke`): real server and gateway
processes, the correctness gate, all four charts, the JSON, the plots and the table. Numbers
meaningless; this keeps the harness runnable for the runs on the GPU."""

import json
import subprocess

import pytest

from tests.conftest import hedgerow_command

pytestmark = pytest.mark.slow


def test_serving_benchmark_smoke_runs_every_chart(tmp_path, subprocess_env):
    done = subprocess.run(
        hedgerow_command("bench", "serving-gpu", "--smoke", "--requests", "5", "--seconds", "2",
                         "--out", str(tmp_path)),
        env=subprocess_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "serving.json").read_text())
    gate = next(row for row in rows if row["chart"] == "gate")
    assert gate["min_cosine"] >= 0.999
    charts = {row["chart"] for row in rows}
    assert charts == {"gate", "chart1", "chart2", "chart3", "chart4"}
    assert all(row["p50"] > 0 for row in rows if "p50" in row)
    assert all(row["emb_s"] > 0 for row in rows if "emb_s" in row)
    assert "| model | chart | x | ours p50 |" in done.stdout
    # chart 1's means split by the server's counters, which saw every timed call and no other
    for row in (row for row in rows if row["chart"] == "chart1"):
        assert row["server_requests"] == row["requests"], row
        assert 0 < row["server_step_ms"] <= row["server_request_ms"] < row["mean"], row
        assert 0 <= row["server_queue_ms"] < row["server_request_ms"], row
    assert "Chart 1, where a request's mean goes (ms):" in done.stdout
    # chart 4's phases, counted by the server: each client's untimed first ten and its timed
    # ones; the gateway's time holds the tokenizer's and the server's
    for row in (row for row in rows if row["chart"] == "chart4"):
        assert row["server_requests"] == row["requests"] + 10 * row["x"], row
        assert 0 < row["gateway_tokenize_ms"] < row["gateway_request_ms"], row
        assert row["server_request_ms"] < row["gateway_request_ms"], row
    assert "Chart 4, where a request's mean goes (ms):" in done.stdout
    assert "Chart 4, the server during each phase:" in done.stdout
    assert "warming the batch shapes of up to 2 concurrent requests" in done.stdout
    for chart in ("chart1", "chart2", "chart3", "chart4"):
        assert (tmp_path / f"{chart}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
