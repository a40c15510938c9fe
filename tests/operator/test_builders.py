"""Pure build_* functions: every rendered manifest validates against the real Kubernetes
schemas (kubernetes-validate, strict) across several specs, and carries what the design asks."""

import copy
import dataclasses

import kubernetes_validate
import pytest

from hedgerow.operator import names
from hedgerow.operator.build_common import config_hash
from hedgerow.operator.build_server import build_server_config
from hedgerow.operator.manifests import build_all, unwanted
from hedgerow.operator.spec import parse

K8S_VERSIONS = ("1.30.0", "1.33.0")

BASE = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "1234", "generation": 1},
    "spec": {
        "model": {"path": "/models/bge-m3", "huggingFaceId": "BAAI/bge-m3",
                  "persistentVolumeClaim": {"claimName": "models", "subPath": "hf"}},
        "server": {"image": "s:1"},
        "gateway": {"image": "g:1"},
    },
}

SPECS = {
    "defaults": lambda s: None,
    "autoscaled": lambda s: s.update(autoscaling={"enabled": True, "minReplicas": 2,
                                                  "maxReplicas": 6,
                                                  "targetTokensPerSecond": 250000}),
    "cpu-baked-no-gate": lambda s: (
        s["model"].pop("persistentVolumeClaim"),
        s["server"].update(gpus=0, dtype="float32", drainSeconds=0),
        s.update(warmup={"readinessGate": False})),
    "full": lambda s: (
        s["model"].pop("persistentVolumeClaim"),
        s["model"].update(hostPath={"path": "/srv/models"}, servedName="bge"),
        s["server"].update(
            gpus=1, gpuResource="amd.com/gpu", cpu="8", memory="64Gi", replicas=3,
            graphs={"maxTokens": 2048, "maxSeqs": 16, "seqBuckets": [1, 4, 16],
                    "hotSet": [{"sequences": 4, "tokens": 512}]},
            attentionBackend="varlen", compile=True,
            nodeSelector={"gpu": "h200"}, priorityClassName="inference",
            tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                         {"key": "team", "operator": "Equal", "value": "ml"}]),
        s["gateway"].update(replicas=4, serviceType="LoadBalancer", truncate=True,
                            templates={"query": "query: ", "document": "passage: "},
                            apiKeySecret={"name": "keys"})),
    "gateways-autoscaled": lambda s: s["gateway"].update(autoscaling={
        "enabled": True, "minReplicas": 3, "maxReplicas": 12, "targetCPUUtilizationPercent": 60}),
    "guarded": lambda s: s.update(guard={"configMap": "bge-golden", "key": "set.json"}),
    "cached-on-pvc": lambda s: s["server"].update(
        compileCache={"persistentVolumeClaim": {"claimName": "compile", "subPath": "bge"}}),
    "cached-on-node": lambda s: s["server"].update(
        compileCache={"hostPath": {"path": "/var/lib/hedgerow-compile"}}),
    # spec.model.huggingFace: fetched by an init container, per pod or on a shared PVC.
    "fetched": lambda s: s.update(model={"huggingFace": {
        "id": "BAAI/bge-m3", "revision": "5617a9f61b028005a4858fdac845db406aefb181"}}),
    "fetched-shared": lambda s: s.update(model={"huggingFace": {
        "id": "acme/private-bge", "revision": "v2", "endpoint": "https://hub.example.com",
        "tokenSecret": {"name": "hf-token"}, "allowPatterns": ["*.json", "*.safetensors"],
        "cache": {"claimName": "hf-models", "subPath": "hub"}}}),
}


def _service(name):
    body = copy.deepcopy(BASE)
    SPECS[name](body["spec"])
    return parse(body)


def _by_kind(manifests):
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("spec", sorted(SPECS))
def test_every_manifest_validates(spec, version):
    for manifest in build_all(_service(spec)):
        kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_children_carry_labels_and_owner_reference(spec):
    for manifest in build_all(_service(spec)):
        meta = manifest["metadata"]
        assert meta["namespace"] == "ml"
        assert meta["ownerReferences"] == [{
            "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService", "name": "emb",
            "uid": "1234", "controller": True, "blockOwnerDeletion": True}]
        labels = meta["labels"]
        assert labels[names.LABEL_NAME] == "hedgerow" and labels[names.LABEL_INSTANCE] == "emb"
        assert labels[names.LABEL_COMPONENT] in ("server", "gateway")
        assert labels[names.LABEL_MANAGED_BY] == "hedgerow-operator"


def test_server_deployment_defaults():
    children = _by_kind(build_all(_service("defaults")))
    deployment = children[("Deployment", "emb-server")]
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["readinessGates"] == [{"conditionType": "hedgerow.dev/graphs-warm"}]
    assert container["command"] == ["hedgerow"] and container["args"] == ["server"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["grpc"] == {"port": 50051}
    assert container["startupProbe"]["grpc"] == {"port": 50051}
    assert container["startupProbe"]["failureThreshold"] * \
        container["startupProbe"]["periodSeconds"] >= 900
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": 9090}
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == 5
    assert pod["terminationGracePeriodSeconds"] == 5 + 30 + 10
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mount = next(m for m in container["volumeMounts"] if m["name"] == "model")
    assert mount == {"name": "model", "mountPath": "/models", "readOnly": True, "subPath": "hf"}
    config = children[("ConfigMap", "emb-server")]["data"]
    assert config["HEDGEROW_MODEL"] == "/models/bge-m3"
    assert config["HEDGEROW_DEVICE"] == "cuda" and config["HEDGEROW_DTYPE"] == "auto"
    assert config["HEDGEROW_PORT"] == "50051" and config["HEDGEROW_HTTP_PORT"] == "9090"
    assert ("HorizontalPodAutoscaler", "emb-server") not in children
    assert [(c.kind, c.name) for c in unwanted(_service("defaults"))] == [
        ("HorizontalPodAutoscaler", "emb-server"), ("HorizontalPodAutoscaler", "emb-gateway")]


def test_autoscaled_server_leaves_replicas_to_the_hpa():
    children = _by_kind(build_all(_service("autoscaled")))
    assert "replicas" not in children[("Deployment", "emb-server")]["spec"]
    hpa = children[("HorizontalPodAutoscaler", "emb-server")]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": "emb-server"}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    metric = hpa["metrics"][0]
    # The total token rate on the Service, averaged by the HPA over the *desired* count:
    # warming replicas that report no tokens cannot pull the decision down. The default
    # signal is the gateways' offered tokens, on the gateway Service clients call.
    assert metric["type"] == "Object"
    assert metric["object"]["describedObject"] == {"apiVersion": "v1", "kind": "Service",
                                                   "name": "emb"}
    assert metric["object"]["metric"]["name"] == "hedgerow_offered_tokens_per_second"
    assert metric["object"]["target"] == {"type": "AverageValue", "averageValue": "250000"}
    assert hpa["behavior"]["scaleUp"]["policies"] == [
        {"type": "Pods", "value": 4, "periodSeconds": 60},
        {"type": "Percent", "value": 400, "periodSeconds": 60}]
    assert hpa["behavior"]["scaleUp"]["selectPolicy"] == "Max"
    assert [c.name for c in unwanted(_service("autoscaled"))] == ["emb-gateway"]


@pytest.mark.parametrize("extra, service_name, metric_name", [
    ({"signal": "served"}, "emb-server", "hedgerow_tokens_per_second"),
    ({"signal": "served", "metricName": "tokens_rate"}, "emb-server", "tokens_rate"),
    ({"metricName": "offered_rate"}, "emb", "offered_rate"),
])
def test_the_hpa_reads_the_signals_metric_on_its_service(extra, service_name, metric_name):
    body = copy.deepcopy(BASE)
    SPECS["autoscaled"](body["spec"])
    body["spec"]["autoscaling"].update(extra)
    hpa = _by_kind(build_all(parse(body)))[("HorizontalPodAutoscaler", "emb-server")]
    metric = hpa["spec"]["metrics"][0]["object"]
    assert metric["describedObject"]["name"] == service_name
    assert metric["metric"]["name"] == metric_name


def test_cpu_spec_without_gate_or_volume():
    children = _by_kind(build_all(_service("cpu-baked-no-gate")))
    pod = children[("Deployment", "emb-server")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "readinessGates" not in pod
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "lifecycle" not in container
    assert not any(v["name"] == "model" for v in pod["volumes"])
    assert children[("ConfigMap", "emb-server")]["data"]["HEDGEROW_DEVICE"] == "cpu"


def test_full_spec_reaches_pods_and_config():
    children = _by_kind(build_all(_service("full")))
    server_pod = children[("Deployment", "emb-server")]["spec"]["template"]["spec"]
    assert server_pod["nodeSelector"] == {"gpu": "h200"}
    assert server_pod["tolerations"][0] == {"key": "gpu", "operator": "Exists",
                                            "effect": "NoSchedule"}
    assert server_pod["priorityClassName"] == "inference"
    assert server_pod["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "1"
    model = next(v for v in server_pod["volumes"] if v["name"] == "model")
    assert model["hostPath"] == {"path": "/srv/models", "type": "Directory"}
    server_env = children[("ConfigMap", "emb-server")]["data"]
    assert server_env["HEDGEROW_GRAPH_MAX_TOKENS"] == "2048"
    assert server_env["HEDGEROW_GRAPH_SEQ_BUCKETS"] == "1,4,16"
    assert server_env["HEDGEROW_GRAPH_HOT_SET"] == "4x512"
    assert server_env["HEDGEROW_ATTENTION_BACKEND"] == "varlen"
    assert server_env["HEDGEROW_COMPILE"] == "true"
    gateway_env = children[("ConfigMap", "emb-gateway")]["data"]
    assert gateway_env["HEDGEROW_SERVICE_DNS"] == "emb-server.ml.svc:50051"
    assert gateway_env["HEDGEROW_SERVED_MODEL_NAME"] == "bge"
    assert gateway_env["HEDGEROW_QUERY_TEMPLATE"] == "query: "
    assert gateway_env["HEDGEROW_API_KEYS_FILE"] == "/etc/hedgerow/api-keys/api-keys"
    assert gateway_env["HEDGEROW_TRUNCATE"] == "true"
    gateway = children[("Deployment", "emb-gateway")]["spec"]
    assert gateway["replicas"] == 4
    gateway_pod = gateway["template"]["spec"]
    assert {"name": "api-keys", "secret": {"secretName": "keys", "defaultMode": 0o440}} in \
        gateway_pod["volumes"]
    assert children[("Service", "emb")]["spec"]["type"] == "LoadBalancer"
    assert children[("PodDisruptionBudget", "emb-server")]["spec"]["maxUnavailable"] == 1


def test_settings_change_rolls_pods_through_the_config_hash():
    before = build_server_config(_service("defaults"))
    body = copy.deepcopy(BASE)
    body["spec"]["server"]["maxBatchTokens"] = 8192
    after = build_server_config(parse(body))
    assert config_hash(before) != config_hash(after)
    assert config_hash(before) == config_hash(build_server_config(_service("defaults")))


def test_builders_are_deterministic():
    assert build_all(_service("full")) == build_all(_service("full"))


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_configmaps_load_into_the_real_process_settings(spec):
    """The ConfigMaps are the contract with `hedgerow server` and `hedgerow gateway`: every
    key must be a setting those processes read, in a format they accept."""
    from hedgerow import settings as settings_lib
    from hedgerow.gateway_settings import GatewaySettings
    from hedgerow.gpu_settings import GpuSettings
    from hedgerow.graph_grid import parse_hot_set
    from hedgerow.server_settings import ServerSettings

    children = _by_kind(build_all(_service(spec)))
    server_env = children[("ConfigMap", "emb-server")]["data"]
    known = {settings_lib.env_name(f.name) for cls in (ServerSettings, GpuSettings)
             for f in dataclasses.fields(cls)}
    assert set(server_env) <= known, set(server_env) - known
    settings_lib.load(ServerSettings, None, environ=server_env)
    gpu = settings_lib.load(GpuSettings, None, environ=server_env)
    assert parse_hot_set(gpu.graph_hot_set, gpu.grid())

    gateway_env = children[("ConfigMap", "emb-gateway")]["data"]
    known = {settings_lib.env_name(f.name) for f in dataclasses.fields(GatewaySettings)}
    assert set(gateway_env) <= known, set(gateway_env) - known
    gateway = settings_lib.load(GatewaySettings, None, environ=gateway_env)
    assert gateway.service_dns == "emb-server.ml.svc:50051"


@pytest.mark.parametrize("graphs, buckets, hot", [
    ({"maxTokens": 192, "maxSeqs": 1, "seqBuckets": [1],
      "hotSet": [{"sequences": 1, "tokens": 64}, {"sequences": 1, "tokens": 128}]},
     "1", "1x64,1x128"),
    ({"maxSeqs": 8, "seqBuckets": [], "hotSet": []}, "", ""),
])
def test_graph_settings_reach_the_server_as_written(graphs, buckets, hot):
    body = copy.deepcopy(BASE)
    body["spec"]["server"]["graphs"] = graphs
    env = build_server_config(parse(body))["data"]
    assert env["HEDGEROW_GRAPH_SEQ_BUCKETS"] == buckets
    assert env["HEDGEROW_GRAPH_HOT_SET"] == hot


def test_cpu_servers_get_threads_for_their_cpu_request_not_the_nodes_cores():
    from hedgerow.operator.build_server import cpu_threads, server_env

    assert [cpu_threads(q) for q in ("4", "500m", 0.5, "2.5", "1e1", "1e0.5", "1k")] == [
        3, 1, 1, 2, 9, 3, 999]
    body = copy.deepcopy(BASE)
    body["spec"]["server"].update(gpus=0, cpu="6")
    assert server_env(parse(body))["HEDGEROW_CPU_THREADS"] == "5"
    assert "HEDGEROW_CPU_THREADS" not in server_env(_service("defaults"))  # a GPU server


def test_a_guard_mounts_the_golden_set_where_the_server_reads_it():
    from hedgerow import settings as settings_lib
    from hedgerow.server_settings import ServerSettings

    children = _by_kind(build_all(_service("guarded"), "0123456789abcdef"))
    pod = children[("Deployment", "emb-server")]["spec"]["template"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "golden-set")
    assert volume["configMap"] == {"name": "bge-golden",
                                   "items": [{"key": "set.json", "path": "golden-set.json"}]}
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"]
                 if m["name"] == "golden-set")
    env = children[("ConfigMap", "emb-server")]["data"]
    server = settings_lib.load(ServerSettings, None, environ=env)
    assert str(server.golden_set) == mount["mountPath"] + "/golden-set.json"
    assert mount["readOnly"] is True
    # Re-recording the golden set rolls the servers: they check it at start.
    assert pod["metadata"]["annotations"][names.GOLDEN_SET_HASH_ANNOTATION] == "0123456789abcdef"
    unguarded = _by_kind(build_all(_service("defaults")))
    template = unguarded[("Deployment", "emb-server")]["spec"]["template"]
    assert names.GOLDEN_SET_HASH_ANNOTATION not in template["metadata"]["annotations"]
    assert "HEDGEROW_GOLDEN_SET" not in unguarded[("ConfigMap", "emb-server")]["data"]


@pytest.mark.parametrize("spec, volume", [
    ("cached-on-pvc", {"persistentVolumeClaim": {"claimName": "compile"}}),
    ("cached-on-node", {"hostPath": {"path": "/var/lib/hedgerow-compile",
                                     "type": "DirectoryOrCreate"}}),
])
def test_a_compile_cache_is_mounted_writable_where_the_server_keeps_its_compile(spec, volume):
    from hedgerow import settings as settings_lib
    from hedgerow.gpu_settings import GpuSettings

    children = _by_kind(build_all(_service(spec)))
    pod = children[("Deployment", "emb-server")]["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "compile-cache") == \
        {"name": "compile-cache", **volume}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "compile-cache")
    assert not mount.get("readOnly")
    assert mount.get("subPath") == ("bge" if spec == "cached-on-pvc" else None)
    env = children[("ConfigMap", "emb-server")]["data"]
    gpu = settings_lib.load(GpuSettings, None, environ=env)
    assert str(gpu.compile_cache) == mount["mountPath"]
    uncached = _by_kind(build_all(_service("defaults")))
    assert "HEDGEROW_COMPILE_CACHE" not in uncached[("ConfigMap", "emb-server")]["data"]


# spec.model.huggingFace ----------------------------------------------------------------------

def _pod(children, component):
    return children[("Deployment", f"emb-{component}")]["spec"]["template"]["spec"]


@pytest.mark.parametrize("spec", ["fetched", "fetched-shared"])
@pytest.mark.parametrize("component", ["server", "gateway"])
def test_a_fetched_model_comes_from_an_init_container_into_the_cache(spec, component):
    from hedgerow import settings as settings_lib
    from hedgerow.fetch_settings import FetchSettings
    from hedgerow.operator import build_fetch

    children = _by_kind(build_all(_service(spec)))
    pod = _pod(children, component)
    (init,) = pod["initContainers"]
    assert init["image"] == "s:1" and init["args"] == ["fetch-model"]  # the server image
    assert "nvidia.com/gpu" not in init["resources"]["limits"]
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e.get("value") for e in init["env"]}
    fetch = settings_lib.load(FetchSettings, None, environ={
        k: v for k, v in env.items() if k.startswith("HEDGEROW_")})
    hub = _service(spec).spec["model"]["huggingFace"]
    assert (fetch.repo, fetch.revision) == (hub["id"], hub["revision"])
    assert fetch.skip_weights is (component == "gateway")
    assert str(fetch.message_file) == init["terminationMessagePath"]
    assert env["HF_HOME"].startswith("/tmp/")
    # The containers read the model through the link the fetch points at the commit's files.
    config = children[("ConfigMap", f"emb-{component}")]["data"]
    assert config["HEDGEROW_MODEL"] == str(fetch.link) == build_fetch.MODEL_LINK
    container = pod["containers"][0]
    mounted = {m["name"]: m for m in container["volumeMounts"]}
    assert mounted["model-cache"]["mountPath"] == str(fetch.cache)
    assert mounted["model-cache"]["readOnly"] and mounted["model-link"]["readOnly"]
    assert str(fetch.link).startswith(mounted["model-link"]["mountPath"] + "/")
    written = {m["name"]: m for m in init["volumeMounts"]}
    assert not written["model-cache"]["readOnly"] and not written["model-link"]["readOnly"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    if spec == "fetched":
        assert volumes["model-cache"]["emptyDir"] == {"sizeLimit": "20Gi"}
        assert fetch.max_bytes == 20 * 2**30  # refused before the download, not evicted
        assert "HF_TOKEN" not in env and "HF_ENDPOINT" not in env
        assert fetch.allow_patterns == FetchSettings.allow_patterns
    else:
        assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": "hf-models"}
        assert written["model-cache"]["subPath"] == mounted["model-cache"]["subPath"] == "hub"
        assert fetch.max_bytes is None
        assert env["HF_ENDPOINT"] == "https://hub.example.com"
        token = next(e for e in init["env"] if e["name"] == "HF_TOKEN")
        assert token["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
        assert fetch.allow_patterns == ("*.json", "*.safetensors")
        assert "hf-token" not in str(config)  # the token is never in a ConfigMap


def test_a_model_without_huggingface_has_no_init_container():
    for spec in ("defaults", "full", "cpu-baked-no-gate"):
        children = _by_kind(build_all(_service(spec)))
        assert "initContainers" not in _pod(children, "server")
        assert "initContainers" not in _pod(children, "gateway")


def test_a_new_revision_rolls_the_pods():
    before = _by_kind(build_all(_service("fetched")))
    body = copy.deepcopy(BASE)
    SPECS["fetched"](body["spec"])
    body["spec"]["model"]["huggingFace"]["revision"] = "v3"
    after = _by_kind(build_all(parse(body)))
    for component in ("server", "gateway"):
        assert _pod(before, component) != _pod(after, component)
    assert parse(body).model_label == "BAAI/bge-m3@v3"


def test_gateway_autoscaling_is_an_hpa_on_cpu_that_owns_the_replicas():
    assert ("HorizontalPodAutoscaler", "emb-gateway") not in _by_kind(
        build_all(_service("defaults")))
    service = _service("gateways-autoscaled")
    children = _by_kind(build_all(service))
    hpa = children[("HorizontalPodAutoscaler", "emb-gateway")]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "emb-gateway"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    assert hpa["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]
    assert "replicas" not in children[("Deployment", "emb-gateway")]["spec"]
    assert children[("Deployment", "emb-server")]["spec"]["replicas"] == 1
    assert [c.name for c in unwanted(service)] == ["emb-server"]
