"""Pieces every pod the operator builds shares: ConfigMaps of HEDGEROW_* settings, the config
hash that rolls pods when settings change, the non-root security context, the model volume.

Pure functions of a `Service`; no I/O. Knows nothing about which component uses them.
"""

import hashlib
import json

from hedgerow.operator import names
from hedgerow.operator.quantities import quantity, quantity_number  # noqa: F401 (re-exported)
from hedgerow.operator.spec import Service

MODEL_VOLUME = "model"
TMP_VOLUME = "tmp"


def config_map(service: Service, name: str, component: names.Component,
               env: dict[str, str]) -> dict:
    """A ConfigMap whose keys are HEDGEROW_* variables, read by the pod with envFrom."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(service, name, component),
        "data": dict(sorted(env.items())),
    }


def config_hash(config: dict) -> str:
    """Short digest of a ConfigMap's data; a pod-template annotation, so a settings change
    rolls the pods (envFrom is read only when a container starts)."""
    text = json.dumps(config["data"], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pod_template_metadata(service: Service, component: names.Component, config: dict,
                          metrics_port: int, extra: dict[str, str] | None = None) -> dict:
    """A pod template's labels and annotations: the ConfigMap `config`'s hash (so a settings
    change rolls the pods), where Prometheus scrapes /metrics, and `extra` annotations."""
    return {
        "labels": names.labels(service, component),
        "annotations": {
            names.CONFIG_HASH_ANNOTATION: config_hash(config),
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(metrics_port),
            "prometheus.io/path": "/metrics",
            **(extra or {}),
        },
    }


def pod_security_context() -> dict:
    return {
        "runAsNonRoot": True,
        "runAsUser": names.RUN_AS_USER,
        "runAsGroup": names.RUN_AS_USER,
        "fsGroup": names.RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def model_volume(service: Service) -> dict | None:
    """The read-only model volume, or None when the model is baked into the images."""
    model = service.spec["model"]
    if "persistentVolumeClaim" in model:
        claim = model["persistentVolumeClaim"]
        return {"name": MODEL_VOLUME,
                "persistentVolumeClaim": {"claimName": claim["claimName"], "readOnly": True}}
    if "hostPath" in model:
        return {"name": MODEL_VOLUME,
                "hostPath": {"path": model["hostPath"]["path"], "type": "Directory"}}
    return None


def model_mount(service: Service) -> dict | None:
    model = service.spec["model"]
    if model_volume(service) is None:
        return None
    mount = {"name": MODEL_VOLUME, "mountPath": model["mountPath"], "readOnly": True}
    sub_path = model.get("persistentVolumeClaim", {}).get("subPath")
    if sub_path:
        mount["subPath"] = sub_path
    return mount


def volumes_and_mounts(service: Service) -> tuple[list[dict], list[dict]]:
    """The model volume (if any) and a writable /tmp (the root filesystem is read-only)."""
    volumes = [{"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "1Gi"}}]
    mounts = [{"name": TMP_VOLUME, "mountPath": "/tmp"}]
    volume, mount = model_volume(service), model_mount(service)
    if volume is not None and mount is not None:
        volumes.insert(0, volume)
        mounts.insert(0, mount)
    return volumes, mounts


def tolerations(items: list[dict]) -> list[dict]:
    """Tolerations as the core API spells them (Exists carries no value)."""
    out = []
    for item in items:
        toleration = {k: v for k, v in item.items() if v not in (None, "")}
        if toleration.get("operator") == "Exists":
            toleration.pop("value", None)
        out.append(toleration)
    return out


def scheduling(component_spec: dict) -> dict:
    """nodeSelector and tolerations of a pod spec, omitted when empty."""
    out: dict = {}
    if component_spec.get("nodeSelector"):
        out["nodeSelector"] = dict(component_spec["nodeSelector"])
    if component_spec.get("tolerations"):
        out["tolerations"] = tolerations(component_spec["tolerations"])
    return out
