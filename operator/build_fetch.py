"""`spec.model.huggingFace` in a pod: the init container that fetches the model, its volumes,
and where the containers then find the model.

The init container runs `hedgerow fetch-model` from the server image (gateway pods too: the
gateway image has no huggingface_hub) with its settings as HEDGEROW_* variables
(hedgerow/fetch_settings.py), the token from the Secret as HF_TOKEN and the hub as
HF_ENDPOINT. It fetches into the cache volume (the PVC `cache.claimName`, shared by every pod,
or an emptyDir of `cache.sizeLimit` per pod, whose limit it is told so a model too large is
refused before the download rather than evicted during it) and points a symbolic link in a
small per-pod volume at the model directory of the commit it fetched: the server's and the
gateway's --model is that link, and both mount the cache read-only. Its outcome (the commit,
or the error) goes to the termination message, where model_fetch_status.py reads it. Pure
functions of a `Service`; no I/O.
"""

from hedgerow import settings
from hedgerow.operator import gateway_sizing, names
from hedgerow.operator.build_common import (
    TMP_VOLUME, container_security_context, quantity, quantity_number,
)
from hedgerow.operator.spec import Service

FETCH_CONTAINER = "fetch-model"
CACHE_VOLUME = "model-cache"
LINK_VOLUME = "model-link"
CACHE_DIR = "/var/cache/hedgerow/models"
LINK_DIR = "/var/run/hedgerow/model"
MODEL_LINK = f"{LINK_DIR}/current"
TERMINATION_LOG = "/dev/termination-log"
# What huggingface_hub (and its Xet transfer) need under a read-only root: a writable home
# on the pod's /tmp, no chunk cache (a one-off download would only fill /tmp), no telemetry.
HUB_ENV = {"HOME": "/tmp", "HF_HOME": "/tmp/huggingface", "HF_XET_CHUNK_CACHE_SIZE_BYTES": "0",
           "HF_HUB_DISABLE_TELEMETRY": "1"}


def hugging_face(service: Service) -> dict | None:
    return service.spec["model"].get("huggingFace")


def model_path(service: Service) -> str:
    """The model directory the server and gateway read (their HEDGEROW_MODEL)."""
    return MODEL_LINK if hugging_face(service) else service.spec["model"]["path"]


def claims(service: Service) -> list[tuple[str, str]]:
    """(claim name, the field naming it) of the cache PVC, which must exist."""
    cache = (hugging_face(service) or {}).get("cache", {})
    if "claimName" in cache:
        return [(cache["claimName"], "spec.model.huggingFace.cache.claimName")]
    return []


def volumes(service: Service) -> list[dict]:
    hub = hugging_face(service)
    if hub is None:
        return []
    cache = hub["cache"]
    source = ({"persistentVolumeClaim": {"claimName": cache["claimName"]}}
              if "claimName" in cache else
              {"emptyDir": {"sizeLimit": quantity(cache["sizeLimit"])}})
    return [{"name": CACHE_VOLUME, **source},
            {"name": LINK_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]


def _mounts(service: Service, read_only: bool) -> list[dict]:
    hub = hugging_face(service)
    if hub is None:
        return []
    cache = {"name": CACHE_VOLUME, "mountPath": CACHE_DIR, "readOnly": read_only}
    if hub["cache"].get("subPath"):
        cache["subPath"] = hub["cache"]["subPath"]
    return [cache, {"name": LINK_VOLUME, "mountPath": LINK_DIR, "readOnly": read_only}]


def mounts(service: Service) -> list[dict]:
    """The cache and the link, read-only: what the server or gateway container mounts."""
    return _mounts(service, read_only=True)


def fetch_env(service: Service, component: names.Component) -> dict[str, str]:
    """HEDGEROW_* settings of `hedgerow fetch-model` for one component's pods."""
    hub = hugging_face(service)
    value = {
        "repo": hub["id"], "revision": hub["revision"], "cache": CACHE_DIR,
        "link": MODEL_LINK, "skip_weights": component == "gateway",
        "allow_moving_revision": hub["allowMovingRevision"],
        "message_file": TERMINATION_LOG,
        "log_format": service.spec[component]["logFormat"],
    }
    if "allowPatterns" in hub:
        value["allow_patterns"] = tuple(hub["allowPatterns"])
    if "claimName" not in hub["cache"]:
        value["max_bytes"] = int(quantity_number(hub["cache"]["sizeLimit"]))
    return {settings.env_name(name): settings.env_value(v) for name, v in value.items()}


def init_containers(service: Service, component: names.Component) -> dict:
    """The pod spec's `initContainers`, the fetch before the component's container starts
    (an empty dict without huggingFace)."""
    hub = hugging_face(service)
    if hub is None:
        return {}
    own = service.spec[component]
    memory = gateway_sizing.memory(own) if component == "gateway" else quantity(own["memory"])
    server = service.spec["server"]
    env = [{"name": k, "value": v}
           for k, v in sorted({**fetch_env(service, component), **HUB_ENV}.items())]
    if "endpoint" in hub:
        env.append({"name": "HF_ENDPOINT", "value": hub["endpoint"]})
    if "tokenSecret" in hub:
        secret = hub["tokenSecret"]
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": secret["name"], "key": secret["key"]}}})
    return {"initContainers": [{
        "name": FETCH_CONTAINER,
        "image": server["image"],
        "imagePullPolicy": server["imagePullPolicy"],
        "command": ["hedgerow"],
        "args": ["fetch-model"],
        "env": env,
        # The component's own CPU and memory: a pod's request is the larger of its init and
        # its containers' requests, so this costs the pod nothing more (and no GPU).
        "resources": {"requests": {"cpu": quantity(own["cpu"]), "memory": memory},
                      "limits": {"memory": memory}},
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "securityContext": container_security_context(),
        "volumeMounts": _mounts(service, read_only=False)
        + [{"name": TMP_VOLUME, "mountPath": "/tmp"}],
    }]}
