"""spec.networkPolicy: the NetworkPolicies validate against the real Kubernetes schemas, select
exactly the pods the Deployment builders label (computed from the built Deployments, never
written down again here), and the real operator on kmock applies them for the examples and
deletes them once the spec turns them off."""

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from hedgerow.operator.build_network import OPERATOR_PEER
from hedgerow.operator.manifests import build_all, unwanted
from hedgerow.operator.spec import parse

K8S_VERSIONS = ("1.30.0", "1.33.0")
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
CHART_HELPERS = Path(__file__).resolve().parents[2] / "charts/hedgerow/templates/_helpers.tpl"

BASE = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "1234", "generation": 1},
    "spec": {"model": {"path": "/models/m"}, "server": {"image": "s:1"},
             "gateway": {"image": "g:1"}},
}
WEB = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}},
       "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In",
                                             "values": ["api", "frontend"]}]}}
LOAD_BALANCER = {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}
SCRAPER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
           "podSelector": {}}


def _service(network_policy: dict | None = None, name: str = "emb"):
    body = copy.deepcopy(BASE)
    body["metadata"]["name"] = name
    if network_policy is not None:
        body["spec"]["networkPolicy"] = network_policy
    return parse(body)


def _by_kind(manifests):
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def selects(selector: dict, labels: dict) -> bool:
    """Whether a label selector (matchLabels and matchExpressions) selects `labels`."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression["key"], expression["operator"], \
            expression.get("values", ())
        if operator == "In" and labels.get(key) not in values \
                or operator == "NotIn" and labels.get(key) in values \
                or operator == "Exists" and key not in labels \
                or operator == "DoesNotExist" and key in labels:
            return False
    return True


def pod_labels(deployment: dict) -> dict:
    return deployment["spec"]["template"]["metadata"]["labels"]


def check_selection(children: dict, name: str) -> None:
    """The policies of `name` select its pods by the labels its Deployments write, and the
    gRPC rule admits its gateway pods and not its server pods."""
    server = pod_labels(children[("Deployment", f"{name}-server")])
    gateway = pod_labels(children[("Deployment", f"{name}-gateway")])
    server_policy = children[("NetworkPolicy", f"{name}-server")]["spec"]
    gateway_policy = children[("NetworkPolicy", f"{name}-gateway")]["spec"]
    assert selects(server_policy["podSelector"], server)
    assert not selects(server_policy["podSelector"], gateway)
    assert selects(gateway_policy["podSelector"], gateway)
    assert not selects(gateway_policy["podSelector"], server)
    grpc, http = server_policy["ingress"]
    assert grpc["ports"] == [{"port": 50051, "protocol": "TCP"}]
    [peer] = grpc["from"]
    assert set(peer) == {"podSelector"}, "gateway pods of this namespace only"
    assert selects(peer["podSelector"], gateway)
    assert not selects(peer["podSelector"], server)
    other = pod_labels(_by_kind(build_all(_service(name="other")))[
        ("Deployment", "other-gateway")])
    assert not selects(peer["podSelector"], other), "another resource's gateways"
    assert http["ports"] == [{"port": 9090, "protocol": "TCP"}]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("policy", [None, {"gatewayFrom": [WEB, LOAD_BALANCER]},
                                    {"gatewayFrom": [WEB], "metricsFrom": [SCRAPER]}],
                         ids=["defaults", "gateway-from", "metrics-from"])
def test_policies_validate_and_select_the_builders_pods(policy, version):
    manifests = build_all(_service(policy))
    children = _by_kind(manifests)
    for kind_name in (("NetworkPolicy", "emb-server"), ("NetworkPolicy", "emb-gateway")):
        kubernetes_validate.validate(children[kind_name], version, strict=True)
    check_selection(children, "emb")


def test_default_sources():
    children = _by_kind(build_all(_service()))
    _, http = children[("NetworkPolicy", "emb-server")]["spec"]["ingress"]
    prometheus = {"namespaceSelector": {},
                  "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    assert http["from"] == [OPERATOR_PEER, prometheus]
    # The gateways' HTTP API: one rule on 8080 with no `from`, which admits any source.
    assert children[("NetworkPolicy", "emb-gateway")]["spec"]["ingress"] == [
        {"ports": [{"port": 8080, "protocol": "TCP"}]}]


def test_the_operator_peer_selects_the_charts_operator_pods():
    """The chart's operator labels (hedgerow.selectorLabels, default nameOverride) are what
    the server policy admits to /warmup."""
    text = CHART_HELPERS.read_text()
    block = text[text.index('define "hedgerow.selectorLabels"'):]
    block = block[:block.index("{{- end }}")]
    labels = {"app.kubernetes.io/name": "hedgerow", "app.kubernetes.io/instance": "h"}
    assert "app.kubernetes.io/component: operator" in block
    labels["app.kubernetes.io/component"] = "operator"
    assert selects(OPERATOR_PEER["podSelector"], labels)
    assert OPERATOR_PEER["namespaceSelector"] == {}, "the chart installs in any namespace"


def test_gateway_from_narrows_http_and_keeps_the_scrapers():
    children = _by_kind(build_all(_service({"gatewayFrom": [WEB, LOAD_BALANCER],
                                            "metricsFrom": [SCRAPER]})))
    [rule] = children[("NetworkPolicy", "emb-gateway")]["spec"]["ingress"]
    assert rule == {"from": [WEB, LOAD_BALANCER, SCRAPER],
                    "ports": [{"port": 8080, "protocol": "TCP"}]}
    _, http = children[("NetworkPolicy", "emb-server")]["spec"]["ingress"]
    assert http["from"] == [OPERATOR_PEER, SCRAPER]


def test_disabled_writes_none_and_lists_them_unwanted():
    service = _service({"enabled": False})
    assert not [m for m in build_all(service) if m["kind"] == "NetworkPolicy"]
    gone = {(c.api_version, c.kind, c.name) for c in unwanted(service)}
    assert {("networking.k8s.io/v1", "NetworkPolicy", "emb-server"),
            ("networking.k8s.io/v1", "NetworkPolicy", "emb-gateway")} <= gone
    assert not [c for c in unwanted(_service()) if c.kind == "NetworkPolicy"]


# ---- the real operator on kmock --------------------------------------------------------------

async def _children(cluster, namespace, name):
    found = {}
    for api_version, plural, kind, child in (
            ("apps/v1", "deployments", "Deployment", f"{name}-server"),
            ("apps/v1", "deployments", "Deployment", f"{name}-gateway"),
            ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", f"{name}-server"),
            ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", f"{name}-gateway")):
        obj = await cluster.get(f"/apis/{api_version}/namespaces/{namespace}/{plural}/{child}")
        if obj is None:
            return None
        found[(kind, child)] = obj
    return found


@pytest.mark.asyncio
@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
async def test_examples_get_policies_that_select_their_pods(cluster, path):
    body = yaml.safe_load(path.read_text())
    namespace, name = await cluster.apply_example(body)
    children = await cluster.eventually(lambda: _children(cluster, namespace, name),
                                        f"the Deployments and NetworkPolicies of {path.name}")
    for obj in children.values():
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
        owner = obj["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "EmbeddingService" and owner["uid"] == f"uid-{name}"
    check_selection(children, name)


@pytest.mark.asyncio
@pytest.mark.slow
async def test_turning_them_off_deletes_them_and_drift_is_repaired(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    server_policy = cluster.child_path("networking.k8s.io/v1", "networkpolicies", "emb-server")
    gateway_policy = cluster.child_path("networking.k8s.io/v1", "networkpolicies", "emb-gateway")
    await cluster.eventually(lambda: cluster.get(gateway_policy), "the gateway policy")
    # Someone opens the servers to every pod: the resync timer writes the policy back.
    await cluster.patch(server_policy, {"spec": {"ingress": [{}]}})

    async def repaired():
        policy = await cluster.get(server_policy)
        return policy if len(policy["spec"]["ingress"]) == 2 else None

    await cluster.eventually(repaired, "the server policy repaired")
    spec = cluster.resource("emb")["spec"]
    spec["networkPolicy"] = {"enabled": False}
    await cluster.patch(f"{cluster.cr_path}/emb", {"metadata": {"generation": 2}, "spec": spec})

    async def gone():
        return await cluster.get(server_policy) is None and \
            await cluster.get(gateway_policy) is None

    await cluster.eventually(gone, "both NetworkPolicies deleted")
    assert await cluster.get(cluster.child_path("apps/v1", "deployments", "emb-server")), \
        "the rest stays"
