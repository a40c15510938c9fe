"""Fixed names shared by the builders, the handlers and the chart: ports, labels, child names.

Owns DESIGN.md's fixed names as constants and the helpers that derive a child's name, labels,
selector and ownerReference from the parent. Knows nothing about what the children contain.
"""

from typing import Any, Literal, Mapping

from hedgerow.gateway_settings import GatewaySettings
from hedgerow.operator import crd
from hedgerow.operator.spec import Service
from hedgerow.server_settings import ServerSettings

FIELD_MANAGER = "hedgerow-operator"
# Holds the server Deployment's replicas while autoscaling takes them over (handlers.py).
HANDOVER_MANAGER = "hedgerow-handover-to-hpa"
GATE_CONDITION = "hedgerow.dev/graphs-warm"
CONFIG_HASH_ANNOTATION = "hedgerow.dev/config-hash"
# A digest of the golden set's text: re-recording it rolls the servers, which check at start.
GOLDEN_SET_HASH_ANNOTATION = "hedgerow.dev/golden-set-hash"
# A digest of the gateway's API keys: rotating the Secret rolls the gateways (api_keys.py).
API_KEYS_HASH_ANNOTATION = "hedgerow.dev/api-keys-hash"

# The processes' own default ports (one definition each), which are DESIGN.md's fixed ports.
GATEWAY_HTTP_PORT = GatewaySettings.port
SERVER_GRPC_PORT = ServerSettings.port
SERVER_HTTP_PORT = ServerSettings.http_port
OPERATOR_HEALTH_PORT = 8081

SERVER_CONTAINER = "server"
GATEWAY_CONTAINER = "gateway"
RUN_AS_USER = 10001

Component = Literal["server", "gateway"]

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
APP_NAME = "hedgerow"


def server_name(service: Service) -> str:
    """Server Deployment, headless Service, ConfigMap, PDB and HPA."""
    return f"{service.name}-server"


def gateway_name(service: Service) -> str:
    """Gateway Deployment, ConfigMap and PDB."""
    return f"{service.name}-gateway"


def gateway_service_name(service: Service) -> str:
    """The Service clients call: the resource's own name."""
    return service.name


def selector(service: Service, component: Component) -> dict[str, str]:
    """Labels that select one component's pods (immutable once a Deployment exists)."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: service.name, LABEL_COMPONENT: component}


def selector_text(service: Service, component: Component) -> str:
    """`selector` as a label-selector string (status.selector, for the scale subresource)."""
    return ",".join(f"{key}={value}" for key, value in selector(service, component).items())


def service_url(service: Service) -> str:
    """Where clients in the cluster reach the gateways (status.url)."""
    return (f"http://{gateway_service_name(service)}.{service.namespace}.svc:"
            f"{GATEWAY_HTTP_PORT}")


def instance_selector(service: Service) -> dict[str, str]:
    """Labels that select every pod of the resource, servers and gateways."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: service.name}


def labels(service: Service, component: Component) -> dict[str, str]:
    return {**selector(service, component), LABEL_MANAGED_BY: FIELD_MANAGER}


def owner_reference(service: Service) -> dict:
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "name": service.name,
        "uid": service.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: Mapping[str, Any], service: Service) -> bool:
    """Whether `obj` (as read from the API) belongs to `service`: owned by it, or by an
    EmbeddingService of the same name whose uid differs (deleted and created again before the
    garbage collector got to its children: applying adopts them, warm servers and all)."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(owner.get("uid") == service.uid
               or (owner.get("kind") == crd.KIND and owner.get("name") == service.name
                   and str(owner.get("apiVersion", "")).startswith(crd.GROUP + "/"))
               for owner in owners)


def metadata(service: Service, name: str, component: Component) -> dict:
    return {
        "name": name,
        "namespace": service.namespace,
        "labels": labels(service, component),
        "ownerReferences": [owner_reference(service)],
    }
