"""Manifests of the HTTP gateways: ConfigMap, Deployment and the Service clients call.

Pure functions from a checked `Service` to dicts; no I/O. Gateways find servers through the
server headless Service's DNS (only ready, so warm, pods are listed) and read the tokenizer from
the same model path as the servers (the model volume is mounted read-only here too).
"""

from hedgerow.operator import names
from hedgerow.operator.build_common import (
    config_map, container_security_context, pod_security_context, pod_template_metadata,
    quantity, scheduling, volumes_and_mounts,
)
from hedgerow.operator.spec import Service

API_KEYS_VOLUME = "api-keys"
API_KEYS_DIR = "/etc/hedgerow/api-keys"
DRAIN_SECONDS = 5


def gateway_env(service: Service) -> dict[str, str]:
    """HEDGEROW_* settings of `hedgerow gateway` (see gateway/settings.py)."""
    gateway, model = service.spec["gateway"], service.spec["model"]
    env = {
        "HEDGEROW_HOST": "0.0.0.0",
        "HEDGEROW_PORT": str(names.GATEWAY_HTTP_PORT),
        "HEDGEROW_SERVICE_DNS":
            f"{names.server_name(service)}.{service.namespace}.svc:{names.SERVER_GRPC_PORT}",
        "HEDGEROW_MODEL": model["path"],
        "HEDGEROW_SERVED_MODEL_NAME": model.get("servedName") or service.name,
        "HEDGEROW_CHUNK_TOKENS": str(gateway["chunkTokens"]),
        "HEDGEROW_MAX_INPUTS": str(gateway["maxInputs"]),
        "HEDGEROW_MAX_REQUEST_TOKENS": str(gateway["maxRequestTokens"]),
        "HEDGEROW_TRUNCATE": "true" if gateway["truncate"] else "false",
    }
    templates = gateway.get("templates") or {}
    if "query" in templates:
        env["HEDGEROW_QUERY_TEMPLATE"] = templates["query"]
    if "document" in templates:
        env["HEDGEROW_DOCUMENT_TEMPLATE"] = templates["document"]
    if "apiKeySecret" in gateway:
        env["HEDGEROW_API_KEYS_FILE"] = f"{API_KEYS_DIR}/{gateway['apiKeySecret']['key']}"
    return env


def build_gateway_config(service: Service) -> dict:
    return config_map(service, names.gateway_name(service), "gateway", gateway_env(service))


def build_gateway_deployment(service: Service, config: dict) -> dict:
    gateway = service.spec["gateway"]
    volumes, mounts = volumes_and_mounts(service)
    if "apiKeySecret" in gateway:
        volumes.append({"name": API_KEYS_VOLUME,
                        "secret": {"secretName": gateway["apiKeySecret"]["name"],
                                   "defaultMode": 0o440}})
        mounts.append({"name": API_KEYS_VOLUME, "mountPath": API_KEYS_DIR, "readOnly": True})
    container = {
        "name": names.GATEWAY_CONTAINER,
        "image": gateway["image"],
        "imagePullPolicy": gateway["imagePullPolicy"],
        "command": ["hedgerow"],
        "args": ["gateway"],
        "envFrom": [{"configMapRef": {"name": names.gateway_name(service)}}],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": "http", "containerPort": names.GATEWAY_HTTP_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": quantity(gateway["cpu"]), "memory": quantity(gateway["memory"])},
            "limits": {"memory": quantity(gateway["memory"])},
        },
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                           "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                          "periodSeconds": 10, "failureThreshold": 3},
        "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}},
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": names.metadata(service, names.gateway_name(service), "gateway"),
        "spec": {
            "replicas": gateway["replicas"],
            "selector": {"matchLabels": names.selector(service, "gateway")},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": pod_template_metadata(service, "gateway", config,
                                                  names.GATEWAY_HTTP_PORT),
                "spec": {
                    "securityContext": pod_security_context(),
                    "terminationGracePeriodSeconds": DRAIN_SECONDS + 60,
                    "containers": [container],
                    "volumes": volumes,
                    "enableServiceLinks": False,
                    **scheduling(gateway),
                },
            },
        },
    }


def build_gateway_service(service: Service) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": names.metadata(service, names.gateway_service_name(service), "gateway"),
        "spec": {
            "type": service.spec["gateway"]["serviceType"],
            "selector": names.selector(service, "gateway"),
            "ports": [{"name": "http", "port": names.GATEWAY_HTTP_PORT, "targetPort": "http",
                       "protocol": "TCP", "appProtocol": "http"}],
        },
    }
