"""The operator's own spec checks: defaults applied, schema enforced, CEL rules in Python."""

import copy

import pytest

from hedgerow.operator.spec import SpecError, parse

GOOD = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "u", "generation": 3},
    "spec": {
        "model": {"path": "/models/m", "persistentVolumeClaim": {"claimName": "models"}},
        "server": {"image": "s:1"},
        "gateway": {"image": "g:1"},
    },
}


def _with(mutate):
    body = copy.deepcopy(GOOD)
    mutate(body)
    return body


def test_defaults_are_applied():
    service = parse(GOOD)
    assert service.generation == 3 and service.namespace == "ml"
    assert service.spec["server"]["maxBatchTokens"] == 16384
    assert service.spec["server"]["gpus"] == 1
    assert service.spec["autoscaling"]["enabled"] is False
    assert service.spec["warmup"]["readinessGate"] is True
    assert service.spec["model"]["mountPath"] == "/models"
    assert service.model_label == "/models/m"


@pytest.mark.parametrize("mutate, reason, fragment", [
    (lambda b: b["spec"]["server"].update(replicas=-1), "InvalidSpec",
     "spec.server.replicas: -1 is less than the minimum of 0"),
    (lambda b: b["spec"].update(autoscaling={"minReplicas": 5, "maxReplicas": 2}),
     "InvalidAutoscaling", "minReplicas must not exceed"),
    (lambda b: b["spec"]["gateway"].update(colour="blue"), "InvalidSpec", "colour"),
    (lambda b: b["spec"]["server"].update(graphs={"maxTokens": 100}), "InvalidBucketGrid",
     "multiple of 64 up to 1024"),
    (lambda b: b["spec"]["server"].update(graphs={"maxTokens": 1088}), "InvalidBucketGrid",
     "1024 plus a multiple of 256"),
    (lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [4, 1, 8]}),
     "InvalidBucketGrid", "strictly increasing"),
    (lambda b: b["spec"]["server"].update(graphs={"maxSeqs": 8, "seqBuckets": [1, 4]}),
     "InvalidBucketGrid", "must equal graphs.maxSeqs"),
    (lambda b: b["spec"]["model"].pop("path"), "InvalidSpec", "'path' is a required property"),
    (lambda b: b["spec"]["model"].update(path="models/m"), "InvalidSpec", "spec.model.path"),
    (lambda b: b["spec"]["model"].update(path="/elsewhere/m"), "InvalidModelPath",
     "under model.mountPath"),
    (lambda b: b["spec"]["model"].update(hostPath={"path": "/srv"}), "InvalidModelSource",
     "at most one"),
    (lambda b: b["spec"]["server"].update(
        graphs={"maxTokens": 512, "hotSet": [{"sequences": 1, "tokens": 1024}]}),
     "InvalidHotSet", "fit within graphs.maxTokens"),
    (lambda b: b["spec"]["server"].update(graphs={"hotSet": [{"sequences": 32, "tokens": 16}]}),
     "InvalidHotSet", "more sequences than tokens"),
    (lambda b: b["spec"]["gateway"].update(chunkTokens=20000), "InvalidChunking",
     "chunkTokens"),
    (lambda b: b["metadata"].update(name="x" * 41), "NameTooLong", "at most 40"),
    (lambda b: b["metadata"].update(name="9lives"), "InvalidName", "starting with a letter"),
    (lambda b: b["metadata"].update(name="my.emb"), "InvalidName", "must be a DNS label"),
    (lambda b: b["spec"]["server"].update(tolerations=[{"effect": "NoSchedule"}]),
     "InvalidToleration", "without a key must use operator Exists"),
    (lambda b: b["spec"]["server"].update(tolerations=[
        {"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]),
     "InvalidToleration", "only with effect NoExecute"),
    (lambda b: b["spec"]["server"].update(cpu="-4"), "InvalidSpec", "spec.server.cpu"),
    (lambda b: b["spec"]["server"].update(cpu=-4), "InvalidSpec", "spec.server.cpu"),
    (lambda b: b["spec"]["server"].update(gpuResource="memory"), "InvalidSpec",
     "spec.server.gpuResource"),
    (lambda b: b["spec"]["server"].update(gpus=2), "InvalidSpec", "maximum of 1"),
    (lambda b: b["spec"]["server"].update(nodeSelector={"a": "v" * 64}), "InvalidSpec",
     "spec.server.nodeSelector"),
    (lambda b: b["spec"]["model"].update(mountPath="/tmp", path="/tmp/m"), "InvalidModelPath",
     "already"),
    (lambda b: b["spec"]["model"]["persistentVolumeClaim"].update(subPath="../x"),
     "InvalidModelPath", "relative path without '..'"),
    (lambda b: b.update(spec="nope"), "InvalidSpec", "spec must be an object"),
])
def test_bad_specs_name_the_problem(mutate, reason, fragment):
    with pytest.raises(SpecError) as caught:
        parse(_with(mutate))
    assert caught.value.reason == reason
    assert fragment in caught.value.message


def test_graph_grid_on_the_grid_is_accepted():
    body = _with(lambda b: b["spec"]["server"].update(graphs={
        "maxTokens": 1280, "maxSeqs": 8, "seqBuckets": [1, 2, 8],
        "hotSet": [{"sequences": 1, "tokens": 64}, {"sequences": 8, "tokens": 1280}]}))
    graphs = parse(body).spec["server"]["graphs"]
    assert graphs["hotSet"][1]["tokens"] == 1280 and graphs["memoryLimitMiB"] == 8192


def test_globbed_namespaces_keep_kopfs_namespace_scanning_on():
    """With scanning off kopf keeps exact names only: `--namespaces ml-*` watched nothing."""
    from hedgerow.operator.registration import needs_namespace_scanning

    assert not needs_namespace_scanning(("ml", "search"))
    assert needs_namespace_scanning(("ml-*",)) and needs_namespace_scanning(("ml", "team-?"))
    assert needs_namespace_scanning(())
