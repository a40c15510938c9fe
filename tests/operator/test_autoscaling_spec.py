"""Bad `spec.autoscaling` values are refused by the CRD's validation, each with a message that
names the field, before anything is applied (the API server's side: tests/operator/
api_server.py runs the CRD's schema and CEL rules as the API server would)."""

import copy

import pytest

from tests.operator.api_server import Refused, admit

BASE = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml"},
    "spec": {"model": {"path": "/models/m"}, "server": {"image": "s"},
             "gateway": {"image": "g"}},
}
PROMETHEUS = "http://prometheus-operated.monitoring:9090"


def with_autoscaling(**fields) -> dict:
    body = copy.deepcopy(BASE)
    body["spec"]["autoscaling"] = {"enabled": True, **fields}
    return body


@pytest.mark.parametrize("fields, where, fragment", [
    ({"minReplicas": 5, "maxReplicas": 2}, "spec.autoscaling",
     "autoscaling.minReplicas must not exceed autoscaling.maxReplicas"),
    ({"targetTokensPerSecond": 0}, "spec.autoscaling.targetTokensPerSecond", "less than"),
    ({"targetTokensPerSecond": -400}, "spec.autoscaling.targetTokensPerSecond", "less than"),
    ({"minReplicas": 0}, "spec.autoscaling.minReplicas", "less than"),
    ({"engine": "argo"}, "spec.autoscaling.engine", "'hpa', 'keda'"),
    ({"signal": "cpu"}, "spec.autoscaling.signal", "'offered', 'served'"),
    ({"engine": "keda"}, "spec.autoscaling",
     "engine keda needs autoscaling.prometheusAddress"),
    ({"prometheusAddress": PROMETHEUS}, "spec.autoscaling",
     "prometheusAddress is for engine keda"),
    ({"engine": "keda", "prometheusAddress": PROMETHEUS, "metricName": "x"},
     "spec.autoscaling", "metricName names prometheus-adapter's metric"),
    ({"engine": "keda", "prometheusAddress": "prometheus:9090"},
     "spec.autoscaling.prometheusAddress", "does not match"),
    ({"metricName": "tokens per second"}, "spec.autoscaling.metricName", "does not match"),
    ({"scaleUpPercentPerMinute": 0}, "spec.autoscaling.scaleUpPercentPerMinute", "less than"),
])
def test_bad_autoscaling_is_refused_with_the_field_named(fields, where, fragment):
    with pytest.raises(Refused) as refused:
        admit(with_autoscaling(**fields))
    assert refused.value.path == where
    assert fragment in refused.value.message


@pytest.mark.parametrize("fields", [
    {},
    {"engine": "keda", "prometheusAddress": PROMETHEUS},
    {"engine": "keda", "prometheusAddress": "https://prom.example/api/prom", "signal": "served"},
    {"signal": "served", "metricName": "hedgerow_tokens_per_second"},
])
def test_good_autoscaling_is_admitted_with_its_defaults(fields):
    stored = admit(with_autoscaling(**fields))["spec"]["autoscaling"]
    assert stored["engine"] == fields.get("engine", "hpa")
    assert stored["signal"] == fields.get("signal", "offered")
    assert stored["scaleUpPercentPerMinute"] == 400
