"""The full set of children of one EmbeddingService, in the order they are applied.

Owns which children exist for a spec (`build_all`) and which must not (`unwanted`: the HPA when
autoscaling is off, the gateway HPA when gateway autoscaling is, the NetworkPolicies when
spec.networkPolicy is off; `keda_leftover`: a ScaledObject once engine keda is off). Pure; the
handlers apply what this returns.
"""

from typing import NamedTuple

from hedgerow.operator import names
from hedgerow.operator.build_gateway import (
    build_gateway_config, build_gateway_deployment, build_gateway_service,
)
from hedgerow.operator import build_keda, build_network
from hedgerow.operator.build_scaling import build_gateway_hpa, build_hpa, build_pdb
from hedgerow.operator.build_server import (
    build_server_config, build_server_deployment, build_server_service,
)
from hedgerow.operator.spec import Service


class ChildRef(NamedTuple):
    api_version: str
    kind: str
    name: str


def build_all(service: Service, golden_set_digest: str | None = None,
              api_keys_digest: str | None = None, tls_digest: str | None = None) -> list[dict]:
    """Every child manifest; ConfigMaps first so Deployments never start without them.
    `golden_set_digest`: the content digest of the golden set `spec.guard` names;
    `api_keys_digest`: that of the API keys in `spec.gateway.apiKeySecret` (api_keys.py);
    `tls_digest`: that of the Secret `spec.tls` names."""
    server_config, gateway_config = build_server_config(service), build_gateway_config(service)
    children = [
        server_config,
        gateway_config,
        build_server_service(service),
        build_gateway_service(service),
        build_server_deployment(service, server_config, golden_set_digest, tls_digest),
        build_gateway_deployment(service, gateway_config, api_keys_digest, tls_digest),
        build_pdb(service, "server"),
        build_pdb(service, "gateway"),
        *build_network.build_policies(service),
    ]
    if service.autoscaled and service.keda:
        children.append(build_keda.build_scaled_object(service))
    elif service.autoscaled:
        children.append(build_hpa(service))
    if service.gateways_autoscaled:
        children.append(build_gateway_hpa(service))
    return children


def unwanted(service: Service) -> list[ChildRef]:
    """Children a previous spec may have created that this spec does not want."""
    out = []
    if not service.autoscaled:  # under keda, KEDA takes the HPA of the same name over
        out.append(ChildRef("autoscaling/v2", "HorizontalPodAutoscaler",
                            names.server_name(service)))
    if not service.gateways_autoscaled:
        out.append(ChildRef("autoscaling/v2", "HorizontalPodAutoscaler",
                            names.gateway_name(service)))
    if not service.spec["networkPolicy"]["enabled"]:
        out += [ChildRef(build_network.API_VERSION, build_network.KIND, name)
                for name in (names.server_name(service), names.gateway_name(service))]
    return out


def keda_leftover(service: Service, hpa: dict | None) -> ChildRef | None:
    """The ScaledObject to delete before this spec's children are checked: the one whose HPA
    (`hpa`, the live `<name>-server` HPA or None) KEDA still runs when the spec no longer asks
    for engine keda. Deleting it takes KEDA's HPA with it (garbage collection), and the HPA
    the spec wants can then be applied. Asked this way, a cluster without KEDA is never sent
    a request for a kind it does not serve."""
    if service.autoscaled and service.keda or hpa is None:
        return None
    name = names.server_name(service)
    owners = (hpa.get("metadata") or {}).get("ownerReferences") or []
    if any(owner.get("kind") == build_keda.KIND and owner.get("name") == name
           for owner in owners):
        return ChildRef(build_keda.API_VERSION, build_keda.KIND, name)
    return None
