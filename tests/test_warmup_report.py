"""The /warmup contract: one definition of "warm", the body a server answers with, and the
parser the operator reads it with (hedgerow.warmup_report); then the server's side of it
(server/state.py) on a loading and a loaded engine."""

import json
import types

import pytest

from hedgerow.warmup_report import (
    WarmupReport, WarmupReportError, from_engine, hot_set_coverage, parse_report,
)


def _round_trip(report: WarmupReport, **details) -> WarmupReport:
    return parse_report(json.dumps(report.body(details)).encode())


@pytest.mark.parametrize("report, warm", [
    (WarmupReport(loaded=False, hot_set=4), False),
    (WarmupReport(loaded=True, hot_set=4, hot_set_captured=3), False),
    (WarmupReport(loaded=True, hot_set=4, hot_set_captured=4), True),
    (WarmupReport(loaded=True), True),  # no hot set: nothing to wait for
    # Over the graph memory limit (or a failed capture) those shapes run eagerly and the server
    # serves; waiting for full coverage would keep the pod out of traffic for good.
    (WarmupReport(loaded=True, serving=True, hot_set=4, hot_set_captured=2), True),
    (WarmupReport(loaded=False, error="no config.json"), False),
])
def test_warm_is_one_rule_and_survives_the_wire(report, warm):
    assert report.warm is warm
    parsed = _round_trip(report, steps=40, graph_memory_bytes=1)
    assert parsed == report and parsed.warm is warm


def test_the_body_carries_details_for_people_and_the_contract_wins():
    body = WarmupReport(loaded=True, hot_set=4, hot_set_captured=1).body(
        {"loaded": False, "coverage": 9, "steps": 3})
    assert body["loaded"] is True and body["coverage"] == 0.25 and body["steps"] == 3
    assert "error" not in body
    assert hot_set_coverage(0, 0) == 1.0


def test_descriptions():
    assert WarmupReport(loaded=True, hot_set=4, hot_set_captured=3).describe() == \
        "3/4 hot graphs captured (coverage 0.75)"
    partial = WarmupReport(loaded=True, serving=True, hot_set=4, hot_set_captured=2).describe()
    assert "2 run eagerly (graph memory limit or a failed capture" in partial
    assert WarmupReport(loaded=False).describe() == "model loading"
    assert "no config.json" in WarmupReport(loaded=False, error="no config.json").describe()


@pytest.mark.parametrize("raw, fragment", [
    (b"<html>", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"captured": 1}', "lacks the field 'loaded'"),
    (b'{"loaded": "yes"}', "'loaded' is not a boolean"),
    (b'{"loaded": true, "captured": "many"}', "'captured' is not a count"),
    (b'{"loaded": true, "hot_set": Infinity}', "'hot_set' is not a count"),
    (b'{"loaded": true, "hot_set_captured": -1}', "'hot_set_captured' is not a count"),
    (b'{"loaded": true, "serving": "yes"}', "'serving' is not a boolean"),
])
def test_malformed_reports_are_rejected(raw, fragment):
    with pytest.raises(WarmupReportError, match=fragment):
        parse_report(raw)


def test_an_engines_counts_make_the_report():
    engine = {"loaded": True, "hot_set": 6, "hot_set_captured": 6, "captured": 9}
    assert from_engine(engine, serving=False) == WarmupReport(
        loaded=True, hot_set=6, hot_set_captured=6, captured=9)
    assert from_engine({}, serving=True).warm  # the CPU engine: no graphs


def test_the_servers_warmup_body_follows_the_contract():
    from hedgerow.server.state import ServerState, warmup_report, warmup_status

    state = ServerState(settings=None, metrics=None, load_error="no config.json")
    assert warmup_report(state) == WarmupReport(loaded=False, error="no config.json")
    engine = types.SimpleNamespace(warmup_report=lambda: {
        "hot_set": 2, "hot_set_captured": 1, "captured": 5, "graph_memory_bytes": 7})
    loop = types.SimpleNamespace(steps=3, shapes={(1, 64)}, failed=None)
    state = ServerState(settings=None, metrics=None, engine=engine, loop=loop, serving=True)
    body = warmup_status(state)
    assert parse_report(json.dumps(body).encode()) == WarmupReport(
        loaded=True, serving=True, hot_set=2, hot_set_captured=1, captured=5)
    assert body["steps"] == 3 and body["step_shapes_seen"] == 1
    assert body["graph_memory_bytes"] == 7 and body["coverage"] == 0.5
    assert "failed" not in body
    loop.failed = "sticky device error: an illegal memory access was encountered"
    state.serving = False
    report = parse_report(json.dumps(warmup_status(state)).encode())
    assert report.failed == loop.failed and not report.warm
    assert report.describe() == f"engine failed: {loop.failed}"


SPACE = "s1-0123abcd-4567ef89"


def test_the_space_and_golden_check_survive_the_wire():
    from hedgerow.warmup_report import GoldenCheck

    for golden in (GoldenCheck(SPACE, 32, 0.9999423984854885), GoldenCheck(SPACE, 3),
                   GoldenCheck(SPACE, 3, problem="text 1 has 600 tokens")):
        report = WarmupReport(loaded=True, space=SPACE, golden=golden)
        assert _round_trip(report, space_facts={"dtype": "bfloat16"}) == report
    plain = WarmupReport(loaded=True, space=SPACE)
    assert "golden" not in plain.body({}) and _round_trip(plain) == plain


@pytest.mark.parametrize("field, value, message", [
    ("space", "sha-1234", "'space' is not a fingerprint"),
    ("golden", [], "'golden' is not an object"),
    ("golden", {"fingerprint": "x", "texts": 1}, "golden.fingerprint is not a fingerprint"),
    ("golden", {"fingerprint": SPACE, "texts": -1}, "golden.texts is not a count"),
    ("golden", {"fingerprint": SPACE, "texts": 1, "min_cosine": "high"},
     "golden.min_cosine is not a number"),
])
def test_malformed_space_fields_are_named(field, value, message):
    with pytest.raises(WarmupReportError, match=message):
        parse_report(json.dumps({"loaded": True, field: value}).encode())


def test_one_rule_judges_a_space_against_its_golden_set():
    from hedgerow.warmup_report import GoldenCheck, judge

    assert judge(SPACE, GoldenCheck(SPACE, 32, 0.9991), 0.999).matches is True
    assert judge(SPACE, GoldenCheck(SPACE, 32, 0.9989), 0.999).matches is False
    assert judge(SPACE, GoldenCheck(SPACE, 32, 1.0), 1.0).matches is True
    assert judge(SPACE, GoldenCheck(SPACE, 32), 0.999).matches is True  # fingerprint alone
    assert judge("s1-00000000-00000000", GoldenCheck(SPACE, 32), 0.999).matches is False
    assert judge(SPACE, GoldenCheck(SPACE, 32, problem="too long"), 0.0).matches is False


def test_a_rerankers_and_a_sparse_models_checks_survive_the_wire():
    from hedgerow.warmup_report import GoldenCheck

    for golden in (GoldenCheck(SPACE, 32, task="rerank", max_score_delta=0.0123,
                               max_flipped_gap=0.0),
                   GoldenCheck(SPACE, 32, 0.99998, task="sparse"),
                   GoldenCheck(SPACE, 32, task="rerank", problem="recorded for task embed")):
        report = WarmupReport(loaded=True, space=SPACE, golden=golden)
        assert _round_trip(report) == report
    # a report from a server that predates the other tasks: an embedding model's check
    old = parse_report(json.dumps({"loaded": True, "golden": {"fingerprint": SPACE,
                                                              "texts": 3}}).encode())
    assert old.golden.task == "embed"
    with pytest.raises(WarmupReportError, match="golden.task is not a task: 'x'"):
        parse_report(json.dumps({"loaded": True, "golden": {
            "fingerprint": SPACE, "texts": 3, "task": "x"}}).encode())
    with pytest.raises(WarmupReportError, match="golden.max_score_delta is not a number"):
        parse_report(json.dumps({"loaded": True, "golden": {
            "fingerprint": SPACE, "texts": 3, "max_score_delta": "small"}}).encode())


def test_a_cross_encoders_scores_are_held_to_the_largest_difference_and_their_order():
    from hedgerow.warmup_report import GoldenCheck, judge

    def scores(delta, flipped):
        return GoldenCheck(SPACE, 32, task="rerank", max_score_delta=delta,
                           max_flipped_gap=flipped)

    within = judge(SPACE, scores(0.01, 0.0), 0.999, 0.05)
    assert within.matches and within.max_score_delta == 0.01
    assert "0.010000 (within the maximum 0.05); every query's order kept" in within.message
    past = judge(SPACE, scores(0.2, 0.0), 0.999, 0.05)
    assert past.matches is False and "past the maximum 0.05" in past.message
    # noise may swap two documents recorded closer than the maximum, not further apart
    assert judge(SPACE, scores(0.03, 0.04), 0.999, 0.05).matches is True
    swapped = judge(SPACE, scores(0.04, 0.07), 0.999, 0.05)
    assert swapped.matches is False and "lie 0.070000 apart are ranked the other way" in \
        swapped.message
    sparse = judge(SPACE, GoldenCheck(SPACE, 32, 0.9995, task="sparse"), 0.999)
    assert sparse.matches and "32 sparse vectors 0.999500" in sparse.message
    mismatch = judge(SPACE, GoldenCheck(SPACE, 32, task="rerank", problem="recorded for "
                                        "task rerank"), 0.999)
    assert mismatch.matches is False and "cannot be checked here: recorded for task rerank" \
        in mismatch.message
