"""Warmup decisions for a pod's readiness gate, and the resource's conditions. (What a report
says and what "warm" means are tested with the contract, in tests/test_warmup_report.py.)"""

from hedgerow.operator import status, warmup
from hedgerow.warmup_report import WarmupReport


def _pod(running=True, started="2026-01-01T00:00:00Z", gate=None):
    body = {"metadata": {"name": "p"}, "status": {"podIP": "10.0.0.1", "containerStatuses": [
        {"name": "server", "state": {"running": {"startedAt": started}} if running
         else {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    if gate:
        body["status"]["conditions"] = [{"type": "hedgerow.dev/graphs-warm", **gate}]
    return warmup.server_pod(body)


WARM = WarmupReport(loaded=True, hot_set=2, hot_set_captured=2)
COLD = WarmupReport(loaded=True, hot_set=2, hot_set_captured=1)
TRUE_GATE = {"status": "True", "reason": "GraphsCaptured",
             "lastTransitionTime": "2026-01-01T00:05:00Z"}


def test_decisions():
    assert warmup.decide(_pod(), WARM, None).status == "True"
    assert warmup.decide(_pod(), COLD, None).reason == warmup.WARMING
    assert warmup.decide(_pod(running=False), WARM, None).reason == warmup.NOT_RUNNING
    assert warmup.decide(_pod(), None, "refused").reason == warmup.UNREACHABLE
    # Warm and briefly unreachable: keep the gate (gRPC readiness guards a broken server).
    assert warmup.decide(_pod(gate=TRUE_GATE), None, "timeout").status == "True"


def test_gate_resets_when_the_container_restarted_after_it_turned_true():
    restarted = _pod(started="2026-01-01T01:00:00Z", gate=TRUE_GATE)
    assert warmup.restarted_since_warm(restarted)
    decision = warmup.decide(restarted, None, "connection refused")
    assert (decision.status, decision.reason) == ("False", warmup.RESTARTED)
    assert not warmup.restarted_since_warm(_pod(gate=TRUE_GATE))
    # The next cycle sees the reset gate: the reason stays until the new process reports.
    reset = _pod(started="2026-01-01T01:00:00Z", gate={
        "status": "False", "reason": warmup.RESTARTED,
        "lastTransitionTime": "2026-01-01T01:00:05Z"})
    assert not warmup.needs_patch(reset, warmup.decide(reset, None, "connection refused"))
    assert warmup.decide(reset, COLD, None).reason == warmup.WARMING
    assert warmup.decide(reset, WARM, None).status == "True"


def test_gate_patch_only_on_change_and_transition_time_kept():
    pod = _pod(gate=TRUE_GATE)
    same = warmup.decide(pod, WARM, None)
    assert not warmup.needs_patch(pod, same)
    assert warmup.gate_condition(pod, same, "2026-02-01T00:00:00Z")["lastTransitionTime"] == \
        TRUE_GATE["lastTransitionTime"]
    flipped = warmup.decide(pod, COLD, None)
    assert warmup.needs_patch(pod, flipped)
    assert warmup.gate_condition(pod, flipped, "2026-02-01T00:00:00Z")["lastTransitionTime"] == \
        "2026-02-01T00:00:00Z"


def _seen(**counts):
    base = dict(desired_servers=3, servers=3, ready_servers=3, updated_servers=3,
                warm_servers=3, desired_gateways=2, ready_gateways=2)
    return status.Observed(**{**base, **counts})


def _by_type(conditions):
    return {c["type"]: c for c in conditions}


def test_conditions_for_a_converged_service():
    conds = _by_type(status.healthy_conditions(_seen(), generation=7))
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["observedGeneration"] == 7
    assert conds["Progressing"]["status"] == "False"
    assert conds["GraphsWarm"]["status"] == "True"
    assert conds["GraphsWarm"]["message"] == "3/3 server replicas warm"


def test_conditions_while_warming_and_rolling():
    conds = _by_type(status.healthy_conditions(_seen(warm_servers=1, ready_servers=1), 1))
    assert conds["Ready"]["status"] == "True"
    assert conds["Progressing"]["reason"] == status.WARMING
    assert conds["GraphsWarm"]["message"] == "1/3 server replicas warm"
    conds = _by_type(status.healthy_conditions(_seen(updated_servers=1, ready_servers=0), 1))
    assert conds["Ready"]["reason"] == status.NO_READY_SERVERS
    assert conds["Progressing"]["reason"] == status.ROLLING_OUT
    conds = _by_type(status.healthy_conditions(_seen(desired_servers=0, servers=0,
                                                     ready_servers=0, updated_servers=0,
                                                     warm_servers=0), 1))
    assert conds["GraphsWarm"]["reason"] == status.NO_SERVERS


def test_merge_keeps_transition_time_and_lists_transitions():
    old = status.merge(None, status.healthy_conditions(_seen(warm_servers=1), 1), "T1")
    new_conditions = status.healthy_conditions(_seen(), 1)
    merged = _by_type(status.merge(old, new_conditions, "T2"))
    assert merged["Ready"]["lastTransitionTime"] == "T1"
    assert merged["GraphsWarm"]["lastTransitionTime"] == "T2"
    changed = {c["type"] for c in status.transitions(old, new_conditions)}
    assert changed == {"GraphsWarm", "Progressing"}


def test_invalid_conditions():
    conds = status.invalid_conditions("ModelVolumeNotFound", "no PVC", 4)
    by_type = _by_type(conds)
    assert by_type["Ready"]["status"] == "False"
    assert by_type["Ready"]["reason"] == "ModelVolumeNotFound"
    assert by_type["GraphsWarm"]["status"] == "Unknown"
    assert status.spec_not_applied(conds)
    assert not status.spec_not_applied(status.healthy_conditions(_seen(), 4))
    assert not status.spec_not_applied(None)


SPACE, OTHER = "s1-11111111-22222222", "s1-33333333-44444444"


def _guarded(cosine=None, problem=None, fingerprint=SPACE, warm=True, checked=True):
    from hedgerow.warmup_report import GoldenCheck

    golden = GoldenCheck(fingerprint=fingerprint, texts=32, min_cosine=cosine,
                         problem=problem) if checked else None
    return WarmupReport(loaded=True, hot_set=2, hot_set_captured=2 if warm else 1, space=SPACE,
                        golden=golden)


def test_a_guarded_gate_opens_only_on_a_matching_space():
    match = warmup.decide(_pod(), _guarded(cosine=0.99994), None, 0.999)
    assert (match.status, match.reason) == ("True", warmup.WARM)
    assert match.space.matches and match.space.min_cosine == 0.99994
    below = warmup.decide(_pod(), _guarded(cosine=0.91234), None, 0.999)
    assert (below.status, below.reason) == ("False", warmup.SPACE_MISMATCH)
    assert "0.912340" in below.message and "below the minimum 0.999" in below.message
    # Told at once, not after its hot set: the space is measured before the capture.
    early = warmup.decide(_pod(), _guarded(cosine=0.5, warm=False), None, 0.999)
    assert early.reason == warmup.SPACE_MISMATCH
    same = warmup.decide(_pod(), _guarded(fingerprint=SPACE), None, 0.999)
    assert same.status == "True"  # a golden set of the fingerprint alone: equal
    other = warmup.decide(_pod(), _guarded(fingerprint=OTHER), None, 0.999)
    assert other.reason == warmup.SPACE_MISMATCH and OTHER in other.message
    unfit = warmup.decide(_pod(), _guarded(problem="text 3 has 600 tokens"), None, 0.999)
    assert unfit.reason == warmup.SPACE_MISMATCH and "600 tokens" in unfit.message
    unchecked = warmup.decide(_pod(), _guarded(checked=False), None, 0.999)
    assert (unchecked.status, unchecked.reason) == ("False", warmup.SPACE_UNCHECKED)
    assert warmup.decide(_pod(), _guarded(checked=False, warm=False), None, 0.999).reason == \
        warmup.WARMING
    # Without a guard the golden-set check is not consulted.
    assert warmup.decide(_pod(), _guarded(cosine=0.5), None).status == "True"


def test_the_guard_admits_and_does_not_evict():
    """A pod let in keeps its gate when the verdict changes later (a raised minCosine): the
    whole fleet would otherwise leave traffic at once. A restarted one is judged again."""
    admitted = warmup.decide(_pod(gate=TRUE_GATE), _guarded(cosine=0.9995), None, 0.9999)
    assert admitted.status == "True" and admitted.space.matches is False
    restarted = _pod(started="2026-01-01T01:00:00Z", gate=TRUE_GATE)
    assert warmup.decide(restarted, _guarded(cosine=0.9995), None, 0.9999).reason == \
        warmup.SPACE_MISMATCH


def test_space_condition_names_the_pods_that_do_not_match_and_the_cosine():
    from hedgerow.warmup_report import space_verdict

    good = space_verdict(_guarded(cosine=0.99994), 0.999)
    bad = space_verdict(_guarded(cosine=0.81234), 0.999)
    cond = status.space_condition([status.PodSpace("a", True, good),
                                   status.PodSpace("b", False, bad)], "golden", 0.999, 3)
    assert (cond["type"], cond["status"], cond["reason"]) == (
        status.SPACE_MATCHES, "False", status.SPACE_MISMATCH)
    assert "1 of 2 server pods do not match golden set 'golden'" in cond["message"]
    assert "pod b (kept out of traffic)" in cond["message"] and "0.812340" in cond["message"]
    assert cond["observedGeneration"] == 3
    ok = status.space_condition([status.PodSpace("a", True, good),
                                 status.PodSpace("c", False, None)], "golden", 0.999, 3)
    assert (ok["status"], ok["reason"]) == ("True", status.GOLDEN_SET_MATCHES)
    assert "1/2 server pods match" in ok["message"] and "0.999940" in ok["message"]
    none = status.space_condition([status.PodSpace("c", False, None)], "golden", 0.999, 3)
    assert (none["status"], none["reason"]) == ("Unknown", status.NOT_CHECKED)


def test_a_cross_encoders_gate_and_condition_follow_its_scores():
    from hedgerow.warmup_report import GoldenCheck

    def scored(delta, flipped=0.0, problem=None):
        golden = GoldenCheck(fingerprint=SPACE, texts=32, task="rerank", max_score_delta=delta,
                             max_flipped_gap=flipped, problem=problem)
        return WarmupReport(loaded=True, hot_set=2, hot_set_captured=2, space=SPACE,
                            golden=golden)

    match = warmup.decide(_pod(), scored(0.004), None, 0.999, 0.05)
    assert match.status == "True" and match.space.max_score_delta == 0.004
    drifted = warmup.decide(_pod(), scored(0.3), None, 0.999, 0.05)
    assert drifted.reason == warmup.SPACE_MISMATCH and "past the maximum 0.05" in \
        drifted.message
    # the same drift passes a wider spec.guard.maxScoreDelta
    assert warmup.decide(_pod(), scored(0.3), None, 0.999, 0.5).status == "True"
    other_task = warmup.decide(_pod(), scored(None, None, problem="it was recorded for task "
                                              "embed (texts and their vectors); model ce "
                                              "serves task rerank"), None, 0.999, 0.05)
    assert other_task.reason == warmup.SPACE_MISMATCH and "serves task rerank" in \
        other_task.message
    ok = status.space_condition([status.PodSpace("a", True, match.space)], "golden", 0.999, 3,
                                0.05)
    assert ok["status"] == "True" and "largest score difference 0.004000 (maximum 0.05)" in \
        ok["message"]
    bad = status.space_condition([status.PodSpace("b", False, other_task.space)], "golden",
                                 0.999, 3, 0.05)
    assert bad["status"] == "False" and "cannot be checked here" in bad["message"]
