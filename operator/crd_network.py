"""The EmbeddingService CRD's `spec.networkPolicy` and `spec.tls`: who may reach the pods.

Owns the two blocks operator/crd.py places in the spec: the NetworkPolicies the operator writes
(on by default; `gatewayFrom` narrows the gateways' HTTP ingress, `metricsFrom` names who may
scrape /metrics) and the Secret whose certificates secure gRPC between gateways and servers
(mutual TLS). The peers are the core networking/v1 NetworkPolicyPeer fields, checked here so a
spec the API server would refuse as a NetworkPolicy is refused on apply. Knows nothing about
how they become manifests (build_network.py, build_server.py, build_gateway.py).
"""

from hedgerow.operator.schema import array, boolean, obj, rule, string, string_map

QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CIDR = r"^[0-9a-fA-F:.]+/[0-9]{1,3}$"

# Who scrapes /metrics by default: Prometheus pods as the prometheus-operator labels them (the
# chart's ServiceMonitors are read by such a Prometheus), in any namespace.
DEFAULT_METRICS_FROM = ({"namespaceSelector": {},
                         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},)


def _label_selector(what: str) -> dict:
    expression = obj(
        {
            "key": string("Label key.", min_length=1, max_length=317, pattern=QUALIFIED_NAME),
            "operator": string("How the key's value is matched.",
                               enum=("In", "NotIn", "Exists", "DoesNotExist")),
            "values": array(string("A label value.", max_length=63, pattern=LABEL_VALUE),
                            "Values for In and NotIn; empty for Exists and DoesNotExist.",
                            max_items=64),
        },
        "A label selector requirement.",
        required=("key", "operator"),
        rules=(rule("(self.operator in ['In', 'NotIn']) == "
                    "(has(self.values) && size(self.values) > 0)",
                    "matchExpressions: In and NotIn need values, Exists and DoesNotExist take "
                    "none"),),
    )
    return obj(
        {
            "matchLabels": string_map("Labels that must all be present with these values.",
                                      max_value_length=63, value_pattern=LABEL_VALUE,
                                      rules=(rule(f"self.all(k, k.matches('{QUALIFIED_NAME}'))",
                                                  "matchLabels keys must be label keys"),)),
            "matchExpressions": array(expression, "Requirements that must all hold.",
                                      max_items=32),
        },
        f"{what} (a label selector; empty selects all).",
    )


def _peer() -> dict:
    return obj(
        {
            "podSelector": _label_selector("Pods admitted (in this namespace, or in the "
                                           "namespaces namespaceSelector selects)"),
            "namespaceSelector": _label_selector("Namespaces whose pods are admitted"),
            "ipBlock": obj(
                {
                    "cidr": string("An IP range, e.g. 10.0.0.0/8.", min_length=1,
                                   max_length=64, pattern=CIDR),
                    "except": array(string("A range inside cidr.", min_length=1,
                                           max_length=64, pattern=CIDR),
                                    "Ranges inside cidr that are not admitted.", max_items=32),
                },
                "Addresses admitted (outside the cluster's pod network: a load balancer's, "
                "say).",
                required=("cidr",),
            ),
        },
        "A source admitted (the networking/v1 NetworkPolicyPeer fields).",
        rules=(rule("has(self.ipBlock) != (has(self.podSelector) || "
                    "has(self.namespaceSelector))",
                    "a peer is either an ipBlock or pod/namespace selectors, not both and not "
                    "neither"),),
    )


def _peers(description: str, default: tuple[dict, ...] | None = None) -> dict:
    return array(_peer(), description, max_items=32,
                 default=list(default) if default is not None else None,
                 rules=(rule("size(self) > 0", "an empty list of sources would admit every "
                             "source: leave the field out for the default"),))


NETWORK_POLICY = obj(
    {
        "enabled": boolean("Write NetworkPolicies `<name>-server` and `<name>-gateway`: server "
                           "pods admit gRPC (50051) only from this resource's gateway pods, "
                           "and their HTTP port (9090: /metrics, /warmup, /readyz) only from "
                           "the operator's pods (app.kubernetes.io/name: hedgerow, "
                           "app.kubernetes.io/component: operator, any namespace) and "
                           "metricsFrom; gateway pods admit HTTP (8080) from gatewayFrom, or "
                           "from anywhere without it. Needs a network plugin that enforces "
                           "NetworkPolicies. false deletes them.", default=True),
        "gatewayFrom": _peers("Sources that may call the gateways' HTTP API (8080); "
                              "metricsFrom is admitted too, for /metrics. Default: any."),
        "metricsFrom": _peers("Sources that may scrape /metrics: the servers' port 9090 "
                              "and, with gatewayFrom, the gateways' 8080. Default: Prometheus "
                              "pods labelled app.kubernetes.io/name: prometheus (as the "
                              "prometheus-operator labels them), in any namespace.",
                              DEFAULT_METRICS_FROM),
    },
    "The NetworkPolicies that keep everything but this resource's gateways away from its "
    "servers.",
    default={},
)

TLS = obj(
    {
        "secretName": string("A Secret in this namespace with tls.crt, tls.key and ca.crt "
                             "(type kubernetes.io/tls, as cert-manager writes it). Servers "
                             "serve gRPC with it and require a client certificate signed by "
                             "ca.crt; gateways present it and check the servers' against "
                             "ca.crt for the name `<name>-server.<namespace>.svc`, which the "
                             "certificate must hold, with both usages, server auth and "
                             "client auth. The operator checks it before it writes any pod "
                             "(missing, incomplete, not PEM, key not the certificate's, "
                             "expired, not signed by ca.crt: Ready=False, nothing applied); "
                             "a change of its content rolls the pods.",
                             min_length=1, max_length=253, pattern=DNS_SUBDOMAIN),
    },
    "Mutual TLS on gRPC between the gateways and the servers. Without it gRPC is plaintext "
    "(the NetworkPolicies still keep other pods away).",
    required=("secretName",),
)
