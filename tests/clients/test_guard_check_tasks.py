"""`hedgerow guard check` against `hedgerow serve` of a cross-encoder and of a sparse model
(random-weight checkpoints, tests/conftest.py): it sends the golden pairs to TEI's /rerank with
raw scores and the golden texts to /embed_sparse, and holds the answers to the golden set
`hedgerow guard record` wrote from the same directory; scores moved past the maximum fail
(exit 1), and a golden set of another task than the gateway serves is one clear line (exit 2).
"""

import json
import subprocess

import pytest

from hedgerow import golden_set
from tests.clients.conftest import running_stack
from tests.conftest import child_env, hedgerow_command, write_cross_encoder, write_lexical_model

pytestmark = pytest.mark.slow


def _run(*args):
    done = subprocess.run(hedgerow_command("guard", *args), capture_output=True, text=True,
                          env=child_env(), timeout=300)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    directory = write_cross_encoder(tmp_path_factory.mktemp("ce") / "ce", seed=3)
    golden = tmp_path_factory.mktemp("golden") / "rerank.json"
    code, _, err = _run("record", "--model", str(directory), "--output", str(golden))
    assert code == 0, err
    with running_stack(tmp_path_factory, "--model", str(directory)) as served:
        yield served, golden


@pytest.fixture(scope="module")
def lexical(tmp_path_factory):
    directory = write_lexical_model(tmp_path_factory.mktemp("lexical") / "lexical", seed=4)
    golden = tmp_path_factory.mktemp("golden") / "sparse.json"
    code, _, err = _run("record", "--model", str(directory), "--task", "sparse", "--output",
                        str(golden))
    assert code == 0, err
    with running_stack(tmp_path_factory, "--model", str(directory), "--task",
                       "sparse") as served:
        yield served, golden


def test_guard_check_holds_a_rerankers_gateway_to_its_golden_pairs(reranker, tmp_path):
    served, golden = reranker
    code, out, err = _run("check", served.url, "--golden", str(golden))
    assert code == 0, out + err
    report = json.loads(out)
    assert report["task"] == "rerank" and report["texts"] == 32
    assert report["max_score_delta"] <= 1e-4 and report["max_flipped_gap"] == 0.0
    assert report["space"] == golden_set.parse(golden.read_bytes()).fingerprint
    # Every score moved by 0.2: past the default maximum, yet each query's order is kept.
    document = golden_set.parse(golden.read_bytes()).document()
    document["scores"] = [score + 0.2 for score in document["scores"]]
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(document))
    code, out, err = _run("check", served.url, "--golden", str(moved))
    assert code == 1, out + err
    report = json.loads(out)
    assert report["matches"] is False and report["max_score_delta"] == pytest.approx(0.2, 1e-3)
    assert "(past the maximum 0.1); every query's order kept" in report["message"]
    code, out, err = _run("check", served.url, "--golden", str(moved), "--max-score-delta",
                          "0.25")
    assert code == 0, out + err


def test_guard_check_holds_a_sparse_models_gateway_to_its_lexical_weights(lexical):
    served, golden = lexical
    code, out, err = _run("check", served.url, "--golden", str(golden))
    assert code == 0, out + err
    report = json.loads(out)
    assert report["task"] == "sparse" and report["min_cosine"] >= 0.99999


def test_a_golden_set_of_another_task_than_the_gateway_serves_is_one_clear_line(reranker,
                                                                               lexical):
    code, out, err = _run("check", reranker[0].url, "--golden", str(lexical[1]))
    assert code == 2 and out == ""
    assert f"{reranker[0].url} serves model 'ce' of task rerank; the golden set was recorded " \
        "for task sparse (texts and their sparse vectors) from model 'lexical'" in err
    assert "Traceback" not in err
