"""The full set of children of one EmbeddingService, in the order they are applied.

Owns which children exist for a spec (`build_all`) and which must not (`unwanted`: the HPA when
autoscaling is off). Pure; the handlers apply what this returns.
"""

from typing import NamedTuple

from hedgerow.operator import names
from hedgerow.operator.build_gateway import (
    build_gateway_config, build_gateway_deployment, build_gateway_service,
)
from hedgerow.operator.build_scaling import build_hpa, build_pdb
from hedgerow.operator.build_server import (
    build_server_config, build_server_deployment, build_server_service,
)
from hedgerow.operator.spec import Service


class ChildRef(NamedTuple):
    api_version: str
    kind: str
    name: str


def build_all(service: Service, golden_set_digest: str | None = None) -> list[dict]:
    """Every child manifest; ConfigMaps first so Deployments never start without them.
    `golden_set_digest`: the content digest of the golden set `spec.guard` names."""
    server_config, gateway_config = build_server_config(service), build_gateway_config(service)
    children = [
        server_config,
        gateway_config,
        build_server_service(service),
        build_gateway_service(service),
        build_server_deployment(service, server_config, golden_set_digest),
        build_gateway_deployment(service, gateway_config),
        build_pdb(service, "server"),
        build_pdb(service, "gateway"),
    ]
    if service.autoscaled:
        children.append(build_hpa(service))
    return children


def unwanted(service: Service) -> list[ChildRef]:
    """Children a previous spec may have created that this spec does not want."""
    if service.autoscaled:
        return []
    return [ChildRef("autoscaling/v2", "HorizontalPodAutoscaler", names.server_name(service))]
