"""The Helm chart: `helm lint --strict` and `helm template` pass with the defaults and every
ci/*-values.yaml, and everything rendered validates offline (kubernetes-validate for built-in
kinds and the CRD, the CRD's own schema for EmbeddingServices). helm comes from `make setup`
(tools/install_k8s_binaries.py puts it in .venv/bin)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from hedgerow.operator import crd, token_signals
from tests.operator.api_server import admit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hedgerow"
HELM = Path(sys.executable).parent / "helm"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
K8S_VERSION = "1.33.0"
# Kinds whose schema is not available offline (prometheus-operator's CRDs): checked by hand
# (the PrometheusRule's groups by promtool and a real Prometheus, tests/autoscaling/).
NO_OFFLINE_SCHEMA = {"ServiceMonitor", "PrometheusRule"}

# kopf's peering kinds, by their CRDs in the chart.
PEERING_KINDS = {
    doc["spec"]["names"]["kind"]: doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for doc in yaml.safe_load_all((CHART / "crds" / "kopf-peering.yaml").read_text())}

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm not installed: run make setup")


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)


def render(*values: Path, extra: tuple[str, ...] = ()) -> list[dict]:
    args = ["template", "hedgerow", str(CHART), "--namespace", "hedgerow-system",
            "--include-crds"]
    for path in values:
        args += ["-f", str(path)]
    result = helm(*args, *extra)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


VALUE_SETS = [pytest.param((), id="defaults")] + [
    pytest.param((path,), id=path.name) for path in CI_VALUES]


def test_ci_values_exist():
    assert {p.name for p in CI_VALUES} >= {"default-values.yaml", "namespaced-values.yaml",
                                            "autoscaling-values.yaml"}


@pytest.mark.parametrize("values", VALUE_SETS)
def test_helm_lint_strict(values):
    args = ["lint", "--strict", str(CHART)]
    for path in values:
        args += ["-f", str(path)]
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rendered_manifests_validate(values):
    docs = render(*values)
    kinds = {doc["kind"] for doc in docs}
    assert {"CustomResourceDefinition", "Deployment", "ServiceAccount"} <= kinds
    for doc in docs:
        if doc["kind"] == crd.KIND:
            admit(doc)  # the schema, unknown fields refused, and every CEL rule
        elif doc["kind"] in PEERING_KINDS:
            jsonschema.validate(doc, PEERING_KINDS[doc["kind"]])
        elif doc["kind"] == "PrometheusRule":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert [group["name"] for group in doc["spec"]["groups"]] == [
                "hedgerow.recording", "hedgerow.alerts"]
        elif doc["kind"] in NO_OFFLINE_SCHEMA:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            component = doc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
            # The ports the operator names on each component's Service.
            assert doc["spec"]["endpoints"][0]["port"] == {"server": "metrics",
                                                           "gateway": "http"}[component]
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_crd_in_the_chart_is_the_generated_one():
    docs = [d for d in render() if d["kind"] == "CustomResourceDefinition"
            and d["spec"]["group"] == crd.GROUP]
    assert docs == [crd.build_crd()]


def test_defaults_are_cluster_wide_with_least_privilege():
    docs = render()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["CustomResourceDefinition"] * 3 + [
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment",
        "ClusterKopfPeering"]), "optional parts off by default"
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "nodes" not in rule["resources"]
        if "secrets" in rule["resources"]:  # API-key and TLS Secrets: read by name, never listed
            assert rule["resources"] == ["secrets"] and rule["verbs"] == ["get"], rule
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["hedgerow"] and container["args"] == ["operator"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HEDGEROW_NAMESPACES"] == ""
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_namespaced_values_give_roles_per_namespace():
    docs = render(CHART / "ci" / "namespaced-values.yaml")
    roles = [d for d in docs if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["ml", "search"]
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value")
           for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HEDGEROW_NAMESPACES"] == "ml,search"


def test_the_charts_operator_defaults_are_the_operators_own():
    """values.yaml cannot import OperatorSettings; this keeps the two from drifting apart."""
    from hedgerow.operator.main import OperatorSettings

    values = yaml.safe_load((CHART / "values.yaml").read_text())["operator"]
    assert values["resyncIntervalSeconds"] == OperatorSettings.resync_interval
    assert values["warmupIntervalSeconds"] == OperatorSettings.warmup_interval
    assert values["logLevel"] == OperatorSettings.log_level
    assert values["logFormat"] == OperatorSettings.log_format
    assert values["watchNamespaces"] == list(OperatorSettings.namespaces)
    assert values["peeringLifetimeSeconds"] == OperatorSettings.peering_lifetime
    deployment = next(d for d in render() if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value")
           for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HEDGEROW_HEALTH_PORT"] == str(OperatorSettings.health_port)


def test_service_monitors_carry_extra_labels_and_cover_gateways():
    """kube-prometheus-stack's Prometheus selects monitors by its `release` label."""
    docs = render(CHART / "ci" / "autoscaling-values.yaml",
                  extra=("--set", "serviceMonitor.labels.release=monitoring"))
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"hedgerow-servers", "hedgerow-gateways"}
    assert all(m["metadata"]["labels"]["release"] == "monitoring" for m in monitors.values())
    from hedgerow.operator.build_gateway import build_gateway_service
    from hedgerow.operator.spec import parse
    from tests.operator.test_defaults import BARE

    service = build_gateway_service(parse(BARE))
    selector = monitors["hedgerow-gateways"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitors["hedgerow-gateways"]["spec"]["endpoints"][0]["port"] in [
        port["name"] for port in service["spec"]["ports"]]
    only_servers = render(CHART / "ci" / "autoscaling-values.yaml",
                          extra=("--set", "serviceMonitor.gateways=false"))
    assert [d["metadata"]["name"] for d in only_servers
            if d["kind"] == "ServiceMonitor"] == ["hedgerow-servers"]
    bad = helm("template", "x", str(CHART), "--set", "serviceMonitor.labels.bad key=x")
    assert bad.returncode != 0


def test_the_operator_is_probed_for_readiness_on_its_health_port():
    deployment = next(d for d in render() if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HEDGEROW_LOG_FORMAT"] == "text"


def test_adapter_rules_are_the_operators_signals():
    # With the default window, each rule is exactly what operator/token_signals.py (and so
    # the KEDA trigger) reads; tests/autoscaling/ runs them against a real Prometheus.
    docs = render()
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    docs = render(extra=("--set", "prometheusAdapter.rules.enabled=true"))
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    rules = yaml.safe_load(config["data"]["config.yaml"])["rules"]
    assert [(rule["seriesQuery"], rule["name"], rule["metricsQuery"]) for rule in rules] == [
        (signal.series_query, {"matches": f"^{signal.counter}$", "as": signal.metric},
         token_signals.METRICS_QUERY)
        for signal in (token_signals.OFFERED, token_signals.SERVED)]
    for rule in rules:
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                                  "service": {"resource": "service"}}
    windowed = render(CHART / "ci" / "autoscaling-values.yaml")
    config = next(d for d in windowed if d["kind"] == "ConfigMap")
    assert "[2m]" in yaml.safe_load(config["data"]["config.yaml"])["rules"][0]["metricsQuery"]


def test_values_schema_rejects_unknown_and_bad_values():
    bad = helm("template", "x", str(CHART), "--set", "operator.colour=blue")
    assert bad.returncode != 0 and "colour" in bad.stderr
    bad = helm("template", "x", str(CHART), "--set", "operator.logLevel=loud")
    assert bad.returncode != 0 and "logLevel" in bad.stderr
    # null removes a key in Helm: the schema requires what the templates read.
    bad = helm("template", "x", str(CHART), "--set", "rbac=null")
    assert bad.returncode != 0 and "missing property 'rbac'" in bad.stderr
    bad = helm("template", "x", str(CHART), "--set", "operator.logLevel=null")
    assert bad.returncode != 0 and "missing property 'logLevel'" in bad.stderr


def test_example_values_are_quoted_into_the_resource():
    done = helm("template", "x", str(CHART), "--set", "example.enabled=true",
                "--set", "example.modelPath=/opt/my models #2: v1")
    assert done.returncode == 0, done.stderr
    example = next(doc for doc in yaml.safe_load_all(done.stdout)
                   if doc and doc["kind"] == "EmbeddingService")
    assert example["spec"]["model"]["path"] == "/opt/my models #2: v1"


def test_every_values_key_is_commented():
    lines = (CHART / "values.yaml").read_text().splitlines()
    uncommented = []
    for index, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z][\w.-]*:", line):
            above = lines[index - 1].strip() if index else ""
            if not above.startswith("#"):
                uncommented.append(line.strip())
    assert not uncommented, uncommented


def test_values_schema_is_strict_everywhere():
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node, path):
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, path
            for name, child in node["properties"].items():
                walk(child, f"{path}.{name}")

    walk(schema, "values")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)


def test_notes_render():
    result = helm("install", "hedgerow", str(CHART), "--dry-run=client", "--namespace", "ops",
                  "-f", str(CHART / "ci" / "autoscaling-values.yaml"))
    assert result.returncode == 0, result.stderr
    assert "kubectl get embsvc" in result.stdout
    assert "hedgerow-adapter-rules" in result.stdout


def test_the_example_can_fetch_its_model_given_only_an_id_and_a_revision():
    example = next(doc for doc in render(CHART / "ci" / "huggingface-values.yaml")
                   if doc["kind"] == crd.KIND)
    assert example["spec"]["model"] == {"huggingFace": {
        "id": "sentence-transformers/all-MiniLM-L6-v2",
        "revision": "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"}}
    admit(example)


def test_the_notes_name_the_crds_printer_columns():
    result = helm("install", "hedgerow", str(CHART), "--namespace", "hedgerow-system",
                  "--dry-run=client")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "kubectl get embsvc" in line)
    columns = [c["name"].upper() for c in crd.PRINTER_COLUMNS]
    assert line.split("#", 1)[1].strip() == ", ".join(columns)


def _operator_pod(*values: Path, extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    docs = render(*values, extra=extra)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    return deployment, {d["kind"]: d for d in docs}


def test_two_operator_replicas_share_a_peering_object_by_default():
    deployment, kinds = _operator_pod()
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] if "value" in e else e["valueFrom"]
           for e in pod["containers"][0]["env"]}
    assert env["HEDGEROW_PEERING"] == kinds["ClusterKopfPeering"]["metadata"]["name"]
    assert env["POD_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    term = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    single, kinds = _operator_pod(extra=("--set", "operator.replicas=1"))
    assert single["spec"]["strategy"] == {"type": "Recreate"}
    assert "ClusterKopfPeering" not in kinds and "affinity" not in single["spec"]["template"]["spec"]
    names = {e["name"] for e in single["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "HEDGEROW_PEERING" not in names
    rules = kinds["ClusterRole"]["rules"]
    assert not [r for r in rules if "kopf.dev" in r["apiGroups"]]


def test_namespaced_replicas_peer_in_each_namespace():
    docs = render(CHART / "ci" / "namespaced-values.yaml")
    peerings = [d for d in docs if d["kind"] == "KopfPeering"]
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["ml", "search"]
    for role in (d for d in docs if d["kind"] == "Role"):
        assert {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"],
                "verbs": ["list", "watch", "patch"]} in role["rules"]


def test_operator_pod_values_follow_the_common_conventions(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "podLabels": {"team": "ml"},
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 20000, "fsGroup": 20000},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True},
    }))
    deployment, _ = _operator_pod(values)
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    template = deployment["spec"]["template"]
    pod, container = template["spec"], template["spec"]["containers"][0]
    assert template["metadata"]["labels"]["team"] == "ml"
    assert container["env"][-1] == {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}
    assert "nodeAffinity" in pod["affinity"] and "podAntiAffinity" not in pod["affinity"]
    assert pod["securityContext"]["runAsUser"] == 20000
    assert container["securityContext"]["runAsNonRoot"] is True
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"extraEnv": [{"name": "HEDGEROW_PEERING", "value": "x"}]}))
    assert helm("template", "h", str(CHART), "-f", str(bad)).returncode != 0
