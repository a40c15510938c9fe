"""The guard for a cross-encoder and a sparse model, with real `hedgerow guard record` and
`hedgerow server` processes on CPU and random-weight checkpoints of real shapes
(tests/conftest.py `write_cross_encoder`, `write_lexical_model`).

`guard record` writes a reranker's golden set of pairs whose scores are `transformers`' logits
of the same pairs (1e-3), and a sparse model's of lexical weights; a server of the same model
measures its own answers against them at start and matches, in bfloat16 too; a server of other weights does
not, by score; a golden set of another task than the served model's is reported as such,
naming both tasks, and the operator's verdict says why the replica is refused.
"""

import json
import subprocess

import pytest
import torch
import transformers
from tokenizers import Tokenizer

from hedgerow import golden_set
from hedgerow.golden_set import DEFAULT_MAX_SCORE_DELTA, DEFAULT_MIN_COSINE
from hedgerow.warmup_report import parse_report, space_verdict
from tests.conftest import child_env, hedgerow_command, write_cross_encoder, write_lexical_model

pytestmark = pytest.mark.slow
THREADS = ("--cpu-threads", "1")


def _record(path, *flags):
    done = subprocess.run(hedgerow_command("guard", "record", "--output", str(path), *flags),
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return golden_set.parse(path.read_bytes())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"ce": write_cross_encoder(root / "ce", seed=0),
            "ce-other": write_cross_encoder(root / "ce-other", seed=1),
            "lexical": write_lexical_model(root / "lexical", seed=2)}


@pytest.fixture(scope="module")
def goldens(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    return {"rerank": _record(root / "rerank.json", "--model", str(models["ce"])),
            "sparse": _record(root / "sparse.json", "--model", str(models["lexical"]),
                              "--task", "sparse"),
            "paths": {"rerank": root / "rerank.json", "sparse": root / "sparse.json"}}


@pytest.fixture(scope="module")
def servers(start_server, models, goldens):
    rerank, sparse = (str(goldens["paths"][task]) for task in ("rerank", "sparse"))
    return {
        "ce": start_server(*THREADS, "--model", str(models["ce"]), "--golden-set", rerank),
        "ce-bfloat16": start_server(*THREADS, "--model", str(models["ce"]), "--dtype",
                                    "bfloat16", "--golden-set", rerank),
        "ce-other": start_server(*THREADS, "--model", str(models["ce-other"]),
                                 "--golden-set", rerank),
        "lexical": start_server(*THREADS, "--model", str(models["lexical"]), "--task",
                                "sparse", "--golden-set", sparse),
        "embed-with-pairs": start_server(*THREADS, "--golden-set", rerank),
    }


def _reference_scores(directory, pairs) -> list[float]:
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()  # the packaged tokenizer.json pads to 128
    model = transformers.BertForSequenceClassification.from_pretrained(directory).eval()
    scores = []
    with torch.inference_mode():
        for query, document in pairs:
            encoding = tokenizer.encode(query, document)
            logits = model(input_ids=torch.tensor([encoding.ids]),
                           token_type_ids=torch.tensor([encoding.type_ids])).logits
            scores.append(float(logits[0, 0]))
    return scores


def test_guard_record_writes_a_rerankers_pairs_with_transformers_scores(models, goldens):
    golden = goldens["rerank"]
    assert golden.task == "rerank" and golden.dimensions is None and golden.texts == ()
    assert len(golden.pairs) == 32 and len({query for query, _ in golden.pairs}) == 8
    assert list(golden.scores) == pytest.approx(_reference_scores(models["ce"], golden.pairs),
                                                abs=1e-3)
    manifest = json.loads(goldens["paths"]["rerank"].read_text())
    assert json.loads(manifest["data"]["golden-set.json"])["task"] == "rerank"


def test_a_reranker_of_the_recorded_weights_matches_and_one_of_other_weights_does_not(
        servers, goldens):
    same = parse_report(servers["ce"].http_get("/warmup"))
    assert same.golden.task == "rerank" and same.golden.texts == 32
    assert same.golden.max_score_delta <= 1e-4 and same.golden.max_flipped_gap == 0.0
    assert same.space == goldens["rerank"].fingerprint
    verdict = space_verdict(same, DEFAULT_MIN_COSINE, DEFAULT_MAX_SCORE_DELTA)
    assert verdict.matches and "every query's order kept" in verdict.message
    other = parse_report(servers["ce-other"].http_get("/warmup"))
    assert other.serving and other.golden.max_score_delta > 0.5
    verdict = space_verdict(other, DEFAULT_MIN_COSINE, DEFAULT_MAX_SCORE_DELTA)
    assert verdict.matches is False and "past the maximum 0.1" in verdict.message
    assert "golden_max_score_delta=" in servers["ce-other"].log_text()


def test_a_bfloat16_reranker_stays_within_a_float32_golden_set_under_the_defaults(servers):
    report = parse_report(servers["ce-bfloat16"].http_get("/warmup"))
    assert 0.0 < report.golden.max_score_delta < DEFAULT_MAX_SCORE_DELTA
    assert report.golden.max_flipped_gap < DEFAULT_MAX_SCORE_DELTA
    assert space_verdict(report, DEFAULT_MIN_COSINE, DEFAULT_MAX_SCORE_DELTA).matches


def test_a_sparse_models_golden_set_holds_its_lexical_weights_and_its_server_matches(
        servers, goldens):
    golden = goldens["sparse"]
    assert golden.task == "sparse" and len(golden.sparse_vectors) == len(golden.texts) == 32
    assert all(golden.sparse_vectors) and 0 not in golden.sparse_vectors[0]  # [PAD] left out
    report = parse_report(servers["lexical"].http_get("/warmup"))
    assert report.golden.task == "sparse" and report.golden.min_cosine >= 0.99999
    verdict = space_verdict(report, DEFAULT_MIN_COSINE)
    assert verdict.matches and "32 sparse vectors" in verdict.message


def test_a_golden_set_of_another_task_is_a_mismatch_naming_both_tasks(servers):
    report = parse_report(servers["embed-with-pairs"].http_get("/warmup"))
    assert report.serving and report.golden.task == "rerank"
    verdict = space_verdict(report, DEFAULT_MIN_COSINE)
    assert verdict.matches is False
    assert "cannot be checked here: it was recorded for task rerank (query-document pairs " \
        "and their scores); model all-MiniLM-L6-v2 serves task embed" in verdict.message
