"""A stored EmbeddingService as the builders read it: the CRD's defaults filled in."""

import copy

from hedgerow.operator.spec import parse

GOOD = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "u", "generation": 3},
    "spec": {
        "model": {"path": "/models/m", "persistentVolumeClaim": {"claimName": "models"}},
        "server": {"image": "s:1"},
        "gateway": {"image": "g:1"},
    },
}


def test_defaults_are_applied_where_fields_are_absent():
    service = parse(GOOD)
    assert service.generation == 3 and service.namespace == "ml" and service.uid == "u"
    assert service.spec["server"]["gpus"] == 1
    assert service.spec["server"]["graphs"]["maxSeqs"] == service.spec["server"]["maxBatchSeqs"]
    assert service.spec["autoscaling"]["enabled"] is False
    assert service.spec["warmup"]["readinessGate"] is True
    assert service.spec["model"]["mountPath"] == "/models"
    assert "templates" not in service.spec["gateway"]  # optional, no default: left out
    assert service.model_label == "/models/m"


def test_given_values_and_nested_defaults_inside_given_objects():
    body = copy.deepcopy(GOOD)
    body["spec"]["server"]["graphs"] = {"maxTokens": 1024, "hotSet": []}
    body["spec"]["server"]["tolerations"] = [{"key": "gpu"}]
    graphs = parse(body).spec["server"]["graphs"]
    assert graphs["maxTokens"] == 1024 and graphs["hotSet"] == []
    assert graphs["enabled"] is True and graphs["memoryLimitMiB"] == 8192
    assert parse(body).spec["server"]["tolerations"] == [{"key": "gpu", "operator": "Equal"}]
    assert body["spec"]["server"]["graphs"] == {"maxTokens": 1024, "hotSet": []}, "not mutated"


def test_globbed_namespaces_keep_kopfs_namespace_scanning_on():
    """With scanning off kopf keeps exact names only: `--namespaces ml-*` watched nothing."""
    from hedgerow.operator.registration import needs_namespace_scanning

    assert not needs_namespace_scanning(("ml", "search"))
    assert needs_namespace_scanning(("ml-*",)) and needs_namespace_scanning(("ml", "team-?"))
    assert needs_namespace_scanning(())
