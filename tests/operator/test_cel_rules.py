"""The CRD's rules, each written once as CEL, run with a real CEL evaluator (cel-python) through
the API-server stand-in: every rule compiles, uses only what the API server's CEL accepts, is
seen both holding and failing over many specs and the examples, and refuses a bad spec with a
message that names the field. The graph rules agree with what a server refuses at start
(hedgerow.graph_grid's arithmetic), the server limits with ServerSettings' own check."""

import copy
from pathlib import Path

import pytest
import yaml

from hedgerow import settings
from hedgerow.errors import ConfigError
from hedgerow.gpu_settings import GpuSettings
from hedgerow.operator import crd, knobs
from hedgerow.operator.spec import apply_defaults
from hedgerow.server_settings import ServerSettings
from tests.operator.api_server import Refused, admit, all_rules, holds, program, rules_on

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "apiVersion": crd.API_VERSION, "kind": crd.KIND,
    "metadata": {"name": "emb", "namespace": "ml"},
    "spec": {"model": {"path": "/models/m", "persistentVolumeClaim": {"claimName": "c"}},
             "server": {"image": "s"}, "gateway": {"image": "g"}},
}


def defaulted(spec: dict) -> dict:
    return apply_defaults(crd.SPEC, spec)


def _body(mutate=lambda b: None) -> dict:
    body = copy.deepcopy(BASE)
    mutate(body)
    return body


MUTATIONS = [
    lambda b: None,
    lambda b: b["spec"].update(autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 2}),
    lambda b: b["spec"].update(autoscaling={"minReplicas": 3, "maxReplicas": 3}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1280, "maxSeqs": 8,
                                                 "seqBuckets": [1, 2, 8]}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1088, "hotSet": []}),
    lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [4, 1, 8]}),
    lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [1, 4]}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 256}),
    lambda b: b["spec"]["server"].update(graphs={"hotSet": [{"sequences": 32, "tokens": 16}]}),
    lambda b: b["spec"]["server"].update(maxRequestTokens=100000),
    lambda b: b["spec"]["server"].update(dtype="float8"),
    lambda b: b["spec"]["server"].update(dtype="float8", gpus=0),
    lambda b: b["spec"]["gateway"].update(chunkTokens=20000),
    lambda b: b["spec"]["model"].update(hostPath={"path": "/srv"}),
    lambda b: b["spec"]["model"].update(path="/elsewhere/m"),
    lambda b: b["spec"]["model"].update(path="/models"),
    lambda b: (b["spec"]["model"].pop("persistentVolumeClaim"),
               b["spec"]["model"].update(path="/anywhere")),
    lambda b: b["metadata"].update(name="x" * 41),
    lambda b: b["metadata"].update(name="9lives"),
    lambda b: b["metadata"].update(name="emb-server"),
    lambda b: b["spec"]["server"].update(tolerations=[{"effect": "NoSchedule"}]),
    lambda b: b["spec"]["server"].update(tolerations=[{"operator": "Exists", "value": "v"}]),
    lambda b: b["spec"]["gateway"].update(tolerations=[
        {"key": "k", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 5}]),
    lambda b: b["spec"]["gateway"].update(tolerations=[
        {"key": "k", "effect": "NoExecute", "tolerationSeconds": 5}]),
    lambda b: b["spec"]["model"].update(mountPath="/tmp", path="/tmp/m"),
    lambda b: b["spec"]["model"]["persistentVolumeClaim"].update(subPath="a/../b"),
    lambda b: b["spec"]["model"]["persistentVolumeClaim"].update(subPath="models/..x"),
    lambda b: b["spec"]["server"].update(nodeSelector={"nvidia.com/gpu.product": "H200"}),
    lambda b: b["spec"]["server"].update(nodeSelector={"gpu type": "h200"}),
    lambda b: b["spec"].update(guard={"configMap": "golden"}),
    lambda b: b["spec"].update(guard={"configMap": "golden"}, warmup={"readinessGate": False}),
    lambda b: b["spec"]["server"].update(compileCache={"hostPath": {"path": "/c"}}),
    lambda b: b["spec"]["server"].update(compileCache={
        "persistentVolumeClaim": {"claimName": "c", "subPath": "bge"}}),
    lambda b: b["spec"]["server"].update(compileCache={}),
    lambda b: b["spec"]["server"].update(compileCache={
        "persistentVolumeClaim": {"claimName": "c", "subPath": "../x"}}),
    # spec.autoscaling's engine rules (operator/crd_autoscaling.py)
    lambda b: b["spec"].update(autoscaling={"engine": "keda"}),
    lambda b: b["spec"].update(autoscaling={"engine": "keda",
                                            "prometheusAddress": "http://prom:9090"}),
    lambda b: b["spec"].update(autoscaling={"prometheusAddress": "http://prom:9090"}),
    lambda b: b["spec"].update(autoscaling={"engine": "keda", "metricName": "m",
                                            "prometheusAddress": "http://prom:9090"}),
]



# spec.networkPolicy's peers (operator/crd_network.py)
WEB_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "web"}},
            "podSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}
MUTATIONS += [
    lambda b: b["spec"].update(networkPolicy={"gatewayFrom": [
        WEB_PEER, {"ipBlock": {"cidr": "10.0.0.0/8"}},
        {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}}]}),
    lambda b: b["spec"].update(networkPolicy={"gatewayFrom": []}),
    lambda b: b["spec"].update(networkPolicy={"metricsFrom": [
        {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}),
    lambda b: b["spec"].update(networkPolicy={"gatewayFrom": [
        {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]}),
    lambda b: b["spec"].update(networkPolicy={"gatewayFrom": [
        {"podSelector": {"matchLabels": {"bad key": "x"}}}]}),
]


# spec.model.huggingFace: the model the operator fetches.
HF_COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


def _fetched(body, **fields):
    """`body` with its model fetched from the hub instead of read from the PVC."""
    body["spec"]["model"] = {"huggingFace": {"id": "sentence-transformers/all-MiniLM-L6-v2",
                                             "revision": HF_COMMIT, **fields}}


MUTATIONS += [
    lambda b: _fetched(b),
    lambda b: _fetched(b, revision="main"),
    lambda b: _fetched(b, revision="main", allowMovingRevision=True),
    lambda b: _fetched(b, revision="v1..2"),
    lambda b: _fetched(b, id="acme/a--b"),
    lambda b: _fetched(b, allowPatterns=["*.json"], cache={"claimName": "hf", "subPath": "m"}),
    lambda b: _fetched(b, allowPatterns=[], cache={"subPath": "../m"}),
    lambda b: _fetched(b, cache={"subPath": "m"}),
    lambda b: b["spec"]["model"].update(huggingFace={"id": "a/b", "revision": HF_COMMIT}),
    lambda b: b["spec"]["model"].pop("path"),
]



# spec.<component>.podTemplate (operator/crd_pods.py)
def _pods(body, component="gateway", **fields):
    body["spec"][component]["podTemplate"] = fields


GOOD_POD_TEMPLATE = dict(
    labels={"team": "search"}, annotations={"example.com/owner": "ml"},
    env=[{"name": "HEDGEROW_REQUEST_TIMEOUT", "value": "30"}, {"name": "A"}],
    resources={"limits": {"cpu": "4", "ephemeral-storage": "2Gi"},
               "requests": {"ephemeral-storage": "1Gi"}})
BAD_POD_TEMPLATE = dict(
    labels={"bad key": "x", "app.kubernetes.io/name": "x"},
    annotations={"prometheus.io/port": "1", "bad key": "x"},
    env=[{"name": "HEDGEROW_PORT", "value": "1", "valueFrom": {}}, {"name": "HEDGEROW_PORT"}],
    resources={"limits": {"memory": "1Gi"}, "requests": {"cpu": "1"}})

MUTATIONS += [
    lambda b: _pods(b, "gateway", **GOOD_POD_TEMPLATE),
    lambda b: _pods(b, "server", **GOOD_POD_TEMPLATE),
    lambda b: _pods(b, "gateway", **BAD_POD_TEMPLATE),
    lambda b: _pods(b, "server", **BAD_POD_TEMPLATE),
    lambda b: (_pods(b, "server", priorityClassName="p"),
               b["spec"]["server"].update(priorityClassName="q")),
    lambda b: b["spec"]["gateway"].update(autoscaling={"enabled": True, "minReplicas": 4,
                                                       "maxReplicas": 3}),
]

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_every_rule_is_seen_holding_and_failing():
    bodies = [_body(mutate) for mutate in MUTATIONS]
    bodies += [yaml.safe_load(path.read_text()) for path in EXAMPLES]
    outcomes: dict[str, set[bool]] = {}
    for body in bodies:
        stored = {**body, "spec": defaulted(body["spec"])}
        for _, rule, value in rules_on(crd.ROOT, stored):
            outcomes.setdefault(rule["rule"], set()).add(holds(rule["rule"], value))
    for rule in all_rules(crd.ROOT):
        assert outcomes.get(rule["rule"]) == {True, False}, f"not seen both ways: {rule['rule']}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_are_admitted(path):
    admit(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("mutate, fragment", [
    (lambda b: b["spec"]["server"].update(replicas=-1), "spec.server.replicas: -1 is less than"),
    (lambda b: b["spec"].update(autoscaling={"minReplicas": 5, "maxReplicas": 2}),
     "minReplicas must not exceed"),
    (lambda b: b["spec"]["gateway"].update(colour="blue"), "colour"),
    (lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1000, "hotSet": []}),
     "a multiple of 64 up to 1024"),
    (lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1088, "hotSet": []}),
     "1024 plus a multiple of 256"),
    (lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [4, 1, 8]}),
     "strictly increasing"),
    (lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 100}),
     "give seqBuckets when you change maxSeqs"),
    (lambda b: b["spec"]["server"].update(graphs={"maxTokens": 256}),
     "give hotSet when you lower maxTokens"),
    (lambda b: b["spec"]["server"].update(graphs={"hotSet": [{"sequences": 32, "tokens": 16}]}),
     "no more sequences than tokens"),
    (lambda b: b["spec"]["server"].update(maxRequestTokens=100000), "could never be admitted"),
    (lambda b: b["spec"]["server"].update(dtype="int8"), "spec.server.dtype"),
    (lambda b: b["spec"]["server"].update(dtype="float8", gpus=0),
     "server.dtype float8 runs on a GPU's FP8 tensor cores"),
    (lambda b: b["spec"]["server"].update(maxBatchSeqs=0), "spec.server.maxBatchSeqs"),
    (lambda b: b["spec"]["gateway"].update(chunkTokens=20000), "chunkTokens"),
    (lambda b: b["spec"]["model"].pop("path"), "give model.path"),
    (lambda b: b["spec"]["model"].update(path="models/m"), "spec.model.path"),
    (lambda b: b["spec"]["model"].update(path="/elsewhere/m"), "under model.mountPath"),
    (lambda b: b["spec"]["model"].update(hostPath={"path": "/srv"}), "at most one"),
    (lambda b: b["metadata"].update(name="x" * 41), "at most 40"),
    (lambda b: b["metadata"].update(name="9lives"), "starting with a letter"),
    (lambda b: b["metadata"].update(name="search-gateway"), "must not end in"),
    (lambda b: b["spec"]["server"].update(tolerations=[{"effect": "NoSchedule"}]),
     "without a key must use operator Exists"),
    (lambda b: b["spec"]["server"].update(tolerations=[
        {"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]),
     "only with effect NoExecute"),
    (lambda b: b["spec"]["server"].update(cpu="-4"), "spec.server.cpu"),
    (lambda b: b["spec"]["server"].update(gpuResource="memory"), "spec.server.gpuResource"),
    (lambda b: b["spec"]["server"].update(gpus=2), "maximum of 1"),
    (lambda b: b["spec"]["model"].update(mountPath="/tmp", path="/tmp/m"), "already"),
    (lambda b: b["spec"]["model"]["persistentVolumeClaim"].update(subPath="../x"),
     "relative path without '..'"),
    (lambda b: b["spec"]["gateway"].update(nodeSelector={"example.com/": "x"}),
     "nodeSelector keys must be label keys"),
    (lambda b: b.update(spec="nope"), "is not of type 'object'"),
    (lambda b: b["spec"].update(guard={"configMap": "golden"},
                                warmup={"readinessGate": False}),
     "guard needs warmup.readinessGate"),
    (lambda b: b["spec"].update(guard={"configMap": "golden", "minCosine": 1.5}),
     "spec.guard.minCosine"),
    (lambda b: b["spec"].update(guard={"configMap": "Golden Set"}), "spec.guard.configMap"),
    (lambda b: b["spec"].update(guard={"minCosine": 0.99}), "'configMap' is a required property"),
    (lambda b: b["spec"]["server"].update(compileCache={}), "exactly one of server.compileCache"),
    (lambda b: b["spec"]["server"].update(compileCache={
        "hostPath": {"path": "/c"}, "persistentVolumeClaim": {"claimName": "c"}}),
     "exactly one of server.compileCache"),
    (lambda b: b["spec"]["server"].update(compileCache={
        "persistentVolumeClaim": {"claimName": "c", "subPath": "a/../b"}}),
     "compileCache.persistentVolumeClaim.subPath must be a relative path"),
    # spec.networkPolicy
    (lambda b: b["spec"].update(networkPolicy={"gatewayFrom": []}),
     "leave the field out for the default"),
    (lambda b: b["spec"].update(networkPolicy={"metricsFrom": [{}]}),
     "either an ipBlock or pod/namespace selectors"),
    (lambda b: b["spec"].update(networkPolicy={"gatewayFrom": [
        {"ipBlock": {"cidr": "10.0.0.0/8"}, "namespaceSelector": {}}]}),
     "either an ipBlock or pod/namespace selectors"),
    (lambda b: b["spec"].update(networkPolicy={"gatewayFrom": [{"podSelector": {
        "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]}}]}),
     "In and NotIn need values"),
    (lambda b: b["spec"].update(networkPolicy={"gatewayFrom": [
        {"podSelector": {"matchLabels": {"bad key": "x"}}}]}),
     "matchLabels keys must be label keys"),
    (lambda b: b["spec"].update(networkPolicy={"gatewayFrom": [{"ipBlock": {"cidr": "any"}}]}),
     "spec.networkPolicy.gatewayFrom[0].ipBlock.cidr"),
    (lambda b: b["spec"].update(networkPolicy={"enabled": "yes"}),
     "spec.networkPolicy.enabled"),
    (lambda b: b["spec"].update(tls={"secretName": "Not A Secret"}), "spec.tls.secretName"),
    (lambda b: b["spec"].update(tls={}), "'secretName' is a required property"),
    # spec.model.huggingFace
    (lambda b: b["spec"]["model"].update(huggingFace={"id": "a/b", "revision": HF_COMMIT}),
     "model.huggingFace cannot be combined with model.path"),
    (lambda b: _fetched(b, revision="main"), "set huggingFace.allowMovingRevision: true"),
    (lambda b: _fetched(b, revision="v1..2"), "must not contain '..'"),
    (lambda b: _fetched(b, revision="-x"), "spec.model.huggingFace.revision"),
    (lambda b: _fetched(b, id="acme/a--b"), "must not contain '--'"),
    (lambda b: _fetched(b, id="acme/bad name"), "spec.model.huggingFace.id"),
    (lambda b: _fetched(b, allowPatterns=[]), "allowPatterns must not be empty"),
    (lambda b: _fetched(b, cache={"claimName": "hf", "subPath": "/abs"}),
     "cache.subPath must be a relative path"),
    (lambda b: _fetched(b, cache={"subPath": "m"}), "subPath needs huggingFace.cache.claimName"),
    (lambda b: _fetched(b, cache={"claimName": "Not A Claim"}), "claimName"),
    (lambda b: _fetched(b, cache={"sizeLimit": "-1Gi"}), "sizeLimit"),
    (lambda b: _fetched(b, tokenSecret={"key": "token"}), "'name' is a required property"),
    (lambda b: _fetched(b, endpoint="ftp://mirror"), "spec.model.huggingFace.endpoint"),
    (lambda b: b["spec"]["model"].update(huggingFace={"id": "a/b"}),
     "'revision' is a required property"),
    (lambda b: b["spec"]["gateway"].update(autoscaling={"minReplicas": 20}),
     "gateway.autoscaling.minReplicas must not exceed"),
    # spec.<component>.podTemplate
    (lambda b: _pods(b, labels={"app.kubernetes.io/instance": "other"}),
     "podTemplate.labels must not set app.kubernetes.io/name"),
    (lambda b: _pods(b, "server", annotations={"hedgerow.dev/config-hash": "x"}),
     "podTemplate.annotations must not use the prefixes hedgerow.dev/"),
    (lambda b: _pods(b, env=[{"name": "HEDGEROW_WORKERS", "value": "64"}]),
     "podTemplate.env must not set a variable the operator writes for the gateway"),
    (lambda b: _pods(b, "server", env=[{"name": "HEDGEROW_MAX_BATCH_TOKENS", "value": "1"}]),
     "podTemplate.env must not set a variable the operator writes for the server"),
    (lambda b: _pods(b, env=[{"name": "HOME", "value": "/"}]), "the operator writes"),
    (lambda b: _pods(b, env=[{"name": "A"}, {"name": "A", "value": "2"}]),
     "podTemplate.env names must be unique"),
    (lambda b: _pods(b, env=[{"name": "A", "value": "1", "valueFrom": {}}]),
     "value or valueFrom, not both"),
    (lambda b: _pods(b, resources={"limits": {"memory": "8Gi"}}),
     "memory is spec.gateway.memory"),
    (lambda b: _pods(b, "server", resources={"limits": {"nvidia.com/gpu": "2"}}),
     "GPUs spec.server.gpus"),
    (lambda b: _pods(b, resources={"requests": {"cpu": "8"}}),
     "podTemplate.resources.requests may set only ephemeral-storage"),
    (lambda b: _pods(b, resources={"limits": {"cpu": "-1"}}), "podTemplate.resources.limits"),
    (lambda b: _pods(b, livenessProbe={"exec": {"command": ["true"]}}), "livenessProbe"),
    (lambda b: _pods(b, securityContext={"runAsUser": 0}), "securityContext"),
    (lambda b: _pods(b, serviceAccountName="Not A Name"), "serviceAccountName"),
    (lambda b: _pods(b, imagePullSecrets=[{}]), "'name' is a required property"),
    (lambda b: (_pods(b, "server", priorityClassName="p"),
                b["spec"]["server"].update(priorityClassName="q")),
     "give server.priorityClassName or server.podTemplate.priorityClassName"),
])
def test_bad_specs_are_refused_naming_the_problem(mutate, fragment):
    with pytest.raises(Refused) as refused:
        admit(_body(mutate))
    assert fragment in str(refused.value)


def _server_refuses(spec: dict) -> bool:
    """Whether `hedgerow server` would stop at start on the env the operator writes for it."""
    env = knobs.env(knobs.SERVER, defaulted(spec)["server"])
    try:
        settings.load(ServerSettings, None, environ=env)
        settings.load(GpuSettings, None, environ=env).hot_set()
    except ConfigError:
        return True
    return False


GRIDS = [
    {"maxTokens": tokens, "hotSet": []} for tokens in (64, 100, 960, 1000, 1024, 1088, 1280, 8192)
] + [
    {"maxSeqs": 8, "seqBuckets": buckets}
    for buckets in ([1, 2, 8], [1, 8, 2], [1, 1, 8], [1, 4], [], [8])
] + [
    {"maxSeqs": 64},
    {"maxSeqs": 100},
    {"maxSeqs": 100, "seqBuckets": [1, 10, 100]},
    {"maxTokens": 256},
    {"maxTokens": 256, "hotSet": [{"sequences": 1, "tokens": 256}]},
    {"maxTokens": 1280, "hotSet": [{"sequences": 4, "tokens": 1100}]},
    {"maxSeqs": 8, "seqBuckets": [8], "hotSet": [{"sequences": 9, "tokens": 64}]},
    {"hotSet": [{"sequences": 8, "tokens": 7}]},
]


def _admits(body) -> bool:
    try:
        admit(body)
    except Refused:
        return False
    return True


@pytest.mark.parametrize("graphs", GRIDS, ids=str)
def test_the_graph_rules_refuse_what_the_server_refuses(graphs):
    body = _body(lambda b: b["spec"]["server"].update(graphs=graphs))
    assert _admits(body) != _server_refuses(body["spec"])


@pytest.mark.parametrize("request_tokens, inflight", [(100, 100), (101, 100), (16384, 65536)])
def test_the_server_limit_rule_is_the_servers_own(request_tokens, inflight):
    body = _body(lambda b: b["spec"]["server"].update(maxRequestTokens=request_tokens,
                                                      maxInflightTokens=inflight))
    body["spec"]["gateway"]["chunkTokens"] = 1
    assert _admits(body) != _server_refuses(body["spec"])


@pytest.mark.parametrize("rule", all_rules(crd.ROOT), ids=lambda r: r["message"][:40])
def test_every_cel_rule_compiles(rule):
    program(rule["rule"])
    assert rule["message"]


# cel-go (the API server's CEL) unescapes only these after a backslash in a string literal;
# cel-python is more lenient, so a rule it evaluates could still be refused by Kubernetes.
CEL_GO_ESCAPES = set("abfnrtv\\'\"`?xuU01234567")


@pytest.mark.parametrize("rule", all_rules(crd.ROOT), ids=lambda r: r["message"][:40])
def test_every_cel_rule_uses_only_escapes_the_api_server_accepts(rule):
    text = rule["rule"]
    escapes = [text[i + 1] for i, char in enumerate(text) if char == "\\" and i + 1 < len(text)]
    assert set(escapes) <= CEL_GO_ESCAPES, f"{text!r} escapes {set(escapes)}"
