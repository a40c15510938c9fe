"""How many worker processes a gateway pod runs, and the memory they need.

Pure arithmetic on `spec.gateway`; no I/O. Left to itself `hedgerow gateway --workers 0` starts
one worker per core it may run on, which in a pod is every core of the node (the CPU request is
no affinity): 64 workers on a 64-core node, and an OOM kill. So the operator always writes
`--workers` (HEDGEROW_WORKERS): `spec.gateway.workers`, else whole cores of `spec.gateway.cpu`,
as build_server.cpu_threads does for a CPU server's threads. The memory request and limit
follow the worker count unless `spec.gateway.memory` is given. Knows nothing about manifests.
"""

import math
from typing import Any, Mapping

from hedgerow import settings
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.operator.quantities import quantity, quantity_number

WORKERS = settings.field_of(GatewaySettings, "workers")
# Measured with the packaged all-MiniLM-L6-v2 tokenizer (`hedgerow gateway --workers N`, idle,
# RSS per process on Linux): about 75 MB per worker and 40 MB for the parent that forks them
# (docs/operator.md, "Gateway pods"). Each worker gets headroom for the requests it holds
# (bodies, token ids, results); a larger tokenizer needs spec.gateway.memory.
BASE_MEMORY_MIB = 128
WORKER_MEMORY_MIB = 128


def workers(gateway: Mapping[str, Any]) -> int:
    """Worker processes of a gateway pod: spec.gateway.workers, else the CPU request rounded
    up to whole cores, at least 1 and at most the setting's own bound."""
    if gateway.get("workers"):
        return int(gateway["workers"])
    cores = quantity_number(gateway["cpu"])
    return max(1, min(math.ceil(cores), int(WORKERS.maximum)))


def memory(gateway: Mapping[str, Any]) -> str:
    """Memory request and limit of a gateway pod: spec.gateway.memory, else BASE_MEMORY_MIB
    plus WORKER_MEMORY_MIB per worker."""
    if gateway.get("memory") is not None:
        return quantity(gateway["memory"])
    return f"{BASE_MEMORY_MIB + WORKER_MEMORY_MIB * workers(gateway)}Mi"
