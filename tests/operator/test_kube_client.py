"""The operator's API calls on the `kubernetes` package: kopf's credentials become the
package's configuration, and every call behaves against kmock as the handlers expect (kmock
answers an apply on a missing object with 404, ignores label selectors, and merges a
strategic-merge patch as a plain merge)."""

import base64
from pathlib import Path

import kopf
import pytest

from hedgerow.operator.kube import ApiError, KubeClient, configuration


def test_a_token_and_a_ca_from_kopfs_connection_info(tmp_path):
    info = kopf.ConnectionInfo(server="https://k:6443/", token="t",
                               ca_data=base64.b64encode(b"PEM").decode())
    config = configuration(info, tmp_path)
    assert config.host == "https://k:6443"
    assert config.api_key == {"authorization": "Bearer t"}
    assert config.verify_ssl and Path(config.ssl_ca_cert).read_bytes() == b"PEM"
    assert config.cert_file is None and config.key_file is None


def test_basic_auth_client_certificates_and_insecure(tmp_path):
    info = kopf.ConnectionInfo(server="https://k", insecure=True, username="u", password="p",
                               certificate_path="/c.pem", private_key_data=b"KEY")
    config = configuration(info, tmp_path)
    assert not config.verify_ssl
    assert config.api_key == {"authorization": "Basic " + base64.b64encode(b"u:p").decode()}
    assert config.cert_file == "/c.pem" and Path(config.key_file).read_bytes() == b"KEY"


@pytest.mark.asyncio
async def test_calls_before_login_fail_clearly():
    with pytest.raises(ApiError, match="not connected"):
        await KubeClient().get("v1", "Pod", "ml", "p")


CONFIG = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "c", "namespace": "ml", "labels": {"app": "a"}},
          "data": {"k": "1"}}


@pytest.mark.asyncio
async def test_every_call_against_the_emulated_api(kube_api):
    kube = KubeClient()
    kube.connect(kopf.ConnectionInfo(server=str(kube_api.kmock.url), token="t"))
    try:
        assert await kube.get("v1", "ConfigMap", "ml", "c") is None
        created = await kube.apply(CONFIG)  # 404 on the apply, then created
        assert created["data"] == {"k": "1"}
        await kube.apply({**CONFIG, "data": {"k": "2"}})
        assert (await kube.get("v1", "ConfigMap", "ml", "c"))["data"] == {"k": "2"}
        other = {**CONFIG, "metadata": {"name": "d", "namespace": "ml",
                                        "labels": {"app": "b"}}}
        await kube.apply(other)
        found = await kube.list("v1", "ConfigMap", "ml", {"app": "a"})
        assert [item["metadata"]["name"] for item in found] == ["c"]
        assert await kube.delete("v1", "ConfigMap", "ml", "c") is True
        assert await kube.delete("v1", "ConfigMap", "ml", "c") is False
        await kube_api.post("/api/v1/namespaces/ml/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", "resourceVersion": "1"},
            "spec": {"containers": [{"name": "x", "image": "x"}]}})
        patched = await kube.patch_pod_status(
            "ml", "p", {"status": {"conditions": [{"type": "T", "status": "True"}]}})
        assert patched["status"]["conditions"] == [{"type": "T", "status": "True"}]
        with pytest.raises(ApiError, match="does not serve Widget"):
            await kube.get("example.com/v1", "Widget", "ml", "w")
    finally:
        kube.close()
    ours = {r.headers.get("User-Agent") for r in kube_api.kmock.journal
            if r.method.value != "POST" or r.resource.plural != "pods"}
    assert ours == {"hedgerow-operator"}, "the RBAC test tells the operator's requests by it"
