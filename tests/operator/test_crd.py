"""The CRD: structurally valid, a valid apiextensions object, and the examples validate against
its schema. (The chart's copy is checked current by tests/test_generated.py.)"""

from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from hedgerow.operator import crd
from tests.operator.api_server import admit, strict_json_schema

ROOT = Path(__file__).resolve().parents[2]
CHART_CRD = ROOT / "charts" / "hedgerow" / "crds" / crd.CRD_FILE
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
K8S_VERSION = "1.33.0"


def test_crd_validates_as_an_apiextensions_object():
    kubernetes_validate.validate(yaml.safe_load(CHART_CRD.read_text()), K8S_VERSION, strict=True)


def _walk(node, path="root"):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _walk(node[key], f"{path}.{key}")


def test_schema_is_structural():
    for path, node in _walk(crd.ROOT):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "maxItems" in node or path.endswith("conditions"), \
                f"{path}: CEL cost estimation needs maxItems"


def test_names_columns_and_status_subresource():
    version = crd.build_crd()["spec"]["versions"][0]
    assert crd.build_crd()["spec"]["names"]["shortNames"] == ["embsvc"]
    assert version["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.server.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == \
        ["Model", "Ready", "Replicas", "Warm", "Space", "URL", "Age"]


def test_the_scale_subresource_points_at_integer_and_string_fields():
    scale = crd.build_crd()["spec"]["versions"][0]["subresources"]["scale"]
    kinds = {"specReplicasPath": "integer", "statusReplicasPath": "integer",
             "labelSelectorPath": "string"}
    for key, kind in kinds.items():
        node = crd.ROOT
        for part in scale[key].strip(".").split("."):
            node = node["properties"][part]
        assert node["type"] == kind, key


def test_cross_field_rules_are_rendered_as_cel():
    schema = crd.ROOT
    spec = schema["properties"]["spec"]
    rules = [r["rule"] for r in spec["properties"]["autoscaling"]["x-kubernetes-validations"]]
    assert "self.minReplicas <= self.maxReplicas" in rules
    graphs = spec["properties"]["server"]["properties"]["graphs"]
    assert len(graphs["x-kubernetes-validations"]) == 4
    assert schema["x-kubernetes-validations"], "name rules on the root"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_the_crd_schema(path):
    body = yaml.safe_load(path.read_text())
    strict = strict_json_schema(crd.ROOT)
    jsonschema.Draft202012Validator(strict).validate(body)
    assert body["apiVersion"] == crd.API_VERSION and body["kind"] == crd.KIND
    admit(body)  # and defaulted, the CEL rules hold


def test_examples_cover_bge_m3_and_qwen3():
    models = [yaml.safe_load(p.read_text())["spec"]["model"] for p in EXAMPLES]
    ids = {model.get("huggingFaceId") or model["huggingFace"]["id"] for model in models}
    assert {"BAAI/bge-m3", "Qwen/Qwen3-Embedding-0.6B"} <= ids
    assert any(set(model) == {"huggingFace"} and set(model["huggingFace"]) == {"id", "revision"}
               for model in models), "an example fetches a model given only its id and revision"


def test_strict_schema_rejects_unknown_fields():
    body = yaml.safe_load(EXAMPLES[0].read_text())
    body["spec"]["server"]["replicaz"] = 3
    strict = strict_json_schema(crd.ROOT)
    with pytest.raises(jsonschema.ValidationError, match="replicaz"):
        jsonschema.Draft202012Validator(strict).validate(body)


@pytest.mark.parametrize("mutate, field", [
    (lambda s: s["model"].update(persistentVolumeClaim={"claimName": "My_Claim"}),
     "claimName"),
    (lambda s: s["server"].update(priorityClassName="High Priority"), "priorityClassName"),
    (lambda s: s["gateway"].update(apiKeySecret={"name": "keys", "key": "a key"}), "key"),
    (lambda s: s["gateway"].update(apiKeySecret={"name": "Keys!"}), "name"),
    (lambda s: s["server"].update(tolerations=[{"key": "gpu type", "operator": "Exists"}]),
     "key"),
    (lambda s: s["server"].update(nodeSelector={"gpu": "h200 sxm"}), "nodeSelector"),
])
def test_names_the_api_server_would_refuse_are_refused_by_the_schema(mutate, field):
    """Each would pass on to a child the API server refuses (HTTP 422) half-way through."""
    body = yaml.safe_load(EXAMPLES[0].read_text())
    body["spec"]["model"].pop("persistentVolumeClaim", None)
    body["spec"]["model"].pop("hostPath", None)
    mutate(body["spec"])
    strict = strict_json_schema(crd.ROOT)
    with pytest.raises(jsonschema.ValidationError) as raised:
        jsonschema.Draft202012Validator(strict).validate(body)
    assert field in "/".join(str(p) for p in raised.value.absolute_path) + raised.value.message


@pytest.mark.parametrize("value, valid", [("auto", True), ("off", True), ("3", True),
                                          ("cpu3", False), ("", False), ("-1", False)])
def test_host_cpu_takes_auto_off_or_a_cpu_number(value, valid):
    body = yaml.safe_load(EXAMPLES[0].read_text())
    body["spec"]["server"]["hostCpu"] = value
    validator = jsonschema.Draft202012Validator(strict_json_schema(crd.ROOT))
    if valid:
        validator.validate(body)
    else:
        with pytest.raises(jsonschema.ValidationError, match="does not match"):
            validator.validate(body)
