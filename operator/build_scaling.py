"""Manifests that bound how the fleet changes: PodDisruptionBudgets, the server HPA and the
gateway HPA.

Pure functions; no I/O.

Why the HPA reads an Object metric and not a per-pod average. A new server replica reports
almost no tokens while it loads weights and captures its hot CUDA graphs. With a Pods metric
(tokens/s averaged over pods) each warming replica pulls the average down, so the HPA sees
"less load per pod" exactly when it just scaled up and may scale back down before the new
replicas serve anything: the fleet oscillates. Instead the HPA reads one number attached to a
Service, the *total* token rate of its pods (operator/token_signals.py: the gateways' offered
tokens on the gateway Service by default, or the servers' served tokens on the server headless
Service), exposed by the chart's prometheus-adapter rules, with an `AverageValue` target of
`targetTokensPerSecond`. For an Object metric with an AverageValue target the HPA computes
desired = ceil(total / target): the replica count cancels out, so warming replicas neither add
nor subtract anything. Only the load decides.
"""

from typing import Any, Mapping

from hedgerow.operator import names, token_signals
from hedgerow.operator.spec import Service

SCALE_PERIOD_SECONDS = 60


def build_pdb(service: Service, component: names.Component) -> dict:
    if component == "server":
        name, max_unavailable = names.server_name(service), service.spec["server"]["maxUnavailable"]
    else:
        name, max_unavailable = names.gateway_name(service), 1
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": names.metadata(service, name, component),
        "spec": {
            "maxUnavailable": max_unavailable,
            "selector": {"matchLabels": names.selector(service, component)},
        },
    }


def _hpa(service: Service, name: str, component: str, scaling: dict, metric: dict) -> dict:
    """An autoscaling/v2 HPA scaling Deployment `name` between scaling's min and max."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": names.metadata(service, name, component),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": scaling["minReplicas"],
            "maxReplicas": scaling["maxReplicas"],
            "metrics": [metric],
        },
    }


def build_hpa(service: Service) -> dict:
    """autoscaling/v2 HPA scaling the server Deployment on a total token rate (engine hpa)."""
    scaling = service.spec["autoscaling"]
    signal = token_signals.SIGNALS[scaling["signal"]]
    hpa = _hpa(service, names.server_name(service), "server", scaling, {
        "type": "Object",
        "object": {
            "describedObject": {"apiVersion": "v1", "kind": "Service",
                                "name": signal.service_name(service.name)},
            "metric": {"name": scaling.get("metricName", signal.metric)},
            "target": {"type": "AverageValue",
                       "averageValue": str(scaling["targetTokensPerSecond"])},
        },
    })
    hpa["spec"]["behavior"] = behavior(scaling)
    return hpa


def build_gateway_hpa(service: Service) -> dict:
    """autoscaling/v2 HPA scaling the gateway Deployment on CPU (spec.gateway.autoscaling):
    gateways tokenize, so their CPU is their load; a Resource metric averages over pods,
    which suits gateways (a new one serves at once, unlike a warming server)."""
    scaling = service.spec["gateway"]["autoscaling"]
    return _hpa(service, names.gateway_name(service), "gateway", scaling, {
        "type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization",
            "averageUtilization": scaling["targetCPUUtilizationPercent"]}}})


def behavior(scaling: Mapping[str, Any]) -> dict:
    """The HPA's `behavior` for spec.autoscaling `scaling` (KEDA's ScaledObject passes the
    same to the HPA it creates)."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": scaling["scaleUpStabilizationSeconds"],
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": scaling["scaleUpPodsPerMinute"],
                          "periodSeconds": SCALE_PERIOD_SECONDS},
                         {"type": "Percent", "value": scaling["scaleUpPercentPerMinute"],
                          "periodSeconds": SCALE_PERIOD_SECONDS}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": scaling["scaleDownStabilizationSeconds"],
            "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": scaling["scaleDownPodsPerMinute"],
                          "periodSeconds": SCALE_PERIOD_SECONDS}],
        },
    }
