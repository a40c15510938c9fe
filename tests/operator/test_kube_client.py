"""The small API client's pure parts: URL paths and TLS settings from kopf's ConnectionInfo.
(Its HTTP calls run against kmock in test_operator_kmock.py.)"""

import ssl

import kopf
import pytest

from hedgerow.operator.kube import ApiError, KubeClient, collection_path, object_path, ssl_context


def test_paths_for_core_and_group_kinds():
    assert collection_path("v1", "ConfigMap", "ml") == "/api/v1/namespaces/ml/configmaps"
    assert object_path("apps/v1", "Deployment", "ml", "emb-server") == \
        "/apis/apps/v1/namespaces/ml/deployments/emb-server"
    assert object_path("autoscaling/v2", "HorizontalPodAutoscaler", "ml", "x") == \
        "/apis/autoscaling/v2/namespaces/ml/horizontalpodautoscalers/x"


def test_tls_settings(tmp_path):
    assert ssl_context(kopf.ConnectionInfo(server="http://127.0.0.1:1"), tmp_path) is False
    insecure = ssl_context(kopf.ConnectionInfo(server="https://k", insecure=True), tmp_path)
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname
    default = ssl_context(kopf.ConnectionInfo(server="https://k"), tmp_path)
    assert default.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.asyncio
async def test_calls_before_login_fail_clearly():
    client = KubeClient()
    with pytest.raises(ApiError, match="not connected"):
        await client.get("v1", "Pod", "ml", "p")
