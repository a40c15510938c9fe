"""Pod-level fields of the server and gateway Deployments a cluster operator relies on: no
service-account token in pods that never call the API, the API-key Secret's digest in the
gateway template, and the spec's pod-template overrides merged onto the builders' output
(every result validated against the real Kubernetes schemas)."""

import copy

import kubernetes_validate
import pytest

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
