"""spec.model.huggingFace with the real kopf operator against kmock: the cache PVC must exist,
every pod gets the fetch init container, and the pods' init-container states (written here, as
the kubelet would) become the ModelFetched condition and the commit in status.model."""

import copy
import json

import kubernetes_validate
import pytest

from hedgerow.operator import build_fetch

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

REPO = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
SPEC = {
    "model": {"huggingFace": {"id": REPO, "revision": "v1", "cache": {"claimName": "hf"}}},
    "server": {"image": "registry.example/hedgerow-server:1", "replicas": 1, "gpus": 0,
               "cpu": "2", "memory": "2Gi"},
    "gateway": {"image": "registry.example/hedgerow-gateway:1", "replicas": 1},
}


async def _condition(cluster, kind, reason=None):
    body = await cluster.get(f"{cluster.cr_path}/emb")
    for cond in (body or {}).get("status", {}).get("conditions", []):
        if cond["type"] == kind and (reason is None or cond["reason"] == reason):
            return cond
    return None


def _pod(deployment: dict, name: str, init_status: dict | None) -> dict:
    """A pod of `deployment`'s template, with the fetch container's status `init_status`."""
    template = copy.deepcopy(deployment["spec"]["template"])
    status = {"initContainerStatuses": [{"name": build_fetch.FETCH_CONTAINER,
                                         "restartCount": 0, "ready": False, **init_status}]} \
        if init_status is not None else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1",
                         "labels": template["metadata"]["labels"]},
            "spec": template["spec"], "status": status}


async def test_fetch_states_become_model_fetched_and_the_commit_status_model(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb", SPEC))
    missing = await cluster.eventually(
        lambda: _condition(cluster, "Ready", "ModelVolumeNotFound"), "the cache PVC missing")
    assert "spec.model.huggingFace.cache.claimName" in missing["message"]

    await cluster.post("/api/v1/namespaces/ml/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "hf", "namespace": "ml", "resourceVersion": "1"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "50Gi"}}}})
    deployments = {}
    for component in ("server", "gateway"):
        deployments[component] = await cluster.eventually(
            lambda: cluster.get(cluster.child_path("apps/v1", "deployments", f"emb-{component}")),
            f"the {component} Deployment")
        kubernetes_validate.validate(deployments[component], "1.33.0", strict=True)
        (init,) = deployments[component]["spec"]["template"]["spec"]["initContainers"]
        assert init["name"] == build_fetch.FETCH_CONTAINER
    pending = await cluster.eventually(lambda: _condition(cluster, "ModelFetched"),
                                       "ModelFetched")
    assert pending["status"] == "Unknown" and pending["reason"] == "Pending"
    body = await cluster.get(f"{cluster.cr_path}/emb")
    assert body["status"]["model"] == f"{REPO}@v1"  # the commit is not known yet

    pods = "/api/v1/namespaces/ml/pods"
    await cluster.post(pods, _pod(deployments["server"], "emb-server-a",
                                  {"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}))
    await cluster.post(pods, _pod(deployments["gateway"], "emb-gateway-a",
                                  {"state": {"waiting": {"reason": "PodInitializing"}}}))
    async def downloading_both():
        # the operator may count the first pod before the second exists ("0 of 1 pods")
        cond = await _condition(cluster, "ModelFetched", "Downloading")
        return cond if cond and "of 2 pods" in cond["message"] else None

    downloading = await cluster.eventually(downloading_both, "ModelFetched Downloading, 2 pods")
    assert downloading["status"] == "False" and "0 of 2 pods" in downloading["message"]

    done = {"exitCode": 0, "reason": "Completed", "message": json.dumps({
        "ok": True, "repo": REPO, "revision": "v1", "commit": COMMIT, "downloaded": True})}
    for pod in ("emb-server-a", "emb-gateway-a"):
        await cluster.patch(cluster.child_path("v1", "pods", pod), {"status": {
            "initContainerStatuses": [{"name": build_fetch.FETCH_CONTAINER, "ready": True,
                                       "restartCount": 0, "state": {"terminated": done}}]}})
    verified = await cluster.eventually(
        lambda: _condition(cluster, "ModelFetched", "Verified"), "ModelFetched Verified")
    assert verified["status"] == "True" and COMMIT in verified["message"]
    body = await cluster.get(f"{cluster.cr_path}/emb")
    assert body["status"]["model"] == f"{REPO}@{COMMIT}"

    # A new pod whose fetch fails, retried by the kubelet: Failed, with the fetch's message.
    error = "model.safetensors: sha256 0f0f, the hub lists abab: the download is corrupt"
    failed = {"exitCode": 2, "reason": "Error",
              "message": json.dumps({"ok": False, "repo": REPO, "error": error})}
    await cluster.post(pods, _pod(deployments["server"], "emb-server-b", {
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
        "lastState": {"terminated": failed}, "restartCount": 1}))
    # A pod of another revision (a rollout's old ReplicaSet) does not count.
    old = copy.deepcopy(deployments["server"])
    for env in old["spec"]["template"]["spec"]["initContainers"][0]["env"]:
        if env["name"] == "HEDGEROW_REVISION":
            env["value"] = "v0"
    await cluster.post(pods, _pod(old, "emb-server-old", {"state": {"terminated": failed}}))
    cond = await cluster.eventually(
        lambda: _condition(cluster, "ModelFetched", "Failed"), "ModelFetched Failed")
    assert cond["status"] == "False"
    assert cond["message"] == (f"1 of 3 pods could not fetch {REPO} at 'v1'; pod emb-server-b: "
                               f"{error}")
