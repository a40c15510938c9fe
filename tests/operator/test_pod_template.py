"""Pod-level fields of the server and gateway Deployments a cluster operator relies on: no
service-account token in pods that never call the API, the API-key Secret's digest in the
gateway template, and the spec's pod-template overrides merged onto the builders' output
(every result validated against the real Kubernetes schemas)."""

import copy

import kubernetes_validate
import pytest

from hedgerow.operator import api_keys, names
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
