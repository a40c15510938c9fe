"""Manifests that bound how the fleet changes: PodDisruptionBudgets and the server HPA.

Pure functions; no I/O.

Why the HPA reads an Object metric and not a per-pod average. A new server replica reports
almost no tokens while it loads weights and captures its hot CUDA graphs. With a Pods metric
(tokens/s averaged over pods) each warming replica pulls the average down, so the HPA sees
"less load per pod" exactly when it just scaled up and may scale back down before the new
replicas serve anything: the fleet oscillates. Instead the HPA reads one number attached to the
server headless Service, the *total* token rate of all servers (`sum(rate(
hedgerow_tokens_total[1m]))`, exposed by the chart's prometheus-adapter rule), with an
`AverageValue` target of `targetTokensPerSecond`. For an Object metric with an AverageValue
target the HPA computes desired = ceil(total / target): the replica count cancels out, so
warming replicas neither add nor subtract anything. Only the work actually done decides.
"""

from hedgerow.operator import names
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


def build_hpa(service: Service) -> dict:
    """autoscaling/v2 HPA scaling the server Deployment on total token throughput."""
    scaling = service.spec["autoscaling"]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": names.metadata(service, names.server_name(service), "server"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                               "name": names.server_name(service)},
            "minReplicas": scaling["minReplicas"],
            "maxReplicas": scaling["maxReplicas"],
            "metrics": [{
                "type": "Object",
                "object": {
                    "describedObject": {"apiVersion": "v1", "kind": "Service",
                                        "name": names.server_name(service)},
                    "metric": {"name": scaling["metricName"]},
                    "target": {"type": "AverageValue",
                               "averageValue": str(scaling["targetTokensPerSecond"])},
                },
            }],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": scaling["scaleUpStabilizationSeconds"],
                    "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": scaling["scaleUpPodsPerMinute"],
                                  "periodSeconds": SCALE_PERIOD_SECONDS}],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": scaling["scaleDownStabilizationSeconds"],
                    "selectPolicy": "Min",
                    "policies": [{"type": "Pods", "value": scaling["scaleDownPodsPerMinute"],
                                  "periodSeconds": SCALE_PERIOD_SECONDS}],
                },
            },
        },
    }
