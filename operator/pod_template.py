"""spec.<component>.podTemplate merged onto a Deployment the builders wrote, and the default
spread of its pods across nodes.

Pure. What may be given, and what is refused because it would collide with the builders'
fields, is operator/crd_pods.py's schema; so the merge here never has to choose between the
two: labels and annotations add to the operator's, `env` follows the operator's variables,
`envFrom` comes before the operator's ConfigMap (which wins on a name both hold), resources add
a CPU limit and ephemeral storage, and the pod-level fields are set as given. Knows nothing
about what the containers run.
"""

import copy
from typing import Any, Mapping

from hedgerow.operator import names
from hedgerow.operator.spec import Service

POD_FIELDS = ("imagePullSecrets", "serviceAccountName", "priorityClassName", "affinity")


def default_spread(service: Service, component: names.Component) -> list[dict]:
    """One pod per node before two on any (soft: pods still schedule on a single node)."""
    return [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
             "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": names.selector(service, component)}}]


def apply(service: Service, component: names.Component, deployment: dict) -> dict:
    """`deployment` (a server or gateway Deployment, changed in place and returned) with
    spec.<component>.podTemplate and the default spread."""
    given: Mapping[str, Any] = copy.deepcopy(service.spec[component].get("podTemplate") or {})
    template = deployment["spec"]["template"]
    metadata, pod = template["metadata"], template["spec"]
    container = pod["containers"][0]
    metadata["labels"] = {**given.get("labels", {}), **metadata["labels"]}
    metadata["annotations"] = {**given.get("annotations", {}), **metadata["annotations"]}
    pod.update({field: given[field] for field in POD_FIELDS if field in given})
    spread = given.get("topologySpreadConstraints", default_spread(service, component))
    if spread:
        pod["topologySpreadConstraints"] = spread
    container["env"] = container["env"] + given.get("env", [])
    container["envFrom"] = given.get("envFrom", []) + container["envFrom"]
    resources = given.get("resources", {})
    for kind in ("limits", "requests"):
        if resources.get(kind):
            container["resources"][kind] = {**container["resources"].get(kind, {}),
                                            **{k: str(v) for k, v in resources[kind].items()}}
    return deployment
