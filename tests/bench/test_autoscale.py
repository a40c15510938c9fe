"""The HPA model (benchmarks/hpa_model.py) against the rules Kubernetes documents, and the
operator's autoscaling defaults against the simulation's acceptance bounds (docs/operator.md,
"Autoscaling on token throughput")."""

import pytest

from hedgerow.bench import autoscale, hpa_model
from hedgerow.bench.hpa_model import Hpa, Policy, Rules
from hedgerow.operator import token_signals

FREE = Rules(0, (Policy("Percent", 10000, 15),), "Max")


def test_within_the_tolerance_the_count_stays():
    hpa = Hpa(1, 100, target=100.0, up=FREE, down=Rules(0, FREE.policies, "Max"))
    assert hpa.sync(0, 10, 1090.0) == 10      # ratio 1.09: inside 0.1
    assert hpa.sync(15, 10, 1110.0) == 12     # ratio 1.11: ceil(1110 / 100)
    assert hpa.sync(30, 12, 600.0) == 6


def test_the_object_metric_decides_whatever_the_current_count():
    # AverageValue on an Object metric: desired = ceil(total / target), the count cancels.
    for current in (1, 3, 7):
        hpa = Hpa(1, 100, target=250.0, up=FREE, down=Rules(0, FREE.policies, "Max"))
        assert hpa.sync(0, current, 2000.0) == 8


def test_the_scale_down_window_keeps_the_highest_recommendation():
    hpa = Hpa(1, 100, target=100.0, up=FREE, down=Rules(300, FREE.policies, "Max"))
    assert hpa.sync(0, 4, 800.0) == 8
    assert hpa.sync(15, 8, 200.0) == 8        # 8 was recommended 15 s ago
    assert hpa.sync(299, 8, 200.0) == 8
    assert hpa.sync(315, 8, 200.0) == 2       # the 8 left the window


def test_the_scale_up_window_keeps_the_lowest_recommendation():
    hpa = Hpa(1, 100, target=100.0, up=Rules(60, FREE.policies, "Max"))
    assert hpa.sync(0, 2, 200.0) == 2
    assert hpa.sync(15, 2, 900.0) == 2        # 2 was recommended within 60 s
    assert hpa.sync(75, 2, 900.0) == 9


def test_policies_count_from_the_replicas_at_the_periods_start():
    pods = Hpa(1, 100, target=1.0, up=Rules(0, (Policy("Pods", 4, 60),), "Max"))
    assert pods.sync(0, 2, 50.0) == 6
    assert pods.sync(15, 6, 50.0) == 6        # 4 added within the last 60 s already
    assert pods.sync(75, 6, 50.0) == 10
    both = Hpa(1, 100, target=1.0,
               up=Rules(0, (Policy("Pods", 4, 60), Policy("Percent", 400, 60)), "Max"))
    assert both.sync(0, 3, 50.0) == 15        # Max: 3 x (1 + 400 %) beats 3 + 4
    least = Hpa(1, 100, target=1.0,
                up=Rules(0, (Policy("Pods", 4, 60), Policy("Percent", 400, 60)), "Min"))
    assert least.sync(0, 3, 50.0) == 7
    down = Hpa(1, 100, target=1.0, down=Rules(0, (Policy("Pods", 1, 60),), "Min"))
    assert down.sync(0, 9, 1.0) == 8
    assert down.sync(15, 8, 1.0) == 8


def test_min_and_max_bound_the_decision():
    hpa = Hpa(2, 5, target=1.0, up=FREE, down=Rules(0, FREE.policies, "Max"))
    assert hpa.sync(0, 3, 100.0) == 5
    assert hpa.sync(15, 5, 0.0) == 2
    assert hpa.sync(30, 2, None) == 2         # no metric: the HPA keeps the count


def _defaults_run(trace, signal):
    measured = autoscale.MEASURED["gpu"]
    up, down = autoscale.operator_rules(autoscale.crd_defaults())
    return autoscale.simulate(trace, signal, measured["capacity"], measured["start"],
                              0.7 * measured["capacity"], up, down, 15, 10.0)


def test_the_default_signal_meets_the_surge_within_its_budget():
    # docs/operator.md: one sync period + the measured start (and the warmup read) + the rate
    # window; no scale-down during the surge; at most one scale event for the flapping load.
    budget = (hpa_model.SYNC_PERIOD_S + autoscale.MEASURED["gpu"]["start"]
              + autoscale.WARMUP_READ_S + token_signals.RATE_WINDOW_SECONDS)
    default = autoscale.crd_defaults()["signal"]
    surge = _defaults_run("surge 5x in 60 s", default)
    assert surge.longest_short_s <= budget
    assert surge.scale_downs_under_load == 0
    assert all(b >= a for a, b in zip(surge.replicas, surge.replicas[1:]))  # never down
    assert _defaults_run("flapping 2x-3x", default).scale_events <= 1
    # ... and the other signal does not, which is why it is not the default.
    assert _defaults_run("surge 5x in 60 s", "served").longest_short_s > budget


def test_the_command_prints_every_trace_and_signal_and_writes_the_plot(tmp_path, monkeypatch,
                                                                        capsys):
    plot = tmp_path / "fleet.png"
    monkeypatch.setattr("sys.argv", ["autoscale", "--device", "cpu", "--plot", str(plot)])
    assert autoscale.main() == 0
    out = capsys.readouterr().out
    for trace in autoscale.TRACES:
        for signal in token_signals.SIGNALS:
            assert f"| {trace} | {signal} |" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_are_usage_errors(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["autoscale", "--signals", "cpu"])
    with pytest.raises(SystemExit) as exited:
        autoscale.main()
    assert exited.value.code == 2 and "--signals" in capsys.readouterr().err

def test_the_p99_wait_is_weighted_by_tokens():
    assert autoscale.weighted_p99([(1.0, 99.0), (3.0, 1.0)]) == 1.0
    assert autoscale.weighted_p99([(1.0, 98.0), (3.0, 2.0)]) == 3.0
    assert autoscale.weighted_p99([]) == 0.0
