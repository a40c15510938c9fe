"""The autoscaling/v2 HorizontalPodAutoscaler's decision, as Kubernetes documents and runs it.

Owns one HPA's replica decision for one Object metric with an AverageValue target, the way
kube-controller-manager's podautoscaler makes it (pkg/controller/podautoscaler/horizontal.go;
the "Algorithm details" and "Configurable scaling behavior" sections of the Kubernetes HPA
documentation): every sync period the usage ratio metric / (target x current replicas) within
the 0.1 tolerance keeps the count, else the proposal is ceil(metric / target); the proposal is
stabilized (the lowest of the scale-up window's recommendations, the highest of the
scale-down window's), then limited by the scaling policies over their periods (counted from
the replicas at each period's start, `selectPolicy` Max or Min) and by min/max replicas.
Plain CPU code, no clock of its own: the caller passes the time. Knows nothing about pods,
Prometheus or what the metric means.
"""

import dataclasses
import math
from typing import Literal

TOLERANCE = 0.1          # kube-controller-manager --horizontal-pod-autoscaler-tolerance
SYNC_PERIOD_S = 15       # --horizontal-pod-autoscaler-sync-period


@dataclasses.dataclass(frozen=True)
class Policy:
    kind: Literal["Pods", "Percent"]
    value: int
    period_s: int


@dataclasses.dataclass(frozen=True)
class Rules:
    """One direction's `behavior` (HPAScalingRules)."""
    window_s: int
    policies: tuple[Policy, ...]
    select: Literal["Max", "Min", "Disabled"]


# What the HPA does when `behavior` leaves a direction out (the documented defaults).
DEFAULT_UP = Rules(0, (Policy("Percent", 100, 15), Policy("Pods", 4, 15)), "Max")
DEFAULT_DOWN = Rules(300, (Policy("Percent", 100, 15),), "Max")


@dataclasses.dataclass
class Hpa:
    min_replicas: int
    max_replicas: int
    target: float
    up: Rules = DEFAULT_UP
    down: Rules = DEFAULT_DOWN
    tolerance: float = TOLERANCE
    _recommendations: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    _up_events: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    _down_events: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    def proposal(self, metric: float, current: int) -> int:
        """The replica count the metric asks for (Object metric, AverageValue target)."""
        if current > 0:
            ratio = metric / (self.target * current)
            if abs(1.0 - ratio) <= self.tolerance:
                return current
        return math.ceil(metric / self.target)

    def sync(self, now: float, current: int, metric: float | None) -> int:
        """One sync at time `now` (seconds) with `current` replicas (the scale's count) and
        the metric's value (None when the metrics API has none: the HPA keeps the count)."""
        if metric is None:
            return current
        desired = self._stabilized(now, current, self.proposal(metric, current))
        desired = self._rate_limited(now, current, desired)
        if desired > current:
            self._up_events.append((now, desired - current))
        elif desired < current:
            self._down_events.append((now, current - desired))
        return desired

    def _stabilized(self, now: float, current: int, proposal: int) -> int:
        up, down = proposal, proposal
        for at, recommendation in self._recommendations:
            if at > now - self.up.window_s:
                up = min(up, recommendation)
            if at > now - self.down.window_s:
                down = max(down, recommendation)
        keep = max(self.up.window_s, self.down.window_s)
        self._recommendations = [(at, r) for at, r in self._recommendations if at > now - keep]
        self._recommendations.append((now, proposal))
        return min(max(current, up), down)

    def _changed(self, events: list[tuple[float, int]], now: float, period_s: int) -> int:
        return sum(change for at, change in events if at > now - period_s)

    def _limit(self, now: float, current: int, rules: Rules, up: bool) -> int:
        if rules.select == "Disabled":
            return current
        limits = []
        for policy in rules.policies:
            start = (current - self._changed(self._up_events, now, policy.period_s)
                     + self._changed(self._down_events, now, policy.period_s))
            if policy.kind == "Pods":
                limits.append(start + policy.value if up else start - policy.value)
            elif up:
                limits.append(math.ceil(start * (1 + policy.value / 100)))
            else:
                limits.append(int(start * (1 - policy.value / 100)))
        # Up: Max takes the largest step; down: Max takes the largest step (lowest limit).
        if up:
            return max(limits) if rules.select == "Max" else min(limits)
        return min(limits) if rules.select == "Max" else max(limits)

    def _rate_limited(self, now: float, current: int, desired: int) -> int:
        if desired > current:
            limit = max(self._limit(now, current, self.up, up=True), current)
            return min(desired, limit, self.max_replicas)
        if desired < current:
            limit = min(self._limit(now, current, self.down, up=False), current)
            return max(desired, limit, self.min_replicas)
        return desired
