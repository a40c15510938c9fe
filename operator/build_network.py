"""NetworkPolicies of one EmbeddingService: only its gateways reach its servers' gRPC port.

Pure functions from a defaulted `Service` to networking/v1 NetworkPolicy dicts; no I/O. The
server policy admits gRPC (50051) from this resource's gateway pods only (selected by the same
labels the gateway Deployment puts on them, names.selector) and the HTTP port (9090: /metrics,
/warmup, /readyz) from the operator's pods, which read /warmup, and from
`spec.networkPolicy.metricsFrom`. The gateway policy admits HTTP (8080) from anywhere, or, with
`spec.networkPolicy.gatewayFrom`, from those sources and the metrics sources. Only ingress is
restricted. Knows nothing about the API server.
"""

from hedgerow.operator import names
from hedgerow.operator.spec import Service

API_VERSION = "networking.k8s.io/v1"
KIND = "NetworkPolicy"
# The operator's pods, as the chart labels them (charts/hedgerow/templates/_helpers.tpl,
# hedgerow.selectorLabels), in whichever namespace the chart is installed.
OPERATOR_PEER = {"namespaceSelector": {},
                 "podSelector": {"matchLabels": {names.LABEL_NAME: names.APP_NAME,
                                                 names.LABEL_COMPONENT: "operator"}}}


def _port(number: int) -> dict:
    return {"port": number, "protocol": "TCP"}


def _policy(service: Service, component: names.Component, ingress: list[dict]) -> dict:
    name = names.server_name(service) if component == "server" else names.gateway_name(service)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": names.metadata(service, name, component),
        "spec": {
            "podSelector": {"matchLabels": names.selector(service, component)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def build_server_policy(service: Service) -> dict:
    metrics_from = list(service.spec["networkPolicy"]["metricsFrom"])
    return _policy(service, "server", [
        {"from": [{"podSelector": {"matchLabels": names.selector(service, "gateway")}}],
         "ports": [_port(names.SERVER_GRPC_PORT)]},
        {"from": [OPERATOR_PEER, *metrics_from], "ports": [_port(names.SERVER_HTTP_PORT)]},
    ])


def build_gateway_policy(service: Service) -> dict:
    policy = service.spec["networkPolicy"]
    rule: dict = {"ports": [_port(names.GATEWAY_HTTP_PORT)]}
    if "gatewayFrom" in policy:  # without it, no `from`: any source
        rule = {"from": [*policy["gatewayFrom"], *policy["metricsFrom"]], **rule}
    return _policy(service, "gateway", [rule])


def build_policies(service: Service) -> list[dict]:
    """Both policies, or none when `spec.networkPolicy.enabled` is false."""
    if not service.spec["networkPolicy"]["enabled"]:
        return []
    return [build_server_policy(service), build_gateway_policy(service)]
