"""The real kopf operator against kmock: what a cluster operator asks of the pods (sized gateway
workers, no service-account token, API-key rotation, pod-template overrides)."""

import base64
import copy

import kubernetes_validate
import pytest

from hedgerow import settings
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.operator import api_keys, names
from tests.operator.test_pod_template import FULL, K8S_VERSIONS

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


def _spec(cluster, **gateway):
    spec = copy.deepcopy(cluster.resource("emb")["spec"])
    spec["gateway"].update(gateway)
    return spec


async def _child(cluster, api_version, plural, name):
    return await cluster.get(cluster.child_path(api_version, plural, name))


async def test_gateway_workers_equal_the_cpu_request(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb", _spec(cluster, cpu="3")))
    deployment = await cluster.eventually(
        lambda: _child(cluster, "apps/v1", "deployments", "emb-gateway"), "gateway Deployment")
    config = await _child(cluster, "v1", "configmaps", "emb-gateway")
    workers = settings.load(GatewaySettings, None, environ=config["data"]).workers
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "3" and workers == 3
    assert resources["limits"]["memory"] == resources["requests"]["memory"] == "512Mi"


def _keys_secret(cluster, keys: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "keys", "namespace": cluster.namespace, "resourceVersion": "1"},
            "data": {"api-keys": base64.b64encode(keys.encode()).decode()}}


async def _keys_hash(cluster):
    deployment = await _child(cluster, "apps/v1", "deployments", "emb-gateway")
    if deployment is None:
        return None
    return deployment["spec"]["template"]["metadata"]["annotations"].get(
        names.API_KEYS_HASH_ANNOTATION)


async def test_rotating_the_api_key_secret_changes_the_gateway_template(cluster):
    secrets = f"/api/v1/namespaces/{cluster.namespace}/secrets"
    await cluster.post(secrets, _keys_secret(cluster, "old-key\n"))
    await cluster.post(cluster.cr_path, cluster.resource(
        "emb", _spec(cluster, apiKeySecret={"name": "keys"})))
    first = await cluster.eventually(lambda: _keys_hash(cluster), "the API keys' digest")

    await cluster.patch(f"{secrets}/keys", {"data": _keys_secret(cluster, "new-key\n")["data"]})

    async def rolled():
        found = await _keys_hash(cluster)
        return found if found not in (None, first) else None

    second = await cluster.eventually(rolled, "a new digest after the rotation")
    assert len(first) == len(second) == 16
    config = await _child(cluster, "v1", "configmaps", "emb-gateway")
    assert config["data"]["HEDGEROW_API_KEYS_FILE"] == "/etc/hedgerow/api-keys/api-keys"


async def test_a_missing_api_key_secret_is_reported_and_nothing_is_built(cluster):
    await cluster.post(cluster.cr_path, cluster.resource(
        "emb", _spec(cluster, apiKeySecret={"name": "absent"})))

    async def reported():
        body = await cluster.get(f"{cluster.cr_path}/emb")
        return next((c for c in (body.get("status") or {}).get("conditions", [])
                     if c["type"] == "Ready" and c["reason"] == api_keys.SECRET_MISSING), None)

    ready = await cluster.eventually(reported, "Ready=False, ApiKeySecretNotFound")
    assert "'absent'" in ready["message"]
    assert await _child(cluster, "apps/v1", "deployments", "emb-gateway") is None


async def test_pod_template_overrides_reach_the_applied_deployments(cluster):
    spec = copy.deepcopy(cluster.resource("emb")["spec"])
    for component in ("server", "gateway"):
        spec[component]["podTemplate"] = copy.deepcopy(FULL)
    await cluster.post(cluster.cr_path, cluster.resource("emb", spec))
    for component in ("server", "gateway"):
        deployment = await cluster.eventually(
            lambda: _child(cluster, "apps/v1", "deployments", f"emb-{component}"),
            f"{component} Deployment")
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(deployment, version, strict=True)
        template = deployment["spec"]["template"]
        pod, container = template["spec"], template["spec"]["containers"][0]
        assert template["metadata"]["labels"]["team"] == "search"
        assert template["metadata"]["annotations"]["example.com/owner"] == "ml"
        assert pod["automountServiceAccountToken"] is False
        for field in ("imagePullSecrets", "serviceAccountName", "priorityClassName",
                      "affinity", "topologySpreadConstraints"):
            assert pod[field] == FULL[field], field
        assert container["env"][-len(FULL["env"]):] == FULL["env"]
        assert container["envFrom"][:len(FULL["envFrom"])] == FULL["envFrom"]
        assert container["resources"]["limits"]["cpu"] == "8"
        assert container["resources"]["requests"]["ephemeral-storage"] == "1Gi"


async def test_status_has_the_url_and_the_server_selector(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))

    async def addressed():
        body = await cluster.get(f"{cluster.cr_path}/emb")
        return body if (body.get("status") or {}).get("url") else None

    body = await cluster.eventually(addressed, "status.url")
    assert body["status"]["url"] == f"http://emb.{cluster.namespace}.svc:8080"
    server = await cluster.eventually(
        lambda: _child(cluster, "apps/v1", "deployments", "emb-server"), "server Deployment")
    labels = dict(pair.split("=") for pair in body["status"]["selector"].split(","))
    assert labels == server["spec"]["selector"]["matchLabels"]


async def test_gateway_autoscaling_adds_a_cpu_hpa_and_removes_it_when_off(cluster):
    hpa_path = cluster.child_path("autoscaling/v2", "horizontalpodautoscalers", "emb-gateway")
    spec = _spec(cluster, autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 6})
    await cluster.post(cluster.cr_path, cluster.resource("emb", spec))
    hpa = await cluster.eventually(lambda: cluster.get(hpa_path), "the gateway HPA")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    deployment = await _child(cluster, "apps/v1", "deployments", "emb-gateway")
    assert "replicas" not in deployment["spec"]

    spec["gateway"]["autoscaling"]["enabled"] = False
    await cluster.patch(f"{cluster.cr_path}/emb", {"metadata": {"generation": 2}, "spec": spec})

    async def gone():
        return await cluster.get(hpa_path) is None

    await cluster.eventually(gone, "the gateway HPA deleted")
    deployment = await _child(cluster, "apps/v1", "deployments", "emb-gateway")
    assert deployment["spec"]["replicas"] == spec["gateway"]["replicas"]
