"""The chart's RBAC is exactly what the operator uses: every API request the real operator
makes in a run against kmock is allowed by the rendered ClusterRole, and every permission the
ClusterRole grants was used (least privilege)."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hedgerow.operator import names
from tests.operator.conftest import warmup_body

ROOT = Path(__file__).resolve().parents[2]
HELM = Path(sys.executable).parent / "helm"
OPERATOR_AGENTS = ("kopf/", names.FIELD_MANAGER)
VERBS = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}

pytestmark = [pytest.mark.asyncio, pytest.mark.slow,
              pytest.mark.skipif(not HELM.exists(), reason="helm not installed: make setup")]


def granted() -> set[tuple[str, str, str]]:
    out = subprocess.run([str(HELM), "template", "h", str(ROOT / "charts" / "hedgerow")],
                         capture_output=True, text=True, check=True).stdout
    role = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "ClusterRole")
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def used(kmock) -> set[tuple[str, str, str]]:
    out = set()
    for request in kmock.journal:
        agent = request.headers.get("User-Agent", "")
        if not agent.startswith(OPERATOR_AGENTS) or request.resource is None:
            continue
        if request.resource.plural is None:
            continue  # discovery (/api, /apis/<group>/<version>): open to every identity
        resource = request.resource.plural
        if request.subresource:
            resource += f"/{request.subresource}"
        if request.method.value == "GET":
            verb = "get" if request.name else (
                "watch" if request.params.get("watch") in ("true", "1") else "list")
        else:
            verb = VERBS[request.method.value]
        out.add((request.resource.group, resource, verb))
    return out


async def _gate_true(cluster, pod):
    body = await cluster.get(cluster.child_path("v1", "pods", pod))
    return any(c["type"] == names.GATE_CONDITION and c["status"] == "True"
               for c in body.get("status", {}).get("conditions", []))


async def _condition_reason(cluster, name, reason):
    body = await cluster.get(f"{cluster.cr_path}/{name}")
    return any(c.get("reason") == reason for c in body.get("status", {}).get("conditions", []))


async def test_rbac_matches_what_the_operator_does(cluster, kmock):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    hpa = cluster.child_path("autoscaling/v2", "horizontalpodautoscalers", "emb-server")
    await cluster.eventually(lambda: cluster.get(hpa), "the HPA")
    cluster.warmup.report = warmup_body(loaded=True, hot_set=1, hot_set_captured=1)
    await cluster.post(f"/api/v1/namespaces/{cluster.namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "emb-server-a", "namespace": cluster.namespace,
                     "resourceVersion": "1",
                     "labels": {names.LABEL_NAME: "hedgerow", names.LABEL_INSTANCE: "emb",
                                names.LABEL_COMPONENT: "server"}},
        "spec": {"containers": [{"name": "server", "image": "x"}]},
        "status": {"podIP": "127.0.0.1", "containerStatuses": [
            {"name": "server", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
    })
    await cluster.eventually(lambda: _gate_true(cluster, "emb-server-a"), "gate True")
    spec = cluster.resource("emb")["spec"]
    spec["autoscaling"]["enabled"] = False
    spec["networkPolicy"] = {"enabled": False}
    await cluster.patch(f"{cluster.cr_path}/emb", {"spec": spec})
    policy = cluster.child_path("networking.k8s.io/v1", "networkpolicies", "emb-server")

    async def hpa_gone():
        return await cluster.get(hpa) is None and await cluster.get(policy) is None

    await cluster.eventually(hpa_gone, "the HPA and the NetworkPolicies deleted")
    keys = cluster.resource("keys")
    keys["spec"]["gateway"]["apiKeySecret"] = {"name": "absent"}
    await cluster.post(cluster.cr_path, keys)
    await cluster.eventually(lambda: _condition_reason(cluster, "keys", "ApiKeySecretNotFound"),
                             "ApiKeySecretNotFound")
    bad = cluster.resource("pvc")
    bad["spec"]["model"] = {"path": "/models/m", "persistentVolumeClaim": {"claimName": "x"}}
    await cluster.post(cluster.cr_path, bad)
    await cluster.eventually(lambda: _condition_reason(cluster, "pvc", "ModelVolumeNotFound"),
                             "ModelVolumeNotFound")
    secured = cluster.resource("tls")
    secured["spec"]["tls"] = {"secretName": "tls-certs"}
    await cluster.post(cluster.cr_path, secured)
    await cluster.eventually(lambda: _condition_reason(cluster, "tls", "TLSSecretNotFound"),
                             "TLSSecretNotFound")

    allowed, made = granted(), used(kmock)
    assert made - allowed == set(), "requests the chart's RBAC would forbid"
    assert allowed - made - FOR_OWNER_REFERENCES - KEDA - PEERING == set(), \
        "permissions the operator never used"


# Used by the operator's replicas to share kopf's peering object; this run is one standalone
# operator, tests/operator/test_operator_peering.py runs two and checks these were used.
PEERING = {("kopf.dev", "clusterkopfpeerings", verb) for verb in ("list", "watch", "patch")}


# Used only with spec.autoscaling.engine keda, which this run does not exercise (kmock serves
# no KEDA CRD here; tests/operator/test_keda.py checks the ScaledObject against KEDA's schema).
KEDA = {("keda.sh", "scaledobjects", verb) for verb in ("get", "create", "patch", "delete")}


# Not requests the operator makes: the OwnerReferencesPermissionEnforcement admission plugin
# (on in OpenShift; kmock has no admission) requires them of whoever sets ownerReferences with
# blockOwnerDeletion, as every child here is created.
FOR_OWNER_REFERENCES = {("hedgerow.dev", "embeddingservices/finalizers", "update")} | {
    (group, plural, "delete") for group, plural in (
        ("", "configmaps"), ("", "services"), ("apps", "deployments"),
        ("policy", "poddisruptionbudgets"))}
