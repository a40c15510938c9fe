"""The real kopf operator against kmock: children, updates, warmup gates, drift, bad specs.

kmock emulates the Kubernetes API (no controllers, no garbage collection): pods and Deployment
status are written by the test, as the kubelet and the Deployment controller would.
"""

import asyncio
import copy
import datetime
import types
from pathlib import Path

import aiohttp
import kopf
import kubernetes_validate
import pytest
import yaml
from aiohttp import web

from hedgerow.operator import handlers, names, spec, status, warmup
from hedgerow.operator.kube import KubeClient
from tests.operator.conftest import warmup_body

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

CHILDREN = [
    ("v1", "configmaps", "emb-server"),
    ("v1", "configmaps", "emb-gateway"),
    ("v1", "services", "emb-server"),
    ("v1", "services", "emb"),
    ("apps/v1", "deployments", "emb-server"),
    ("apps/v1", "deployments", "emb-gateway"),
    ("policy/v1", "poddisruptionbudgets", "emb-server"),
    ("policy/v1", "poddisruptionbudgets", "emb-gateway"),
    ("autoscaling/v2", "horizontalpodautoscalers", "emb-server"),
]


async def _all_children(cluster):
    found = {}
    for api_version, plural, name in CHILDREN:
        obj = await cluster.get(cluster.child_path(api_version, plural, name))
        if obj is None:
            return None
        found[(plural, name)] = obj
    return found


async def _condition(cluster, name, kind):
    body = await cluster.get(f"{cluster.cr_path}/{name}")
    for cond in (body or {}).get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return cond
    return None


async def test_create_builds_every_child_with_owner_reference(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    children = await cluster.eventually(lambda: _all_children(cluster), "every child")
    for obj in children.values():
        owner = obj["metadata"]["ownerReferences"][0]
        assert owner["uid"] == "uid-emb" and owner["kind"] == "EmbeddingService"
        assert owner["controller"] is True
        assert obj["metadata"]["labels"][names.LABEL_MANAGED_BY] == "hedgerow-operator"

    server = children[("deployments", "emb-server")]
    assert "replicas" not in server["spec"], "the HPA owns the server replica count"
    pod = server["spec"]["template"]["spec"]
    assert pod["readinessGates"] == [{"conditionType": "hedgerow.dev/graphs-warm"}]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["containers"][0]["readinessProbe"]["grpc"]["port"] == 50051
    # A failed engine answers /livez 503: restarted after 3 failed probes 10 s apart.
    assert pod["containers"][0]["livenessProbe"] == {
        "httpGet": {"path": "/livez", "port": 9090}, "periodSeconds": 10, "timeoutSeconds": 5,
        "failureThreshold": 3}
    hpa = children[("horizontalpodautoscalers", "emb-server")]
    assert hpa["spec"]["metrics"][0]["object"]["target"]["averageValue"] == "50000"
    assert children[("services", "emb-server")]["spec"]["clusterIP"] == "None"
    assert children[("configmaps", "emb-gateway")]["data"]["HEDGEROW_SERVICE_DNS"] == \
        "emb-server.ml.svc:50051"

    body = await cluster.eventually(lambda: _generation(cluster, "emb", 1),
                                    "observedGeneration 1")
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "NoReadyServers"
    assert body["status"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"


async def test_spec_change_updates_children(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    await cluster.eventually(lambda: _all_children(cluster), "every child")
    spec = copy.deepcopy(cluster.resource("emb")["spec"])
    spec["server"]["image"] = "registry.example/hedgerow-server:2"
    spec["server"]["maxBatchTokens"] = 4096
    spec["autoscaling"] = {"enabled": False}
    await cluster.patch(f"{cluster.cr_path}/emb",
                        {"metadata": {"generation": 2}, "spec": spec})

    async def updated():
        deployment = await cluster.get(cluster.child_path("apps/v1", "deployments", "emb-server"))
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        return container["image"].endswith(":2") and deployment["spec"].get("replicas") == 2

    await cluster.eventually(updated, "server Deployment with the new image and replicas")
    config = await cluster.get(cluster.child_path("v1", "configmaps", "emb-server"))
    assert config["data"]["HEDGEROW_MAX_BATCH_TOKENS"] == "4096"
    await cluster.eventually(
        lambda: _absent(cluster, cluster.child_path(
            "autoscaling/v2", "horizontalpodautoscalers", "emb-server")),
        "the HPA removed once autoscaling is off")
    body = await cluster.eventually(
        lambda: _generation(cluster, "emb", 2), "observedGeneration 2")
    assert body["status"]["observedGeneration"] == 2


async def _absent(cluster, path):
    return await cluster.get(path) is None


async def _generation(cluster, name, generation):
    body = await cluster.get(f"{cluster.cr_path}/{name}")
    return body if body.get("status", {}).get("observedGeneration") == generation else None


def _pod(name, started_at, ip="127.0.0.1"):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1",
                     "labels": {names.LABEL_NAME: "hedgerow", names.LABEL_INSTANCE: "emb",
                                names.LABEL_COMPONENT: "server"}},
        "spec": {"containers": [{"name": "server", "image": "x"}],
                 "readinessGates": [{"conditionType": names.GATE_CONDITION}]},
        "status": {"podIP": ip, "containerStatuses": [
            {"name": "server", "restartCount": 0, "ready": True,
             "state": {"running": {"startedAt": started_at}}}]},
    }


async def _gate(cluster, pod, status):
    body = await cluster.get(cluster.child_path("v1", "pods", pod))
    for cond in body.get("status", {}).get("conditions", []):
        if cond["type"] == names.GATE_CONDITION and cond["status"] == status:
            return cond
    return None


async def test_warmup_reports_set_gates_and_graphs_warm(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    await cluster.eventually(lambda: _all_children(cluster), "every child")
    # What the Deployment controller and the kubelet would do: two pods and the status.
    await cluster.patch(cluster.child_path("apps/v1", "deployments", "emb-server"),
                        {"spec": {"replicas": 2},
                         "status": {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}})
    await cluster.patch(cluster.child_path("apps/v1", "deployments", "emb-gateway"),
                        {"status": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}})
    started = "2026-01-01T00:00:00Z"
    for pod in ("emb-server-a", "emb-server-b"):
        await cluster.post("/api/v1/namespaces/ml/pods", _pod(pod, started))

    # Still capturing: gates False with the reported progress, GraphsWarm False.
    cluster.warmup.report = warmup_body(loaded=True, hot_set=4, hot_set_captured=2)
    cold = await cluster.eventually(lambda: _gate(cluster, "emb-server-a", "False"), "gate False")
    assert cold["reason"] == "Warming"
    warm = await cluster.eventually(lambda: _condition(cluster, "emb", "GraphsWarm"), "GraphsWarm")
    assert warm["status"] == "False"

    # Hot set captured: both gates True, GraphsWarm True with counts, Ready True.
    cluster.warmup.report = warmup_body(loaded=True, hot_set=4, hot_set_captured=4)
    for pod in ("emb-server-a", "emb-server-b"):
        await cluster.eventually(lambda: _gate(cluster, pod, "True"), f"{pod} gate True")

    async def all_warm():
        cond = await _condition(cluster, "emb", "GraphsWarm")
        return cond if cond and cond["status"] == "True" else None

    cond = await cluster.eventually(all_warm, "GraphsWarm True")
    assert cond["reason"] == "AllWarm" and cond["message"] == "2/2 server replicas warm"
    body = await cluster.get(f"{cluster.cr_path}/emb")
    assert body["status"]["warmReplicas"] == 2
    ready = await _condition(cluster, "emb", "Ready")
    assert ready["status"] == "True"

    # The container restarts and its /warmup is not up yet: the gate resets.
    cluster.warmup.report = None
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    await cluster.patch(cluster.child_path("v1", "pods", "emb-server-a"), {"status": {
        "containerStatuses": [{"name": "server", "restartCount": 1, "ready": False, "state": {
            "running": {"startedAt": later.strftime("%Y-%m-%dT%H:%M:%SZ")}}}]}})
    reset = await cluster.eventually(lambda: _gate(cluster, "emb-server-a", "False"),
                                     "gate reset after the restart")
    assert reset["reason"] == "ContainerRestarted"
    await asyncio.sleep(1.0)  # a few more warmup cycles: the reason stays until a report
    still = await _gate(cluster, "emb-server-a", "False")
    assert still and still["reason"] == "ContainerRestarted", still


async def test_a_server_whose_engine_failed_leaves_traffic_with_the_reason(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    await cluster.eventually(lambda: _all_children(cluster), "every child")
    await cluster.post("/api/v1/namespaces/ml/pods", _pod("emb-server-a", "2026-01-01T00:00:00Z"))
    cluster.warmup.report = warmup_body(loaded=True, serving=True, hot_set=4, hot_set_captured=4)
    await cluster.eventually(lambda: _gate(cluster, "emb-server-a", "True"), "gate True")
    failed = "sticky device error: RuntimeError: CUDA error: an illegal memory access"
    cluster.warmup.report = warmup_body(loaded=True, hot_set=4, hot_set_captured=4, failed=failed)
    gate = await cluster.eventually(lambda: _gate(cluster, "emb-server-a", "False"), "gate False")
    assert gate["reason"] == "EngineFailed" and gate["message"] == f"engine failed: {failed}"


GOLDEN_SPACE = "s1-0a0a0a0a-1b1b1b1b"


def _golden_config_map(name):
    from hedgerow.golden_set import GoldenSet

    golden = GoldenSet(model="all-MiniLM-L6-v2", fingerprint=GOLDEN_SPACE, dimensions=2,
                       texts=("a hedge", "a row"), vectors=((1.0, 0.0), (0.0, 1.0)))
    manifest = golden.config_map(name, "ml")
    manifest["metadata"]["resourceVersion"] = "1"
    return manifest


def _guarded_report(cosine):
    from hedgerow.warmup_report import GoldenCheck

    return warmup_body(loaded=True, serving=True, hot_set=4, hot_set_captured=4,
                       space="s1-0a0a0a0a-2c2c2c2c",
                       golden=GoldenCheck(fingerprint=GOLDEN_SPACE, texts=2, min_cosine=cosine))


async def test_a_replica_whose_space_does_not_match_stays_out_while_a_matching_one_joins(
        cluster):
    await cluster.post("/api/v1/namespaces/ml/configmaps", _golden_config_map("emb-golden"))
    body = cluster.resource("emb")
    body["spec"]["guard"] = {"configMap": "emb-golden", "minCosine": 0.999}
    await cluster.post(cluster.cr_path, body)
    children = await cluster.eventually(lambda: _all_children(cluster), "every child")
    template = children[("deployments", "emb-server")]["spec"]["template"]
    assert names.GOLDEN_SET_HASH_ANNOTATION in template["metadata"]["annotations"]
    assert any(v.get("configMap", {}).get("name") == "emb-golden"
               for v in template["spec"]["volumes"])
    await cluster.patch(cluster.child_path("apps/v1", "deployments", "emb-server"),
                        {"status": {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}})
    # The serving replica matches the golden set; the new one, at 127.0.0.2, does not.
    cluster.warmup.report = _guarded_report(0.99994)
    cluster.warmup.second = _guarded_report(0.91234)
    started = "2026-01-01T00:00:00Z"
    await cluster.post("/api/v1/namespaces/ml/pods", _pod("emb-server-old", started))
    await cluster.post("/api/v1/namespaces/ml/pods",
                       _pod("emb-server-new", started, ip=cluster.warmup.SECOND_IP))

    joined = await cluster.eventually(lambda: _gate(cluster, "emb-server-old", "True"),
                                      "the matching replica's gate open")
    assert joined["reason"] == warmup.WARM
    closed = await cluster.eventually(lambda: _gate(cluster, "emb-server-new", "False"),
                                      "the new replica's gate closed")

    async def mismatch():
        cond = await _condition(cluster, "emb", "SpaceMatches")
        return cond if cond and cond["status"] == "False" else None

    cond = await cluster.eventually(mismatch, "SpaceMatches=False")
    assert cond["reason"] == "SpaceMismatch"
    assert "pod emb-server-new (kept out of traffic)" in cond["message"]
    assert "0.912340" in cond["message"] and "minimum 0.999" in cond["message"]
    assert "emb-server-old" not in cond["message"]
    closed = await _gate(cluster, "emb-server-new", "False")
    assert closed["reason"] == warmup.SPACE_MISMATCH and "0.912340" in closed["message"]
    await asyncio.sleep(1.0)  # a few more cycles: the gate stays closed
    assert await _gate(cluster, "emb-server-new", "False")

    # A replica in the golden set's space joins.
    cluster.warmup.second = _guarded_report(0.99991)
    await cluster.eventually(lambda: _gate(cluster, "emb-server-new", "True"),
                             "the gate of a matching replica open")

    async def matches():
        cond = await _condition(cluster, "emb", "SpaceMatches")
        return cond if cond and cond["status"] == "True" else None

    cond = await cluster.eventually(matches, "SpaceMatches=True")
    assert cond["reason"] == "GoldenSetMatches" and "2/2 server pods match" in cond["message"]


def _config_map(name, data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": "1"}}


@pytest.mark.parametrize("config_map, reason, said", [
    (None, handlers.GOLDEN_SET_MISSING,
     ["ConfigMap 'golden' (spec.guard.configMap) does not exist", "hedgerow guard record"]),
    (_config_map("golden", {"other.json": "{}"}), handlers.GOLDEN_SET_INVALID,
     ["ConfigMap 'golden' has no key 'golden-set.json' (spec.guard.key)"]),
    (_config_map("golden", {"golden-set.json": '{"format": "hedgerow.dev/golden-set/v1"}'}),
     handlers.GOLDEN_SET_INVALID,
     ["ConfigMap 'golden' key 'golden-set.json': model must be a non-empty string"]),
    (_config_map("golden", {"golden-set.json": "texts: [a]"}), handlers.GOLDEN_SET_INVALID,
     ["ConfigMap 'golden' key 'golden-set.json' is not JSON"]),
], ids=["missing", "no-key", "malformed", "not-json"])
async def test_a_missing_or_malformed_golden_set_gets_a_clear_condition_and_no_children(
        cluster, config_map, reason, said):
    if config_map is not None:
        await cluster.post("/api/v1/namespaces/ml/configmaps", config_map)
    body = cluster.resource("lost")
    body["spec"]["guard"] = {"configMap": "golden"}
    await cluster.post(cluster.cr_path, body)

    async def rejected():
        cond = await _condition(cluster, "lost", "Ready")
        return cond if cond and cond["reason"] == reason else None

    cond = await cluster.eventually(rejected, f"Ready=False {reason}")
    for words in said:
        assert words in cond["message"], cond["message"]
    assert "Traceback" not in cond["message"]
    # kopf posts events from a queue of its own, after the status: wait for it.
    await cluster.eventually(lambda: _events(cluster, reason), f"a {reason} Event")
    assert await cluster.get(cluster.child_path("apps/v1", "deployments", "lost-server")) is None
    # The warmup timer never writes its counts over the refusal (it did when its body predated
    # the refusal's status patch): let it run a few times, then look at every Event.
    await asyncio.sleep(1.0)
    for observed in (status.NO_READY_SERVERS, status.ROLLING_OUT):
        assert await _events(cluster, observed) == []


def _rerank_config_map(name):
    from hedgerow.golden_set import GoldenSet

    golden = GoldenSet(model="reranker", fingerprint=GOLDEN_SPACE, dimensions=None, texts=(),
                       vectors=None, task="rerank", pairs=(("q", "a"), ("q", "b")),
                       scores=(1.5, -0.5))
    manifest = golden.config_map(name, "ml")
    manifest["metadata"]["resourceVersion"] = "1"
    return manifest


async def test_a_golden_set_of_another_task_than_spec_model_task_is_refused(cluster):
    await cluster.post("/api/v1/namespaces/ml/configmaps", _rerank_config_map("golden"))
    body = cluster.resource("lost")
    body["spec"]["model"]["task"] = "embed"
    body["spec"]["guard"] = {"configMap": "golden"}
    await cluster.post(cluster.cr_path, body)

    async def rejected():
        cond = await _condition(cluster, "lost", "Ready")
        return cond if cond and cond["reason"] == handlers.GOLDEN_SET_INVALID else None

    cond = await cluster.eventually(rejected, "Ready=False GoldenSetInvalid")
    assert "holds a golden set of task rerank (query-document pairs and their scores); " \
        "spec.model.task is embed" in cond["message"]
    assert await cluster.get(cluster.child_path("apps/v1", "deployments", "lost-server")) is None


def _scored_report(delta, flipped=0.0):
    from hedgerow.warmup_report import GoldenCheck

    return warmup_body(loaded=True, serving=True, hot_set=4, hot_set_captured=4,
                       space="s1-0a0a0a0a-2c2c2c2c",
                       golden=GoldenCheck(fingerprint=GOLDEN_SPACE, texts=2, task="rerank",
                                          max_score_delta=delta, max_flipped_gap=flipped))


async def test_a_rerankers_replica_is_held_to_its_golden_pairs_scores(cluster):
    """spec.model.task rerank reaches the servers, the golden set of pairs passes the
    preflight, and each replica's gate follows its scores against spec.guard.maxScoreDelta."""
    await cluster.post("/api/v1/namespaces/ml/configmaps", _rerank_config_map("emb-golden"))
    body = cluster.resource("emb")
    body["spec"]["model"]["task"] = "rerank"
    body["spec"]["guard"] = {"configMap": "emb-golden", "maxScoreDelta": 0.1}
    await cluster.post(cluster.cr_path, body)
    children = await cluster.eventually(lambda: _all_children(cluster), "every child")
    assert children[("configmaps", "emb-server")]["data"]["HEDGEROW_TASK"] == "rerank"
    await cluster.patch(cluster.child_path("apps/v1", "deployments", "emb-server"),
                        {"status": {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}})
    cluster.warmup.report = _scored_report(0.002)
    cluster.warmup.second = _scored_report(0.02, flipped=0.4)  # two documents swapped
    started = "2026-01-01T00:00:00Z"
    await cluster.post("/api/v1/namespaces/ml/pods", _pod("emb-server-old", started))
    await cluster.post("/api/v1/namespaces/ml/pods",
                       _pod("emb-server-new", started, ip=cluster.warmup.SECOND_IP))
    await cluster.eventually(lambda: _gate(cluster, "emb-server-old", "True"),
                             "the matching replica's gate open")
    closed = await cluster.eventually(lambda: _gate(cluster, "emb-server-new", "False"),
                                      "the swapped replica's gate closed")
    assert closed["reason"] == warmup.SPACE_MISMATCH
    assert "recorded scores lie 0.400000 apart are ranked the other way" in closed["message"]

    async def mismatch():
        cond = await _condition(cluster, "emb", "SpaceMatches")
        return cond if cond and cond["status"] == "False" else None

    cond = await cluster.eventually(mismatch, "SpaceMatches=False")
    assert "pod emb-server-new (kept out of traffic)" in cond["message"]
    cluster.warmup.second = _scored_report(0.09)  # within spec.guard.maxScoreDelta 0.1
    await cluster.eventually(lambda: _gate(cluster, "emb-server-new", "True"),
                             "the gate of a replica within maxScoreDelta open")


async def test_concurrent_observers_never_undo_a_newer_gate(kube_api):
    """Reconcile and the warmup timer observe concurrently. The first observer's /warmup read
    is held back (and then fails) while a second observer reads the pod, finds it warm and
    writes its gate True; the first must not then decide on its older pod list and write
    the gate back to False. The handlers run directly on a real KubeClient against kmock:
    only a direct call can order the two observers deterministically."""
    held, release, calls = asyncio.Event(), asyncio.Event(), []

    async def warmup_endpoint(request):
        calls.append(len(calls))
        if len(calls) == 1:  # the first observer's read: hold it, then fail
            held.set()
            await release.wait()
            return web.Response(status=503)
        return web.json_response(warmup_body(loaded=True, hot_set=4, hot_set_captured=4))

    app = web.Application()
    app.router.add_get("/warmup", warmup_endpoint)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    body = kube_api.resource("emb")
    await kube_api.post(kube_api.cr_path, body)
    await kube_api.post("/api/v1/namespaces/ml/pods", _pod("emb-server-a", "2026-01-01T00:00:00Z"))
    kube = KubeClient()
    kube.connect(kopf.ConnectionInfo(server=str(kube_api.kmock.url), token="t"))
    config = types.SimpleNamespace(warmup_port=port, warmup_timeout=10.0)
    ctx = handlers.Context(config=config, kube=kube, probes=aiohttp.ClientSession())
    try:
        service = spec.parse(body)
        first = asyncio.create_task(handlers.update_gates(ctx, service))
        await asyncio.wait_for(held.wait(), 10)
        second = asyncio.create_task(handlers.update_gates(ctx, service))
        await asyncio.sleep(0.5)  # without the lock, the second observer finishes here
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), 20)
    finally:
        await ctx.probes.close()
        kube.close()
        await runner.cleanup()
    assert [d.reason for _, d, _ in first.result()] == [warmup.UNREACHABLE]
    assert [d.reason for _, d, _ in second.result()] == [warmup.WARM]
    gate = await _gate(kube_api, "emb-server-a", "True")
    assert gate and gate["reason"] == warmup.WARM, "the newer True gate was overwritten"


async def test_deleted_child_is_recreated(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    await cluster.eventually(lambda: _all_children(cluster), "every child")
    path = cluster.child_path("v1", "services", "emb-server")
    await cluster.delete(path)
    history = cluster.kmock.objects["v1/services", "ml", "emb-server", :]
    assert None in history, "deleted (the resync timer may already have recreated it)"

    async def recreated():
        versions = cluster.kmock.objects["v1/services", "ml", "emb-server", :]
        return versions[-1] is not None and None in versions and await cluster.get(path)

    service = await cluster.eventually(recreated, "the Service recreated after its deletion")
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "uid-emb"


async def _events(cluster, reason):
    listing = await cluster.get("/api/v1/namespaces/ml/events")
    return [e for e in listing.get("items", []) if e.get("reason") == reason]


def _without_volume(spec, claim="absent"):
    spec["model"].pop("hostPath")
    spec["model"]["persistentVolumeClaim"] = {"claimName": claim}


async def test_a_missing_model_volume_gets_a_clear_condition_and_no_children(cluster):
    """What no schema can judge (the API server refuses what the CRD's rules refuse, before the
    operator sees it): the model's PVC must exist."""
    body = cluster.resource("bad")
    _without_volume(body["spec"])
    await cluster.post(cluster.cr_path, body)

    async def rejected():
        cond = await _condition(cluster, "bad", "Ready")
        return cond if cond and cond["reason"] == "ModelVolumeNotFound" else None

    cond = await cluster.eventually(rejected, "Ready=False ModelVolumeNotFound")
    assert cond["status"] == "False" and "'absent'" in cond["message"]
    assert await cluster.eventually(lambda: _events(cluster, "ModelVolumeNotFound"),
                                    "a ModelVolumeNotFound event")
    await asyncio.sleep(1.0)  # a few warmup cycles: they keep the reason, not overwrite it
    assert (await _condition(cluster, "bad", "Ready"))["reason"] == "ModelVolumeNotFound"
    for api_version, plural, _ in CHILDREN:
        listing = await cluster.get(f"{cluster.child_path(api_version, plural, '')}".rstrip("/"))
        assert not [item for item in listing.get("items", [])
                    if item["metadata"]["name"].startswith("bad")], plural


async def test_a_child_name_held_by_someone_else_is_not_taken_over(cluster):
    """The gateway Service would be named `clash`; a user's Service already is. Applying with
    force would silently take it over: Ready=False instead, and nothing written."""
    users = {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "clash", "namespace": cluster.namespace,
                          "resourceVersion": "1"},
             "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]}}
    await cluster.post(f"/api/v1/namespaces/{cluster.namespace}/services", users)
    await cluster.post(cluster.cr_path, cluster.resource("clash"))

    async def rejected():
        cond = await _condition(cluster, "clash", "Ready")
        return cond if cond and cond["reason"] == handlers.NAME_CONFLICT else None

    cond = await cluster.eventually(rejected, "Ready=False ChildNameTaken")
    assert "Service 'clash' already exists" in cond["message"]
    service = await cluster.get(cluster.child_path("v1", "services", "clash"))
    assert service["spec"]["selector"] == {"app": "theirs"}
    assert not service["metadata"].get("ownerReferences")
    for api_version, plural, name in CHILDREN:
        child = name.replace("emb", "clash")
        if (plural, child) != ("services", "clash"):
            assert await cluster.get(cluster.child_path(api_version, plural, child)) is None


async def test_a_spec_that_cannot_be_applied_keeps_the_last_good_children(cluster):
    await cluster.post(cluster.cr_path, cluster.resource("emb"))
    await cluster.eventually(lambda: _all_children(cluster), "every child")
    spec = copy.deepcopy(cluster.resource("emb")["spec"])
    spec["server"]["image"] = "registry.example/hedgerow-server:broken"
    _without_volume(spec)
    spec["model"]["hostPath"] = None  # a merge patch removes a field with null
    await cluster.patch(f"{cluster.cr_path}/emb", {"metadata": {"generation": 2}, "spec": spec})

    async def rejected():
        cond = await _condition(cluster, "emb", "Ready")
        return cond if cond and cond["reason"] == "ModelVolumeNotFound" else None

    cond = await cluster.eventually(rejected, "Ready=False ModelVolumeNotFound")
    assert cond["observedGeneration"] == 2 and "claimName" in cond["message"]
    deployment = await cluster.get(cluster.child_path("apps/v1", "deployments", "emb-server"))
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example/hedgerow-server:1", "the last good spec keeps serving"
    assert await _all_children(cluster), "no child was removed"


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
async def test_examples_reconcile_into_valid_children(cluster, path):
    body = yaml.safe_load(path.read_text())
    namespace, name = await cluster.apply_example(body)
    wanted = [("v1", "configmaps", f"{name}-server"), ("v1", "configmaps", f"{name}-gateway"),
              ("v1", "services", f"{name}-server"), ("v1", "services", name),
              ("apps/v1", "deployments", f"{name}-server"),
              ("apps/v1", "deployments", f"{name}-gateway"),
              ("policy/v1", "poddisruptionbudgets", f"{name}-server"),
              ("policy/v1", "poddisruptionbudgets", f"{name}-gateway")]
    if body["spec"].get("autoscaling", {}).get("enabled"):
        wanted.append(("autoscaling/v2", "horizontalpodautoscalers", f"{name}-server"))

    async def children():
        found = []
        for api_version, plural, child in wanted:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            obj = await cluster.get(f"{base}/namespaces/{namespace}/{plural}/{child}")
            if obj is None:
                return None
            found.append(obj)
        return found

    for obj in await cluster.eventually(children, f"the children of {path.name}"):
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
