"""The real kopf operator against kmock: what a cluster operator asks of the pods (sized gateway
workers, no service-account token, API-key rotation, pod-template overrides)."""

import copy

import pytest

from hedgerow import settings
from hedgerow.gateway_settings import GatewaySettings

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
