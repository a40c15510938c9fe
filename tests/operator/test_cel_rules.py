"""Each cross-field rule is written twice, as CEL for the API server and as Python for the
operator. Here a real CEL evaluator (cel-python) runs every CEL expression on many defaulted
specs, valid and invalid, and must agree with the Python predicate on each; every rule is seen
both passing and failing. Kubernetes' list extension `isSorted()` is supplied as a function
(cel-python has the CEL standard library only)."""

import copy
from pathlib import Path

import celpy
import pytest
import yaml

from hedgerow.operator import crd
from hedgerow.operator.schema import Rule, apply_defaults

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "apiVersion": crd.API_VERSION, "kind": crd.KIND,
    "metadata": {"name": "emb", "namespace": "ml"},
    "spec": {"model": {"path": "/models/m", "persistentVolumeClaim": {"claimName": "c"}},
             "server": {"image": "s"}, "gateway": {"image": "g"}},
}

MUTATIONS = [
    lambda b: None,
    lambda b: b["spec"].update(autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 2}),
    lambda b: b["spec"].update(autoscaling={"minReplicas": 3, "maxReplicas": 3}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1280, "maxSeqs": 8,
                                                 "seqBuckets": [1, 2, 8]}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 100}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1088}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1024}),
    lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [4, 1, 8]}),
    lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [1, 1, 8]}),
    lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [1, 4]}),
    lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": []}),
    lambda b: b["spec"]["server"].update(graphs={"hotSet": [{"sequences": 1, "tokens": 128}]}),
    lambda b: b["spec"]["server"].update(graphs={"maxTokens": 512,
                                                 "hotSet": [{"sequences": 1, "tokens": 1024}]}),
    lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 2,
                                                 "hotSet": [{"sequences": 4, "tokens": 64}]}),
    lambda b: b["spec"]["server"].update(graphs={"hotSet": [{"sequences": 32, "tokens": 16}]}),
    lambda b: b["spec"]["server"].update(maxRequestTokens=100000),
    lambda b: b["spec"]["gateway"].update(chunkTokens=20000),
    lambda b: b["spec"]["model"].update(hostPath={"path": "/srv"}),
    lambda b: b["spec"]["model"].update(path="/elsewhere/m"),
    lambda b: b["spec"]["model"].update(path="/models"),
    lambda b: b["spec"]["model"].update(path="/modelsx/m"),
    lambda b: (b["spec"]["model"].pop("persistentVolumeClaim"),
               b["spec"]["model"].update(path="/anywhere")),
    lambda b: b["metadata"].update(name="x" * 41),
    lambda b: b["metadata"].update(name="9lives"),
    lambda b: b["metadata"].update(name="my.emb"),
    lambda b: b["metadata"].update(name="emb-"),
    lambda b: b["metadata"].update(name="a-1"),
    lambda b: b["spec"]["server"].update(tolerations=[{"effect": "NoSchedule"}]),
    lambda b: b["spec"]["server"].update(tolerations=[{"operator": "Exists"}]),
    lambda b: b["spec"]["server"].update(tolerations=[{"operator": "Exists", "value": "v"}]),
    lambda b: b["spec"]["gateway"].update(tolerations=[
        {"key": "k", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 5}]),
    lambda b: b["spec"]["gateway"].update(tolerations=[
        {"key": "k", "effect": "NoExecute", "tolerationSeconds": 5}]),
    lambda b: b["spec"]["model"].update(mountPath="/tmp", path="/tmp/m"),
    lambda b: b["spec"]["model"].update(mountPath="/dev/shm", path="/dev/shm/m"),
    lambda b: b["spec"]["model"]["persistentVolumeClaim"].update(subPath="/abs"),
    lambda b: b["spec"]["model"]["persistentVolumeClaim"].update(subPath="a/../b"),
    lambda b: b["spec"]["model"]["persistentVolumeClaim"].update(subPath="models/..x"),
    lambda b: b["spec"]["server"].update(nodeSelector={"nvidia.com/gpu.product": "H200",
                                                       "pool": "gpu"}),
    lambda b: b["spec"]["server"].update(nodeSelector={"gpu type": "h200"}),
    lambda b: b["spec"]["gateway"].update(nodeSelector={"example.com/": "x"}),
    lambda b: b["metadata"].update(name="emb-server"),
    lambda b: b["metadata"].update(name="search-gateway"),
    lambda b: b["metadata"].update(name="servers-gateways-1"),
]


def _bodies():
    bodies = []
    for mutate in MUTATIONS:
        body = copy.deepcopy(BASE)
        mutate(body)
        bodies.append(body)
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        bodies.append(yaml.safe_load(path.read_text()))
    return bodies


def _rules_on(node, value, path):
    """(path, rule, value) for every rule of every node present in `value`."""
    for rule in node.get("_rules", ()):
        yield path, rule, value
    if node.get("type") == "object" and isinstance(value, dict):
        for name, child in node.get("properties", {}).items():
            if name in value:
                yield from _rules_on(child, value[name], f"{path}.{name}")
    if node.get("type") == "array" and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _rules_on(node["items"], item, f"{path}[{index}]")


def _all_rules(node):
    found = list(node.get("_rules", ()))
    for child in node.get("properties", {}).values():
        found += _all_rules(child)
    if isinstance(node.get("items"), dict):
        found += _all_rules(node["items"])
    return found


def _is_sorted(items):
    return celpy.celtypes.BoolType(all(a <= b for a, b in zip(items, items[1:])))


ENV = celpy.Environment()


def _cel(rule: Rule, value) -> bool:
    program = ENV.program(ENV.compile(rule.cel), functions={"isSorted": _is_sorted})
    return bool(program.evaluate({"self": celpy.json_to_cel(value)}))


def test_cel_and_python_agree_on_every_rule():
    outcomes: dict[str, set[bool]] = {}
    for body in _bodies():
        defaulted = {**body, "spec": apply_defaults(crd.SPEC, body["spec"])}
        for path, rule, value in _rules_on(crd.ROOT, defaulted, "root"):
            python, cel = bool(rule.check(value)), _cel(rule, value)
            assert python == cel, f"{path}: {rule.cel!r}: Python {python}, CEL {cel} on {value!r}"
            outcomes.setdefault(rule.cel, set()).add(python)
    for rule in _all_rules(crd.ROOT):
        assert outcomes.get(rule.cel) == {True, False}, f"not exercised both ways: {rule.cel}"


@pytest.mark.parametrize("rule", _all_rules(crd.ROOT), ids=lambda r: r.reason)
def test_every_cel_rule_compiles(rule):
    ENV.compile(rule.cel)
    assert rule.message and rule.reason[0].isupper()


# cel-go (the API server's CEL) unescapes only these after a backslash in a string literal;
# cel-python is more lenient, so a rule it evaluates could still be refused by Kubernetes.
CEL_GO_ESCAPES = set("abfnrtv\\'\"`?xuU01234567")


@pytest.mark.parametrize("rule", _all_rules(crd.ROOT), ids=lambda r: r.reason)
def test_every_cel_rule_uses_only_escapes_the_api_server_accepts(rule):
    text = rule.cel
    escapes = [text[i + 1] for i, char in enumerate(text) if char == "\\" and i + 1 < len(text)]
    assert set(escapes) <= CEL_GO_ESCAPES, f"{rule.cel!r} escapes {set(escapes)}"
