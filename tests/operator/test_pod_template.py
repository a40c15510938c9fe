"""Pod-level fields of the server and gateway Deployments a cluster operator relies on: no
service-account token in pods that never call the API, the API-key Secret's digest in the
gateway template, and the spec's pod-template overrides merged onto the builders' output
(every result validated against the real Kubernetes schemas)."""

import copy

import kubernetes_validate
import pytest

from hedgerow.operator import api_keys, crd_pods, names
from hedgerow.operator.manifests import build_all
from hedgerow.operator.spec import parse
from tests.operator.api_server import admit

K8S_VERSIONS = ("1.30.0", "1.33.0")

BASE = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "1234", "generation": 1},
    "spec": {"model": {"path": "/models/m"}, "server": {"image": "s:1"},
             "gateway": {"image": "g:1"}},
}


def _body(mutate=lambda spec: None) -> dict:
    body = copy.deepcopy(BASE)
    mutate(body["spec"])
    return body


def _pods(mutate=lambda spec: None, **build) -> dict:
    """Pod templates by component, of a spec the API server admitted."""
    children = build_all(parse(admit(_body(mutate))), **build)
    for child in children:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(child, version, strict=True)
    return {child["metadata"]["labels"]["app.kubernetes.io/component"]:
            child["spec"]["template"] for child in children if child["kind"] == "Deployment"}


def test_pods_mount_no_service_account_token():
    for template in _pods().values():
        assert template["spec"]["automountServiceAccountToken"] is False


def _with_keys(spec):
    spec["gateway"]["apiKeySecret"] = {"name": "keys"}


def _secret(**data):
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "keys"}, "data": data}


def test_the_api_keys_digest_is_a_gateway_annotation_only():
    digest = api_keys.digest(parse(admit(_body(_with_keys))), _secret(**{"api-keys": "a2V5"}))
    pods = _pods(_with_keys, api_keys_digest=digest)
    assert pods["gateway"]["metadata"]["annotations"][names.API_KEYS_HASH_ANNOTATION] == digest
    assert names.API_KEYS_HASH_ANNOTATION not in pods["server"]["metadata"]["annotations"]
    assert names.API_KEYS_HASH_ANNOTATION not in _pods()["gateway"]["metadata"]["annotations"]


def test_the_digest_follows_the_keys_and_names_a_missing_secret_or_key():
    service = parse(admit(_body(_with_keys)))
    one, two = (api_keys.digest(service, _secret(**{"api-keys": v})) for v in ("YQ==", "Yg=="))
    assert one != two and one == api_keys.digest(service, _secret(**{"api-keys": "YQ=="}))
    with pytest.raises(api_keys.SecretProblem, match="Secret 'keys'.*does not exist") as found:
        api_keys.digest(service, None)
    assert found.value.reason == api_keys.SECRET_MISSING
    with pytest.raises(api_keys.SecretProblem, match="no key 'api-keys'") as found:
        api_keys.digest(service, _secret(other="YQ=="))
    assert found.value.reason == api_keys.KEY_MISSING


AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "pool", "operator": "In", "values": ["cpu-large"]}]}]}}}
FULL = {
    "labels": {"team": "search"},
    "annotations": {"example.com/owner": "ml"},
    "imagePullSecrets": [{"name": "registry"}],
    "serviceAccountName": "embeddings",
    "priorityClassName": "inference",
    "affinity": AFFINITY,
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "DoNotSchedule",
                                   "labelSelector": {"matchLabels": {"team": "search"}}}],
    "env": [{"name": "HEDGEROW_REQUEST_TIMEOUT", "value": "30"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "k"}}}],
    "envFrom": [{"configMapRef": {"name": "extra"}}, {"secretRef": {"name": "extra"}}],
    "resources": {"limits": {"cpu": "8", "ephemeral-storage": "4Gi"},
                  "requests": {"ephemeral-storage": "1Gi"}},
}


@pytest.mark.parametrize("component", ["server", "gateway"])
def test_every_pod_template_field_lands_in_the_pods(component):
    built = _pods()[component]
    template = _pods(lambda s: s[component].update(podTemplate=copy.deepcopy(FULL)))[component]
    pod, container = template["spec"], template["spec"]["containers"][0]
    assert template["metadata"]["labels"] == {**built["metadata"]["labels"], "team": "search"}
    assert template["metadata"]["annotations"] == {**built["metadata"]["annotations"],
                                                   "example.com/owner": "ml"}
    for field in ("imagePullSecrets", "serviceAccountName", "priorityClassName", "affinity",
                  "topologySpreadConstraints"):
        assert pod[field] == FULL[field], field
    assert container["env"] == built["spec"]["containers"][0]["env"] + FULL["env"]
    assert container["envFrom"] == FULL["envFrom"] + built["spec"]["containers"][0]["envFrom"]
    own = built["spec"]["containers"][0]["resources"]
    assert container["resources"]["limits"] == {**own["limits"], "cpu": "8",
                                                "ephemeral-storage": "4Gi"}
    assert container["resources"]["requests"] == {**own["requests"], "ephemeral-storage": "1Gi"}
    for kept in ("ports", "readinessProbe", "livenessProbe", "securityContext", "command",
                 "volumeMounts"):
        assert container.get(kept) == built["spec"]["containers"][0].get(kept), kept
    assert pod["securityContext"] == built["spec"]["securityContext"]


@pytest.mark.parametrize("component", ["server", "gateway"])
def test_pods_spread_across_nodes_unless_told_otherwise(component):
    spread = _pods()[component]["spec"]["topologySpreadConstraints"]
    assert spread == [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                       "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {
                           names.LABEL_NAME: "hedgerow", names.LABEL_INSTANCE: "emb",
                           names.LABEL_COMPONENT: component}}}]
    none = _pods(lambda s: s[component].update(podTemplate={"topologySpreadConstraints": []}))
    assert "topologySpreadConstraints" not in none[component]["spec"]


SPECS = [
    lambda s: None,
    lambda s: (s["server"].update(gpus=0, compileCache={"hostPath": {"path": "/c"}}),
               s.update(guard={"configMap": "golden"})),
    lambda s: s["gateway"].update(apiKeySecret={"name": "keys"}, workers=3,
                                  templates={"query": "q: "}),
    lambda s: s.update(model={"huggingFace": {"id": "a/b", "revision": "v1"}}),
]


@pytest.mark.parametrize("mutate", SPECS)
def test_the_refused_env_names_cover_every_variable_the_operator_writes(mutate):
    """crd_pods.operator_env is what podTemplate.env may not set: it must hold every variable
    of the operator's ConfigMaps and containers, or a user's would silently win."""
    children = build_all(parse(admit(_body(mutate))), "digest")
    for child in children:
        component = child["metadata"]["labels"]["app.kubernetes.io/component"]
        if child["kind"] == "ConfigMap":
            written = set(child["data"])
        elif child["kind"] == "Deployment":
            written = {e["name"] for e in child["spec"]["template"]["spec"]["containers"][0]["env"]}
        else:
            continue
        assert written <= set(crd_pods.operator_env(component)), child["metadata"]["name"]
