"""engine keda: the ScaledObject the operator writes, held to KEDA's own published CRD schema
(vendored in tests/operator/keda/ with its source and version) and its CEL rule, and to the
HPA the operator would write for the same spec: same query, target, bounds and behavior."""

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from hedgerow.operator import build_keda, token_signals
from hedgerow.operator.build_scaling import build_hpa
from hedgerow.operator.manifests import build_all, keda_leftover, unwanted
from hedgerow.operator.spec import parse
from tests.operator.api_server import holds, rules_on, strict_json_schema

KEDA_CRD = yaml.safe_load((Path(__file__).parent / "keda" / "keda.sh_scaledobjects.yaml")
                          .read_text())
KEDA_SCHEMA = KEDA_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
VALIDATOR = jsonschema.Draft202012Validator(strict_json_schema(KEDA_SCHEMA))
# The trigger metadata KEDA's Prometheus scaler reads (pkg/scalers/prometheus_scaler.go at the
# same tag: prometheusMetadata's `keda:"name=..."` fields); the first three are required.
PROMETHEUS_METADATA = {"serverAddress", "query", "threshold", "queryParameters",
                       "activationThreshold", "namespace", "customHeaders", "ignoreNullValues",
                       "unsafeSsl", "awsRegion", "timeout", "identityOwner"}
PROMETHEUS = "http://prometheus-operated.monitoring:9090"

BODY = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "bge", "namespace": "ml", "uid": "u-7"},
    "spec": {"model": {"path": "/models/bge"}, "server": {"image": "s:1"},
             "gateway": {"image": "g:1"},
             "autoscaling": {"enabled": True, "engine": "keda", "minReplicas": 2,
                             "maxReplicas": 9, "targetTokensPerSecond": 480000,
                             "prometheusAddress": PROMETHEUS}},
}


def service(**autoscaling):
    body = copy.deepcopy(BODY)
    body["spec"]["autoscaling"].update(autoscaling)
    return parse(body)


def keda_valid(manifest: dict) -> None:
    VALIDATOR.validate(manifest)
    for path, rule, value in rules_on(KEDA_SCHEMA, manifest):
        assert holds(rule["rule"], value), f"{path}: {rule['message']}"


@pytest.mark.parametrize("signal", sorted(token_signals.SIGNALS))
def test_the_scaled_object_is_valid_under_kedas_schema(signal):
    children = build_all(service(signal=signal))
    scaled = [c for c in children if c["kind"] == build_keda.KIND]
    assert len(scaled) == 1 and scaled[0]["apiVersion"] == KEDA_CRD["spec"]["group"] + "/" + \
        KEDA_CRD["spec"]["versions"][0]["name"]
    keda_valid(scaled[0])
    assert not [c for c in children if c["kind"] == "HorizontalPodAutoscaler"]


def test_kedas_schema_refuses_what_keda_refuses():
    scaled = build_keda.build_scaled_object(service())
    broken = copy.deepcopy(scaled)
    broken["spec"]["minReplicaCount"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(broken)
    broken = copy.deepcopy(scaled)
    broken["spec"]["triggers"][0]["colour"] = "blue"
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(broken)
    broken = copy.deepcopy(scaled)
    broken["spec"]["minReplicaCount"], broken["spec"]["maxReplicaCount"] = 5, 3
    with pytest.raises(AssertionError, match="minReplicaCount must be less"):
        keda_valid(broken)


@pytest.mark.parametrize("signal", sorted(token_signals.SIGNALS))
def test_the_trigger_asks_what_the_hpa_would_read(signal):
    spec = service(signal=signal)
    scaled = build_keda.build_scaled_object(spec)["spec"]
    hpa = build_hpa(parse({**BODY, "spec": {**BODY["spec"], "autoscaling": {
        **BODY["spec"]["autoscaling"], "engine": "hpa", "signal": signal,
        "prometheusAddress": None}}}))["spec"]
    trigger = scaled["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert set(trigger["metadata"]) <= PROMETHEUS_METADATA
    assert {"serverAddress", "query", "threshold"} <= set(trigger["metadata"])
    assert trigger["metadata"]["serverAddress"] == PROMETHEUS
    # prometheus-adapter's query for the HPA's Object metric on the same Service.
    described = hpa["metrics"][0]["object"]["describedObject"]["name"]
    sent = token_signals.adapter_query(token_signals.METRICS_QUERY,
                                       token_signals.SIGNALS[signal].counter, "ml", "service",
                                       [described])
    assert trigger["metadata"]["query"] == sent
    assert float(trigger["metadata"]["threshold"]) == float(
        hpa["metrics"][0]["object"]["target"]["averageValue"]) == 480000
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (
        hpa["minReplicas"], hpa["maxReplicas"]) == (2, 9)
    assert scaled["advanced"]["horizontalPodAutoscalerConfig"] == {
        "name": "bge-server", "behavior": hpa["behavior"]}
    assert scaled["scaleTargetRef"] == hpa["scaleTargetRef"]


def test_keda_takes_the_hpa_over_and_leaving_keda_removes_the_scaled_object():
    keda = service()
    scaled = build_keda.build_scaled_object(keda)
    assert scaled["metadata"]["annotations"] == {build_keda.TRANSFER_HPA: "true"}
    # the server HPA of the same name is KEDA's now; only the (off) gateway HPA is unwanted
    assert [c.name for c in unwanted(keda)] == ["bge-gateway"]
    kedas_hpa = {"metadata": {"name": "bge-server", "ownerReferences": [
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "bge-server",
         "uid": "so-1", "controller": True}]}}
    ours = {"metadata": {"name": "bge-server", "ownerReferences": [
        {"apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService", "name": "bge",
         "uid": "u-7", "controller": True}]}}
    assert keda_leftover(keda, kedas_hpa) is None
    back = service(engine="hpa", prometheusAddress=None)
    leftover = keda_leftover(back, kedas_hpa)
    assert (leftover.api_version, leftover.kind, leftover.name) == (
        "keda.sh/v1alpha1", "ScaledObject", "bge-server")
    assert keda_leftover(back, ours) is None
    assert keda_leftover(back, None) is None
    off = service(enabled=False)
    assert keda_leftover(off, kedas_hpa) is not None
