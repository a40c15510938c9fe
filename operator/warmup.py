"""Warmup of server pods: reading `/warmup` and deciding each pod's readiness-gate condition.

Owns the meaning of a server's warmup report and of the pod condition
`hedgerow.dev/graphs-warm`: a pod is warm when its model is loaded and its hot CUDA-graph set is
captured (coverage >= 1.0, or an empty hot set). The gate is reset when the server container
restarted after the gate last turned True (its graphs died with the process). `fetch_report`
is the only I/O here (an HTTP GET on the pod IP); the decisions are pure. Knows nothing about
EmbeddingServices or the Kubernetes API client.
"""

import asyncio
import dataclasses
import datetime
import json
from typing import Any, Mapping

import aiohttp

from hedgerow.operator import names

WARM = "GraphsCaptured"
WARMING = "Warming"
NOT_RUNNING = "ContainerNotRunning"
RESTARTED = "ContainerRestarted"
UNREACHABLE = "WarmupUnreachable"


class WarmupUnavailable(Exception):
    """The pod's /warmup could not be read or parsed; the message says why."""


@dataclasses.dataclass(frozen=True)
class WarmupReport:
    """The fields of a server's /warmup the operator reads (the server reports more)."""

    loaded: bool
    captured: int  # graphs captured so far, hot set or lazily
    hot_set: int  # size of the hot set
    hot_set_captured: int
    coverage: float  # share of the hot set captured
    error: str | None = None  # why loading failed, when it did
    # Health SERVING: warmup has returned. A hot-set shape that could not be captured (over
    # the graph memory limit, or a failed capture) runs eagerly, slower but correct, so a
    # serving replica joins traffic whatever its coverage; waiting for 1.0 would keep it out
    # for good.
    serving: bool = False

    @property
    def warm(self) -> bool:
        return self.loaded and (self.coverage >= 1.0 or self.hot_set == 0 or self.serving)

    def describe(self) -> str:
        if self.error:
            return f"model failed to load: {self.error}"[:300]
        if not self.loaded:
            return "model loading"
        text = (f"{self.hot_set_captured}/{self.hot_set} hot graphs captured "
                f"(coverage {self.coverage:.2f})")
        if self.serving and self.hot_set_captured < self.hot_set:
            text += (f"; warmup done, {self.hot_set - self.hot_set_captured} run eagerly (graph "
                     "memory limit or a failed capture: see the server's log)")
        return text


def parse_report(raw: bytes) -> WarmupReport:
    """A WarmupReport from /warmup's JSON; raises WarmupUnavailable on anything malformed."""
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise WarmupUnavailable(f"/warmup is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise WarmupUnavailable("/warmup is not a JSON object")
    try:
        loaded = data["loaded"]
        captured, hot_set = int(data.get("captured", 0)), int(data.get("hot_set", 0))
        coverage = float(data.get("coverage", 0.0))
        hot_captured = int(data.get("hot_set_captured", round(coverage * hot_set)))
    except KeyError:
        raise WarmupUnavailable("/warmup lacks the field 'loaded'") from None
    except (TypeError, ValueError, OverflowError) as error:  # Overflow: int(Infinity)
        raise WarmupUnavailable(f"/warmup has a malformed count: {error}") from None
    if not isinstance(loaded, bool):
        raise WarmupUnavailable("/warmup field 'loaded' is not a boolean")
    error = data.get("error")
    serving = data.get("serving", False)
    if not isinstance(serving, bool):
        raise WarmupUnavailable("/warmup field 'serving' is not a boolean")
    return WarmupReport(loaded=loaded, captured=captured, hot_set=hot_set,
                        hot_set_captured=hot_captured, coverage=coverage,
                        error=str(error) if error else None, serving=serving)


async def fetch_report(session: aiohttp.ClientSession, ip: str, port: int,
                       timeout: float) -> WarmupReport:
    """GET http://IP:PORT/warmup within `timeout` seconds."""
    url = f"http://{ip}:{port}/warmup"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                raise WarmupUnavailable(f"{url} answered HTTP {response.status}")
            return parse_report(await response.read())
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        raise WarmupUnavailable(f"{url}: {type(error).__name__} {error}".strip()) from None


@dataclasses.dataclass(frozen=True)
class ServerPod:
    """What warmup tracking needs of a server pod."""

    name: str
    ip: str | None
    running: bool
    started_at: datetime.datetime | None
    gate: Mapping[str, Any] | None  # the current hedgerow.dev/graphs-warm condition


def _time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def server_pod(pod: Mapping[str, Any]) -> ServerPod:
    status = pod.get("status") or {}
    container = next((c for c in status.get("containerStatuses") or ()
                      if c.get("name") == names.SERVER_CONTAINER), {})
    running = (container.get("state") or {}).get("running")
    gate = next((c for c in status.get("conditions") or ()
                 if c.get("type") == names.GATE_CONDITION), None)
    return ServerPod(
        name=pod["metadata"]["name"],
        ip=status.get("podIP"),
        running=running is not None,
        started_at=_time((running or {}).get("startedAt")),
        gate=gate,
    )


def restarted_since_warm(pod: ServerPod) -> bool:
    """The gate is True but the container started after it turned True."""
    if not pod.gate or pod.gate.get("status") != "True":
        return False
    since = _time(pod.gate.get("lastTransitionTime"))
    return pod.started_at is not None and since is not None and pod.started_at > since


@dataclasses.dataclass(frozen=True)
class GateDecision:
    status: str  # "True" or "False"
    reason: str
    message: str


def decide(pod: ServerPod, report: WarmupReport | None, error: str | None) -> GateDecision:
    """The gate a pod should carry, given its report (or the error reading it)."""
    if not pod.running:
        return GateDecision("False", NOT_RUNNING, "server container is not running")
    if report is not None:
        if report.warm:
            return GateDecision("True", WARM, report.describe())
        return GateDecision("False", WARMING, report.describe())
    if restarted_since_warm(pod) or (pod.gate or {}).get("reason") == RESTARTED:
        # Kept until the new process reports: the next cycle sees a False gate, and calling
        # it "unreachable" then would hide why the pod left traffic.
        return GateDecision("False", RESTARTED, "server container restarted; graphs lost")
    if pod.gate and pod.gate.get("status") == "True":
        # A warm server whose HTTP port blips keeps serving; its gRPC readiness probe is
        # what takes a broken server out of traffic.
        return GateDecision("True", pod.gate.get("reason") or WARM,
                            pod.gate.get("message") or "")
    return GateDecision("False", UNREACHABLE, error or "warmup not reported yet")


def needs_patch(pod: ServerPod, decision: GateDecision) -> bool:
    gate = pod.gate or {}
    return gate.get("status") != decision.status or gate.get("reason") != decision.reason


def gate_condition(pod: ServerPod, decision: GateDecision, at: str) -> dict:
    """The pod condition to write; its transition time moves only when its status does."""
    since = at
    if pod.gate and pod.gate.get("status") == decision.status:
        since = pod.gate.get("lastTransitionTime") or at
    return {"type": names.GATE_CONDITION, "status": decision.status, "reason": decision.reason,
            "message": decision.message, "lastTransitionTime": since, "lastProbeTime": at}
