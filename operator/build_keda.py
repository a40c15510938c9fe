"""The KEDA ScaledObject that scales the servers when `spec.autoscaling.engine` is keda.

Pure; no I/O. The same decision as build_scaling.build_hpa, made by KEDA: its Prometheus
trigger sends the query prometheus-adapter would send for the HPA's metric
(token_signals.query: the same series, window and Service), with `threshold` the same
`targetTokensPerSecond` as an AverageValue target, so the HPA KEDA creates computes the same
ceil(total / target); the same min, max and behavior. KEDA's HPA is named like the
operator's (`<name>-server`), and the ScaledObject asks KEDA to take an existing HPA of that
name over (transfer-hpa-ownership: KEDA's admission webhook otherwise refuses a ScaledObject
for a Deployment an HPA already scales), so switching an autoscaled fleet from hpa to keda
keeps its replicas. The schema it must satisfy is KEDA's published CRD (tests/operator/keda/).
"""

from hedgerow.operator import names, token_signals
from hedgerow.operator.build_scaling import behavior
from hedgerow.operator.spec import Service

API_VERSION = "keda.sh/v1alpha1"
KIND = "ScaledObject"
TRANSFER_HPA = "scaledobject.keda.sh/transfer-hpa-ownership"
TRIGGER_NAME = "tokens"
# KEDA asks its scalers every pollingInterval only to activate from zero replicas, which the
# CRD never asks for (minReplicas >= 1); the HPA it creates syncs every 15 s as any HPA does.
POLLING_SECONDS = 15


def build_scaled_object(service: Service) -> dict:
    scaling = service.spec["autoscaling"]
    signal = token_signals.SIGNALS[scaling["signal"]]
    name = names.server_name(service)
    metadata = names.metadata(service, name, "server")
    metadata["annotations"] = {TRANSFER_HPA: "true"}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicaCount": scaling["minReplicas"],
            "maxReplicaCount": scaling["maxReplicas"],
            "pollingInterval": POLLING_SECONDS,
            "advanced": {"horizontalPodAutoscalerConfig": {"name": name,
                                                           "behavior": behavior(scaling)}},
            "triggers": [{
                "type": "prometheus",
                "name": TRIGGER_NAME,
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": scaling["prometheusAddress"],
                    "query": token_signals.query(signal, service.namespace, service.name),
                    "threshold": str(scaling["targetTokensPerSecond"]),
                },
            }],
        },
    }
