"""Manifests of the embedding servers: ConfigMap, Deployment and headless Service.

Pure functions from a defaulted `Service` to dicts; no I/O, no cluster. The Deployment carries
the GPU request, the readiness gate `hedgerow.dev/graphs-warm` (set by the operator's warmup
tracking), gRPC readiness and startup probes on 50051 (with `spec.tls`, GET /readyz on 9090:
the kubelet's gRPC probe speaks no TLS), a liveness probe on GET /livez (503 once the engine
failed: a sticky device error or a failed probe batch, so the kubelet restarts the container
within LIVENESS_PERIOD_SECONDS x LIVENESS_FAILURE_THRESHOLD), the TLS Secret and the --tls-*
flags, a preStop pause that lets gateways drop the pod from DNS before SIGTERM starts the drain,
a non-root, read-only container, and, with `spec.guard`, the golden set's ConfigMap mounted where `--golden-set` reads it (its digest an
annotation, so re-recording it rolls the servers, which check it at start). When an
HPA owns the replica count the Deployment leaves `replicas` out, so a server-side apply never
takes it back from the HPA (handlers.hand_replicas_to_hpa keeps the count when that starts).
"""

import math

from hedgerow import golden_set, settings
from hedgerow.operator import build_fetch, build_tls, knobs, names, pod_template
from hedgerow.operator.build_common import (
    config_map, container_security_context, pod_security_context, pod_template_metadata,
    quantity, quantity_number, scheduling, volumes_and_mounts,
)
from hedgerow.operator.spec import Service

# Seconds past the drain and the server's own shutdown grace before the kubelet kills the pod.
KILL_MARGIN_SECONDS = 10
STARTUP_PERIOD_SECONDS = 10
# Liveness: GET /livez every 10 s, restarted after 3 answers in a row that are 503 or later than
# 5 s (30 s after an engine failed). It runs only once the startup probe has passed, so a
# model that loads slowly is never restarted for it.
LIVENESS_PATH = "/livez"
LIVENESS_PERIOD_SECONDS = 10
LIVENESS_TIMEOUT_SECONDS = 5
LIVENESS_FAILURE_THRESHOLD = 3
GOLDEN_SET_VOLUME = "golden-set"
GOLDEN_SET_DIR = "/etc/hedgerow/golden-set"
GOLDEN_SET_PATH = f"{GOLDEN_SET_DIR}/{golden_set.CONFIG_MAP_KEY}"
COMPILE_CACHE_VOLUME = "compile-cache"
COMPILE_CACHE_DIR = "/var/cache/hedgerow/compile"


def server_env(service: Service) -> dict[str, str]:
    """HEDGEROW_* settings of `hedgerow server`: where it listens and what it serves, then
    every setting the spec exposes (knobs.py, generated from the server's settings)."""
    server = service.spec["server"]
    env = {
        settings.env_name("model"): build_fetch.model_path(service),
        settings.env_name("host"): "0.0.0.0",
        settings.env_name("port"): str(names.SERVER_GRPC_PORT),
        settings.env_name("http_port"): str(names.SERVER_HTTP_PORT),
        settings.env_name("device"): "cuda" if server["gpus"] > 0 else "cpu",
        **knobs.env(knobs.SERVER, server),
    }
    if "guard" in service.spec:
        env[settings.env_name("golden_set")] = GOLDEN_SET_PATH
    if "compileCache" in server:
        env[settings.env_name("compile_cache")] = COMPILE_CACHE_DIR
    if server["gpus"] == 0:
        env[settings.env_name("cpu_threads")] = str(cpu_threads(server["cpu"]))
    return env


def cpu_threads(cpu: object) -> int:
    """Torch threads for a CPU server given its CPU request (a quantity the schema accepted:
    "4", "500m", 0.5, "1e3"): whole cores minus one for the event loop, at least 1. Left to
    itself the server counts the node's cores, which a pod sharing the node does not have
    (more threads than cores spin: 6 ms became 400 ms)."""
    cores = quantity_number(cpu)
    return max(1, min(math.ceil(cores) - 1, 4096))


def build_server_config(service: Service) -> dict:
    return config_map(service, names.server_name(service), "server", server_env(service))


def _resources(server: dict) -> dict:
    requests = {"cpu": quantity(server["cpu"]), "memory": quantity(server["memory"])}
    limits = {"memory": quantity(server["memory"])}
    if server["gpus"] > 0:
        requests[server["gpuResource"]] = str(server["gpus"])
        limits[server["gpuResource"]] = str(server["gpus"])
    return {"requests": requests, "limits": limits}


def _probes(service: Service) -> dict:
    """Startup and readiness: gRPC health on 50051; with spec.tls, which the kubelet's gRPC
    probe cannot speak, GET /readyz on the plaintext HTTP port (the same SERVING state)."""
    server = service.spec["server"]
    check = {"httpGet": {"path": "/readyz", "port": names.SERVER_HTTP_PORT}} \
        if build_tls.enabled(service) else {"grpc": {"port": names.SERVER_GRPC_PORT}}
    return {
        "startupProbe": {
            **check,
            "periodSeconds": STARTUP_PERIOD_SECONDS,
            "failureThreshold": math.ceil(server["startupSeconds"] / STARTUP_PERIOD_SECONDS),
        },
        "readinessProbe": {**check, "periodSeconds": 5, "failureThreshold": 2},
    }


def _container(service: Service, mounts: list[dict]) -> dict:
    server = service.spec["server"]
    container = {
        "name": names.SERVER_CONTAINER,
        "image": server["image"],
        "imagePullPolicy": server["imagePullPolicy"],
        "command": ["hedgerow"],
        "args": ["server", *build_tls.args(service, "server")],
        "envFrom": [{"configMapRef": {"name": names.server_name(service)}}],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [
            {"name": "grpc", "containerPort": names.SERVER_GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": names.SERVER_HTTP_PORT, "protocol": "TCP"},
        ],
        "resources": _resources(server),
        **_probes(service),
        "livenessProbe": {
            "httpGet": {"path": LIVENESS_PATH, "port": names.SERVER_HTTP_PORT},
            "periodSeconds": LIVENESS_PERIOD_SECONDS,
            "timeoutSeconds": LIVENESS_TIMEOUT_SECONDS,
            "failureThreshold": LIVENESS_FAILURE_THRESHOLD,
        },
        "securityContext": container_security_context(),
        "volumeMounts": mounts + [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if server["drainSeconds"] > 0:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": server["drainSeconds"]}}}
    return container


def _compile_cache_volume(cache: dict) -> dict:
    """spec.server.compileCache as a writable volume (a PVC, or a directory on the node)."""
    if "persistentVolumeClaim" in cache:
        return {"name": COMPILE_CACHE_VOLUME,
                "persistentVolumeClaim": {"claimName": cache["persistentVolumeClaim"]["claimName"]}}
    return {"name": COMPILE_CACHE_VOLUME,
            "hostPath": {"path": cache["hostPath"]["path"], "type": "DirectoryOrCreate"}}


def build_server_deployment(service: Service, config: dict,
                            golden_set_digest: str | None = None,
                            tls_digest: str | None = None) -> dict:
    """The server Deployment; `config` is build_server_config's ConfigMap (hashed into the
    pod template so a settings change rolls the pods); `golden_set_digest` is the golden
    set's content digest (with `spec.guard`), `tls_digest` the TLS Secret's (with
    `spec.tls`), annotations for the same reason."""
    server = service.spec["server"]
    volumes, mounts = volumes_and_mounts(service)
    volumes += build_fetch.volumes(service)  # spec.model.huggingFace: the fetched model
    mounts += build_fetch.mounts(service)
    volumes += build_tls.volumes(service)  # spec.tls: the certificates
    mounts += build_tls.mounts(service)
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}})
    annotations = build_tls.annotations(tls_digest)
    guard = service.spec.get("guard")
    if guard is not None:
        volumes.append({"name": GOLDEN_SET_VOLUME, "configMap": {
            "name": guard["configMap"],
            "items": [{"key": guard["key"], "path": golden_set.CONFIG_MAP_KEY}]}})
        mounts.append({"name": GOLDEN_SET_VOLUME, "mountPath": GOLDEN_SET_DIR,
                       "readOnly": True})
        if golden_set_digest:
            annotations[names.GOLDEN_SET_HASH_ANNOTATION] = golden_set_digest
    cache = server.get("compileCache")
    if cache is not None:
        volumes.append(_compile_cache_volume(cache))
        mount = {"name": COMPILE_CACHE_VOLUME, "mountPath": COMPILE_CACHE_DIR}
        if cache.get("persistentVolumeClaim", {}).get("subPath"):
            mount["subPath"] = cache["persistentVolumeClaim"]["subPath"]
        mounts.append(mount)
    pod_spec = {
        "securityContext": pod_security_context(),
        "terminationGracePeriodSeconds": server["drainSeconds"] + KILL_MARGIN_SECONDS
            + math.ceil(server["shutdownGraceSeconds"]),
        **build_fetch.init_containers(service, "server"),
        "containers": [_container(service, mounts)],
        "volumes": volumes,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # no API calls from these pods
        **scheduling(server),
    }
    if service.spec["warmup"]["readinessGate"]:
        pod_spec["readinessGates"] = [{"conditionType": names.GATE_CONDITION}]
    if server.get("priorityClassName"):
        pod_spec["priorityClassName"] = server["priorityClassName"]
    spec = {
        "selector": {"matchLabels": names.selector(service, "server")},
        "strategy": {"type": "RollingUpdate",
                     "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {
            "metadata": pod_template_metadata(service, "server", config,
                                              names.SERVER_HTTP_PORT, annotations),
            "spec": pod_spec,
        },
    }
    if not service.autoscaled:
        spec = {"replicas": server["replicas"], **spec}
    return pod_template.apply(service, "server", {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": names.metadata(service, names.server_name(service), "server"),
        "spec": spec,
    })


def build_server_service(service: Service) -> dict:
    """Headless Service: its DNS lists the ready (so warm) server pods to the gateways, and it
    is the object the token-rate metric is attached to for the HPA."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": names.metadata(service, names.server_name(service), "server"),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": names.selector(service, "server"),
            "ports": [
                {"name": "grpc", "port": names.SERVER_GRPC_PORT, "targetPort": "grpc",
                 "protocol": "TCP", "appProtocol": "grpc"},
                {"name": "metrics", "port": names.SERVER_HTTP_PORT, "targetPort": "metrics",
                 "protocol": "TCP"},
            ],
        },
    }
