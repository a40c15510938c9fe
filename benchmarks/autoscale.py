"""How the fleet would move under four traffic traces: the HPA's own algorithm, replayed.

`hedgerow bench autoscale` (or `python -P benchmarks/autoscale.py`) drives a model of one
EmbeddingService's servers with the autoscaling/v2 controller of benchmarks/hpa_model.py, for
each trace and each signal (spec.autoscaling.signal), and prints per run: the longest time the
load stayed above the ready replicas' capacity (for the surge, the time to enough replicas),
the p99 queue wait, the tokens refused, the scale events and the most replicas; `--plot PATH`
draws replicas and load over time (matplotlib). Seconds of model time, one step a second:

- replicas serve `--capacity` tokens/s each once ready; a new one is ready `--start` s after
  the HPA adds it (the measured start to SERVING) plus the operator's warmup read interval;
- the gateway queues tokens first come, first served and answers 429 (refuses) what would
  wait longer than `--max-queue` s (its --max-queue-seconds); refused tokens are lost;
- Prometheus scrapes every `--scrape` s; the adapter's value at a sync is the counter's rate
  over the last RATE_WINDOW s of samples (operator/token_signals.py);
- `served` counts what the servers ran, `offered` what reached the gateways' admission;
- the HPA syncs every 15 s with the operator's behavior (build_scaling.py, the CRD's
  defaults, unless a flag changes one) and target `--target` x capacity per replica.

Defaults are BGE-M3 on one H200 (docs/benchmarks.md: 1,338 embeddings/s of 512 tokens, about
685,000 tokens/s; SERVING 25 s after start with a filled compile cache). `--device cpu` takes
the 2-core CPU machine's measured all-MiniLM-L6-v2 server instead.
"""

import argparse
import dataclasses
import math
import sys
from typing import Callable

from hedgerow.bench import hpa_model
from hedgerow.bench.processes import positive
from hedgerow.operator import build_scaling, crd, token_signals

# Measured (docs/benchmarks.md): tokens/s one replica serves, seconds from start to SERVING.
MEASURED = {
    "gpu": {"capacity": 1338 * 512, "start": 25.0,
            "source": "BGE-M3 on an H200: 1,338 x 512-token embeddings/s, SERVING in 25 s "
                      "with a filled compile cache"},
    "cpu": {"capacity": 7537, "start": 3.0,
            "source": "all-MiniLM-L6-v2 on the 2-core CPU machine: 7,537 tokens/s at 16 "
                      "clients x 128 tokens, SERVING in 2.6-3.0 s"},
}
WARMUP_READ_S = 5.0      # the operator's --warmup-interval: a warm pod's gate opens by then
MAX_REPLICAS = 16
SETTLE_S = 600           # steady initial load before each trace, not counted


def surge(t: float) -> float:
    """1.5 replicas' worth, then 5x within 60 s at t=300, held 15 minutes."""
    return 1.5 if t < 300 else 1.5 + 6.0 * min(1.0, (t - 300) / 60)


def daily(t: float) -> float:
    """1 to 6 replicas' worth over three hours (half a cosine), then 15 minutes flat."""
    return 1.0 + 2.5 * (1 - math.cos(math.pi * min(t, 10800) / 10800))


def drop(t: float) -> float:
    """6 replicas' worth, then to 0.05 within 60 s at t=300, held 30 minutes."""
    return 6.0 if t < 300 else 6.0 - 5.95 * min(1.0, (t - 300) / 60)


def flapping(t: float) -> float:
    """2 replicas' worth, then 2 and 3 alternating every minute from t=300."""
    return 2.0 if t < 300 or int((t - 300) // 60) % 2 == 0 else 3.0


# name: (load in replicas' worth of capacity per second of trace time, duration s)
TRACES: dict[str, tuple[Callable[[float], float], int]] = {
    "surge 5x in 60 s": (surge, 1200),
    "daily ramp 1x-6x": (daily, 11700),
    "drop to 5 %": (drop, 2100),
    "flapping 2x-3x": (flapping, 1500),
}


@dataclasses.dataclass
class Run:
    trace: str
    signal: str
    times: list[float]
    load: list[float]           # offered tokens/s
    ready: list[int]            # replicas serving
    replicas: list[int]         # replicas the HPA asked for
    longest_short_s: float      # longest stretch with load above ready capacity
    p99_wait_s: float
    refused_fraction: float
    scale_events: int
    scale_downs_under_load: int  # scale-downs while the load was above ready capacity


def weighted_p99(samples: list[tuple[float, float]]) -> float:
    """The 99th percentile of wait, each (wait, tokens) weighted by its tokens."""
    total = sum(tokens for _, tokens in samples)
    if total == 0:
        return 0.0
    seen = 0.0
    for wait, tokens in sorted(samples):
        seen += tokens
        if seen >= 0.99 * total:
            return wait
    return samples[-1][0]


def simulate(trace: str, signal: str, capacity: float, start_s: float, target: float,
             up: hpa_model.Rules, down: hpa_model.Rules, scrape_s: float,
             max_queue_s: float, min_replicas: int = 1) -> Run:
    shape, duration = TRACES[trace]
    hpa = hpa_model.Hpa(min_replicas, MAX_REPLICAS, target, up, down)
    initial = max(min_replicas, math.ceil(shape(0) * capacity / target))
    pods = [-math.inf] * initial          # the time each pod is ready
    backlog, served_total, offered_total = 0.0, 0.0, 0.0
    samples: list[tuple[float, float]] = []   # (time, counter) as Prometheus scraped them
    waits: list[tuple[float, float]] = []
    refused = offered = 0.0
    run = Run(trace, signal, [], [], [], [], 0.0, 0.0, 0.0, 0, 0)
    short_since: float | None = None
    window = token_signals.RATE_WINDOW_SECONDS
    for second in range(-SETTLE_S, duration):
        t = float(second)
        load = shape(max(t, 0.0)) * capacity
        ready = sum(1 for at in pods if at <= t)
        cap = ready * capacity
        room = max(0.0, max_queue_s * cap - backlog)
        admitted = min(load, room)
        wait = backlog / cap if cap else math.inf
        done = min(backlog + admitted, cap)
        backlog += admitted - done
        served_total += done
        offered_total += load
        if second % scrape_s == 0:
            samples.append((t, offered_total if signal == "offered" else served_total))
            samples = [(at, value) for at, value in samples if at > t - window - scrape_s]
        if second % hpa_model.SYNC_PERIOD_S == 0:
            inside = [(at, value) for at, value in samples if at >= t - window]
            metric = None
            if len(inside) >= 2:
                metric = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
            desired = hpa.sync(t, len(pods), metric)
            if t >= 0 and desired != len(pods):
                run.scale_events += 1
                if desired < len(pods) and load > cap:
                    run.scale_downs_under_load += 1
            if desired > len(pods):
                pods += [t + start_s + WARMUP_READ_S] * (desired - len(pods))
            elif desired < len(pods):
                pods = sorted(pods)[:desired]   # not-ready pods go first, as a ReplicaSet does
        if t < 0:
            continue
        refused += load - admitted
        offered += load
        if done:
            waits.append((wait, done))
        short = load > cap * 1.0001
        if short and short_since is None:
            short_since = t
        if not short and short_since is not None:
            run.longest_short_s = max(run.longest_short_s, t - short_since)
            short_since = None
        run.times.append(t)
        run.load.append(load / capacity)
        run.ready.append(ready)
        run.replicas.append(len(pods))
    if short_since is not None:
        run.longest_short_s = max(run.longest_short_s, duration - short_since)
    run.p99_wait_s = weighted_p99(waits)
    run.refused_fraction = refused / offered if offered else 0.0
    return run


def operator_rules(defaults: dict) -> tuple[hpa_model.Rules, hpa_model.Rules]:
    """The behavior build_scaling.build_hpa writes for these spec.autoscaling values."""
    behavior = build_scaling.behavior(defaults)

    def rules(direction: dict) -> hpa_model.Rules:
        return hpa_model.Rules(direction["stabilizationWindowSeconds"], tuple(
            hpa_model.Policy(p["type"], p["value"], p["periodSeconds"])
            for p in direction["policies"]), direction["selectPolicy"])

    return rules(behavior["scaleUp"]), rules(behavior["scaleDown"])


def crd_defaults() -> dict:
    return {name: field["default"]
            for name, field in crd.AUTOSCALING["properties"].items() if "default" in field}


def table(runs: list[Run]) -> str:
    lines = ["| trace | signal | longest shortfall s | p99 queue wait s | tokens refused | "
             "scale events | most replicas | scale-downs under load |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for run in runs:
        lines.append(f"| {run.trace} | {run.signal} | {run.longest_short_s:.0f} | "
                     f"{run.p99_wait_s:.2f} | {100 * run.refused_fraction:.1f} % | "
                     f"{run.scale_events} | {max(run.replicas)} | "
                     f"{run.scale_downs_under_load} |")
    return "\n".join(lines)


def plot(runs: list[Run], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    traces = list(dict.fromkeys(run.trace for run in runs))
    figure, axes = pyplot.subplots(len(traces), 1, figsize=(10, 3.2 * len(traces)))
    for axis, trace in zip(axes, traces):
        first = True
        for run in (r for r in runs if r.trace == trace):
            minutes = [t / 60 for t in run.times]
            if first:
                axis.plot(minutes, run.load, color="black", linewidth=1.2,
                          label="load (replicas' worth)")
                first = False
            axis.step(minutes, run.ready, where="post", linewidth=1.4,
                      label=f"ready replicas, signal {run.signal}")
        axis.set_title(trace)
        axis.set_xlabel("minutes")
        axis.set_ylabel("replicas")
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=sorted(MEASURED), default="gpu",
                        help="whose measured capacity and start time (default gpu)")
    parser.add_argument("--capacity", type=positive, help="tokens/s one replica serves")
    parser.add_argument("--start", type=positive, help="seconds from a pod's start to SERVING")
    parser.add_argument("--target", type=positive, default=0.7,
                        help="targetTokensPerSecond as a fraction of --capacity (default 0.7)")
    parser.add_argument("--scrape", type=int, default=15, choices=(1, 5, 10, 15, 30),
                        help="Prometheus scrape interval, s (the ServiceMonitors' default 15)")
    parser.add_argument("--max-queue", type=positive, default=10.0,
                        help="the gateway's --max-queue-seconds (default 10)")
    parser.add_argument("--signals", default="offered,served",
                        help="comma-separated: offered, served")
    parser.add_argument("--plot", metavar="PATH", help="write replicas and load as a PNG")
    args = parser.parse_args()
    signals = [s for s in args.signals.split(",") if s]
    unknown = [s for s in signals if s not in token_signals.SIGNALS]
    if unknown or not signals:
        parser.error(f"--signals: choose from {', '.join(token_signals.SIGNALS)}")
    measured = MEASURED[args.device]
    capacity = args.capacity or measured["capacity"]
    start = args.start or measured["start"]
    up, down = operator_rules(crd_defaults())
    print(f"capacity {capacity:,.0f} tokens/s per replica, start {start:.0f} s + "
          f"{WARMUP_READ_S:.0f} s warmup read ({measured['source']}); target "
          f"{args.target:.2f} x capacity; scrape {args.scrape} s, rate window "
          f"{token_signals.RATE_WINDOW}, sync {hpa_model.SYNC_PERIOD_S} s; scale-up {up}; "
          f"scale-down {down}")
    runs = [simulate(trace, signal, capacity, start, args.target * capacity, up, down,
                     args.scrape, args.max_queue)
            for trace in TRACES for signal in signals]
    print(table(runs))
    budget = hpa_model.SYNC_PERIOD_S + start + WARMUP_READ_S + token_signals.RATE_WINDOW_SECONDS
    print(f"budget for the surge: one sync + start + warmup read + rate window = {budget:.0f} s")
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
