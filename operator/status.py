"""Status of an EmbeddingService: condition names, reasons, and how they are computed.

Owns the vocabulary of `.status` (the condition types Ready, Progressing, GraphsWarm and, with
a guard, SpaceMatches, their reasons, the counts) and the pure functions that turn what was
observed into that status,
keeping `lastTransitionTime` when a condition's status does not change and listing the
transitions the handlers announce as events. Knows nothing about the Kubernetes API.
"""

import dataclasses
import datetime
from typing import Any, Iterable, Mapping, Sequence

from hedgerow.golden_set import DEFAULT_MAX_SCORE_DELTA
from hedgerow.warmup_report import SpaceVerdict

READY = "Ready"
PROGRESSING = "Progressing"
GRAPHS_WARM = "GraphsWarm"
SPACE_MATCHES = "SpaceMatches"

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"

# Reasons (one CamelCase word each).
AVAILABLE = "Available"
NO_READY_SERVERS = "NoReadyServers"
NO_READY_GATEWAYS = "NoReadyGateways"
ROLLING_OUT = "RollingOut"
WARMING = "Warming"
COMPLETE = "Complete"
ALL_WARM = "AllWarm"
NO_SERVERS = "NoServers"
SPEC_NOT_APPLIED = "SpecNotApplied"
GOLDEN_SET_MATCHES = "GoldenSetMatches"
SPACE_MISMATCH = "SpaceMismatch"
NOT_CHECKED = "NotChecked"
MAX_MESSAGE = 1024


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: str, reason: str, message: str,
              generation: int | None) -> dict:
    out = {"type": kind, "status": status, "reason": reason, "message": message}
    if generation is not None:
        out["observedGeneration"] = generation
    return out


@dataclasses.dataclass(frozen=True)
class Observed:
    """What the operator saw of one EmbeddingService's children and pods."""

    desired_servers: int
    servers: int  # server pods that exist
    ready_servers: int
    updated_servers: int
    warm_servers: int
    desired_gateways: int
    ready_gateways: int


def observed_from(deployment_server: Mapping[str, Any] | None,
                  deployment_gateway: Mapping[str, Any] | None,
                  desired_servers: int, desired_gateways: int, warm: int) -> Observed:
    """Counts from the two Deployments' `.status` (absent Deployments count as empty)."""
    server_status = (deployment_server or {}).get("status") or {}
    gateway_status = (deployment_gateway or {}).get("status") or {}
    return Observed(
        desired_servers=desired_servers,
        servers=int(server_status.get("replicas", 0)),
        ready_servers=int(server_status.get("readyReplicas", 0)),
        updated_servers=int(server_status.get("updatedReplicas", 0)),
        warm_servers=warm,
        desired_gateways=desired_gateways,
        ready_gateways=int(gateway_status.get("readyReplicas", 0)),
    )


def healthy_conditions(seen: Observed, generation: int | None) -> list[dict]:
    """Ready, Progressing and GraphsWarm for a valid, applied spec."""
    counts = (f"{seen.ready_servers}/{seen.desired_servers} servers ready, "
              f"{seen.warm_servers}/{seen.desired_servers} warm, "
              f"{seen.ready_gateways}/{seen.desired_gateways} gateways ready")
    if seen.ready_servers < 1:
        ready = condition(READY, FALSE, NO_READY_SERVERS, counts, generation)
    elif seen.ready_gateways < 1:
        ready = condition(READY, FALSE, NO_READY_GATEWAYS, counts, generation)
    else:
        ready = condition(READY, TRUE, AVAILABLE, counts, generation)

    if seen.updated_servers < seen.desired_servers or seen.servers > seen.desired_servers \
            or seen.ready_gateways < seen.desired_gateways:
        progressing = condition(PROGRESSING, TRUE, ROLLING_OUT, counts, generation)
    elif seen.warm_servers < seen.desired_servers:
        progressing = condition(PROGRESSING, TRUE, WARMING, counts, generation)
    else:
        progressing = condition(PROGRESSING, FALSE, COMPLETE, counts, generation)

    warm_message = f"{seen.warm_servers}/{seen.desired_servers} server replicas warm"
    if seen.desired_servers == 0:
        warm = condition(GRAPHS_WARM, FALSE, NO_SERVERS, "no server replicas wanted",
                         generation)
    elif seen.warm_servers >= seen.desired_servers:
        warm = condition(GRAPHS_WARM, TRUE, ALL_WARM, warm_message, generation)
    else:
        warm = condition(GRAPHS_WARM, FALSE, WARMING, warm_message, generation)
    return [ready, progressing, warm]


@dataclasses.dataclass(frozen=True)
class PodSpace:
    """One server pod's space as the guard judged it."""

    pod: str
    in_traffic: bool  # its readiness gate is open
    verdict: SpaceVerdict | None  # None: no report yet


def space_condition(pods: Sequence[PodSpace], config_map: str, minimum: float,
                    generation: int | None,
                    max_score_delta: float = DEFAULT_MAX_SCORE_DELTA) -> dict:
    """SpaceMatches: False naming every pod whose space does not match the golden set (and
    the smallest cosine measured), True when every pod that reported matches, else Unknown."""
    checked = [p for p in pods if p.verdict is not None and p.verdict.matches is not None]
    failing = [p for p in checked if not p.verdict.matches]
    golden = f"golden set {config_map!r}"
    if failing:
        parts = [f"{len(failing)} of {len(pods)} server pods do not match {golden}"]
        for p in failing:
            kept = " (admitted before; still in traffic)" if p.in_traffic else \
                " (kept out of traffic)"
            parts.append(f"pod {p.pod}{kept}: {p.verdict.message}")
        message = "; ".join(parts)
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE - 3] + "..."
        return condition(SPACE_MATCHES, FALSE, SPACE_MISMATCH, message, generation)
    if checked:
        cosines = [p.verdict.min_cosine for p in checked if p.verdict.min_cosine is not None]
        deltas = [p.verdict.max_score_delta for p in checked
                  if p.verdict.max_score_delta is not None]
        measured = (f"smallest cosine {min(cosines):.6f} (minimum {minimum})" if cosines
                    else f"largest score difference {max(deltas):.6f} (maximum "
                         f"{max_score_delta}), every query's order kept" if deltas
                    else "the same fingerprint")
        return condition(SPACE_MATCHES, TRUE, GOLDEN_SET_MATCHES,
                         f"{len(checked)}/{len(pods)} server pods match {golden}: {measured}",
                         generation)
    return condition(SPACE_MATCHES, UNKNOWN, NOT_CHECKED,
                     f"no server pod has reported a check against {golden} yet", generation)


def invalid_conditions(reason: str, message: str, generation: int | None) -> list[dict]:
    """The spec cannot be reconciled: not ready, not progressing, warmth unknown."""
    return [
        condition(READY, FALSE, reason, message, generation),
        condition(PROGRESSING, FALSE, SPEC_NOT_APPLIED, message, generation),
        condition(GRAPHS_WARM, UNKNOWN, SPEC_NOT_APPLIED, message, generation),
    ]


def spec_not_applied(conditions: Iterable[Mapping[str, Any]] | None) -> bool:
    """Whether `conditions` say the last reconcile refused the spec (invalid_conditions)."""
    return any(c.get("type") == PROGRESSING and c.get("reason") == SPEC_NOT_APPLIED
               for c in conditions or ())


def merge(old: Iterable[Mapping[str, Any]] | None, new: list[dict], at: str) -> list[dict]:
    """New conditions, each keeping its old lastTransitionTime when its status is unchanged."""
    previous = {c.get("type"): c for c in old or ()}
    out = []
    for cond in new:
        before = previous.get(cond["type"])
        stamp = at
        if before is not None and before.get("status") == cond["status"]:
            stamp = before.get("lastTransitionTime") or at
        out.append({**cond, "lastTransitionTime": stamp})
    return out


def transitions(old: Iterable[Mapping[str, Any]] | None,
                new: list[dict]) -> list[dict]:
    """Conditions of `new` whose status or reason differs from `old` (events announce them)."""
    previous = {c.get("type"): c for c in old or ()}
    changed = []
    for cond in new:
        before = previous.get(cond["type"], {})
        if before.get("status") != cond["status"] or before.get("reason") != cond["reason"]:
            changed.append(cond)
    return changed


def status_fields(service_model: str, seen: Observed | None,
                  generation: int | None, url: str | None = None,
                  selector: str | None = None) -> dict:
    """status fields besides the conditions; `url` is where clients reach the gateways and
    `selector` the server pods' label selector (the scale subresource's), once applied."""
    out: dict[str, Any] = {"model": service_model}
    out.update({k: v for k, v in (("url", url), ("selector", selector)) if v is not None})
    if generation is not None:
        out["observedGeneration"] = generation
    if seen is not None:
        out.update(replicas=seen.servers, readyReplicas=seen.ready_servers,
                   warmReplicas=seen.warm_servers, gatewayReadyReplicas=seen.ready_gateways)
    return out
