"""Running several replicas of the operator: kopf peering.

Replicas given the same `--peering` name share one kopf peering object; each writes its
identity, priority and lifetime there and renews it. kopf pauses every replica that sees a live
peer of higher priority (and, by design, all of them on a tie), so exactly one acts. Here the
priority is the start time, earlier first: a replica that starts while another runs stands by,
and the standby takes over when the active one stops (kopf removes its record on a clean stop)
or its record expires (`--peering-lifetime` after its last renewal, when it was killed). Knows
nothing about EmbeddingServices.
"""

import time
from typing import Any


def priority(started_ns: int | None = None) -> int:
    """A replica's kopf priority: the earlier it started, the higher (milliseconds, so two
    replicas tie only when they start within the same millisecond)."""
    return -((time.time_ns() if started_ns is None else started_ns) // 1_000_000)


def options(name: str) -> dict[str, Any]:
    """kopf.operator's peering arguments for `--peering NAME` (empty: standalone)."""
    if not name:
        return {"standalone": True}
    return {"standalone": False, "peering_name": name, "priority": priority()}
