"""Manifests of the HTTP gateways: ConfigMap, Deployment and the Service clients call.

Pure functions from a defaulted `Service` to dicts; no I/O. Gateways find servers through the
server headless Service's DNS (only ready, so warm, pods are listed) and read the tokenizer from
the same model path as the servers (the model volume is mounted read-only here too; a model
from spec.model.huggingFace is fetched without its weights by the gateway's own init
container, build_fetch.py). With spec.tls they dial the servers over mutual TLS
(build_tls.py).
"""

from hedgerow import settings
from hedgerow.operator import build_fetch, build_tls, gateway_sizing, knobs, names, pod_template
from hedgerow.operator.build_common import (
    config_map, container_security_context, pod_security_context, pod_template_metadata,
    quantity, scheduling, volumes_and_mounts,
)
from hedgerow.operator.spec import Service

API_KEYS_VOLUME = "api-keys"
API_KEYS_DIR = "/etc/hedgerow/api-keys"
DRAIN_SECONDS = 5


def gateway_env(service: Service) -> dict[str, str]:
    """HEDGEROW_* settings of `hedgerow gateway`: where it listens, where the servers are,
    what it serves, then every setting the spec exposes (knobs.py, generated from the
    gateway's settings)."""
    gateway, model = service.spec["gateway"], service.spec["model"]
    env = {
        settings.env_name("host"): "0.0.0.0",
        settings.env_name("port"): str(names.GATEWAY_HTTP_PORT),
        settings.env_name("service_dns"):
            f"{names.server_name(service)}.{service.namespace}.svc:{names.SERVER_GRPC_PORT}",
        settings.env_name("model"): build_fetch.model_path(service),
        settings.env_name("served_model_name"): model.get("servedName") or service.name,
        settings.env_name("workers"): str(gateway_sizing.workers(gateway)),
        **knobs.env(knobs.GATEWAY, gateway),
    }
    if "apiKeySecret" in gateway:
        env[settings.env_name("api_keys_file")] = \
            f"{API_KEYS_DIR}/{gateway['apiKeySecret']['key']}"
    return env


def build_gateway_config(service: Service) -> dict:
    return config_map(service, names.gateway_name(service), "gateway", gateway_env(service))


def build_gateway_deployment(service: Service, config: dict,
                             api_keys_digest: str | None = None,
                             tls_digest: str | None = None) -> dict:
    """The gateway Deployment; `config` is build_gateway_config's ConfigMap, `api_keys_digest`
    the API-key Secret's digest (api_keys.py) and `tls_digest` the TLS Secret's (with
    `spec.tls`), all hashed into the pod template so a settings change, a rotated key or a
    rotated certificate rolls the pods."""
    gateway = service.spec["gateway"]
    memory = gateway_sizing.memory(gateway)
    volumes, mounts = volumes_and_mounts(service)
    volumes += build_fetch.volumes(service)  # spec.model.huggingFace: the fetched model
    mounts += build_fetch.mounts(service)
    volumes += build_tls.volumes(service)  # spec.tls: the certificates
    mounts += build_tls.mounts(service)
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
        "args": ["gateway", *build_tls.args(service, "gateway")],
        "envFrom": [{"configMapRef": {"name": names.gateway_name(service)}}],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": "http", "containerPort": names.GATEWAY_HTTP_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": quantity(gateway["cpu"]), "memory": memory},
            "limits": {"memory": memory},
        },
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                           "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                          "periodSeconds": 10, "failureThreshold": 3},
        "lifecycle": {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}},
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
    }
    return pod_template.apply(service, "gateway", {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": names.metadata(service, names.gateway_name(service), "gateway"),
        "spec": {
            **({} if service.gateways_autoscaled else {"replicas": gateway["replicas"]}),
            "selector": {"matchLabels": names.selector(service, "gateway")},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": pod_template_metadata(
                    service, "gateway", config, names.GATEWAY_HTTP_PORT,
                    {**({names.API_KEYS_HASH_ANNOTATION: api_keys_digest} if api_keys_digest
                        else {}), **build_tls.annotations(tls_digest)}),
                "spec": {
                    "securityContext": pod_security_context(),
                    "terminationGracePeriodSeconds": DRAIN_SECONDS + 60,
                    **build_fetch.init_containers(service, "gateway"),
                    "containers": [container],
                    "volumes": volumes,
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,  # no API calls from these pods
                    **scheduling(gateway),
                },
            },
        },
    })


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
