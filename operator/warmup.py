"""Warmup of server pods: reading `/warmup` and deciding each pod's readiness-gate condition.

Owns the pod condition `hedgerow.dev/graphs-warm`: it is True when the pod's /warmup report is
warm (what that means, and the report's fields, are hedgerow.warmup_report's: the contract the
server answers with) and, with `spec.guard`, its space matches the golden set (judged there
too, `space_verdict`): a server that does not match stays out of traffic. The guard admits:
a pod already let in keeps its gate when the verdict changes later (a raised minCosine), so
that no fleet is emptied at once; the EmbeddingService's SpaceMatches condition says so. The
gate is reset when the server container restarted after it last turned True (its graphs died
with the process). `fetch_report` is the only I/O here (an HTTP
GET on the pod IP); the decisions are pure. Knows nothing about EmbeddingServices or the
Kubernetes API client.
"""

import asyncio
import dataclasses
import datetime
from typing import Any, Mapping

import aiohttp

from hedgerow.golden_set import DEFAULT_MAX_SCORE_DELTA
from hedgerow.operator import names
from hedgerow.warmup_report import (
    SpaceVerdict, WarmupReport, WarmupReportError, parse_report, space_verdict,
)

WARM = "GraphsCaptured"
WARMING = "Warming"
NOT_RUNNING = "ContainerNotRunning"
RESTARTED = "ContainerRestarted"
UNREACHABLE = "WarmupUnreachable"
ENGINE_FAILED = "EngineFailed"
SPACE_MISMATCH = "SpaceMismatch"
SPACE_UNCHECKED = "SpaceUnchecked"


class WarmupUnavailable(Exception):
    """The pod's /warmup could not be read or parsed; the message says why."""


async def fetch_report(session: aiohttp.ClientSession, ip: str, port: int,
                       timeout: float) -> WarmupReport:
    """GET http://IP:PORT/warmup within `timeout` seconds."""
    url = f"http://{ip}:{port}/warmup"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                raise WarmupUnavailable(f"{url} answered HTTP {response.status}")
            return parse_report(await response.read())
    except WarmupReportError as error:
        raise WarmupUnavailable(f"{url}: {error}") from None
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
    # With spec.guard: the pod's space judged against the golden set (None: no report yet).
    space: SpaceVerdict | None = None


def decide(pod: ServerPod, report: WarmupReport | None, error: str | None,
           min_cosine: float | None = None,
           max_score_delta: float = DEFAULT_MAX_SCORE_DELTA) -> GateDecision:
    """The gate a pod should carry, given its report (or the error reading it); with a
    guard, `min_cosine` is spec.guard.minCosine and `max_score_delta` its maxScoreDelta."""
    if not pod.running:
        return GateDecision("False", NOT_RUNNING, "server container is not running")
    if report is not None and report.failed:  # its liveness probe restarts the container
        return GateDecision("False", ENGINE_FAILED, report.describe())
    if report is not None:
        verdict = None
        if min_cosine is not None and report.loaded:
            verdict = space_verdict(report, min_cosine, max_score_delta)
            admitted = (pod.gate or {}).get("status") == "True" and not restarted_since_warm(pod)
            if verdict.matches is False and not admitted:
                return GateDecision("False", SPACE_MISMATCH, verdict.message, verdict)
            if verdict.matches is None and report.warm and not admitted:
                return GateDecision("False", SPACE_UNCHECKED, verdict.message, verdict)
        if report.warm:
            return GateDecision("True", WARM, report.describe(), verdict)
        return GateDecision("False", WARMING, report.describe(), verdict)
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
