"""What prometheus-operator makes of the chart's ServiceMonitors, for a Prometheus with no cluster.

prometheus-operator turns each ServiceMonitor endpoint into one scrape job over Kubernetes'
`endpoints` service discovery with a fixed list of relabelling rules (its pkg/prometheus/
promcfg.go; the rules below are those of its golden files, e.g. pkg/prometheus/testdata/
GenerateRelabelConfig.golden, one shard). No API server runs here, so discovery is replaced by
a file of targets that carry the same `__meta_kubernetes_*` labels the endpoints role gives
(Prometheus' kubernetes_sd_config documentation), built from the operator's own Service and
pod manifests; the relabelling then runs in the real Prometheus unchanged. A ServiceMonitor
field this module does not translate is an error, so a chart change cannot be silently
ignored by the tests.
"""

import re
from typing import Any

ENDPOINT_FIELDS = {"port", "path", "interval", "scheme"}
SPEC_FIELDS = {"selector", "namespaceSelector", "endpoints"}


def _sanitized(label: str) -> str:
    """A Kubernetes label key as a Prometheus label name (invalid characters become `_`)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def scrape_jobs(monitor: dict[str, Any], targets_file: str) -> list[dict[str, Any]]:
    """The scrape jobs prometheus-operator generates for `monitor`, discovering through the
    file_sd file `targets_file` instead of the API server."""
    spec = monitor["spec"]
    unknown = set(spec) - SPEC_FIELDS
    if unknown:
        raise ValueError(f"ServiceMonitor fields not translated: {sorted(unknown)}")
    selector = spec["selector"]
    if set(selector) - {"matchLabels"}:
        raise ValueError(f"selector fields not translated: {sorted(selector)}")
    namespaces = spec.get("namespaceSelector") or {}
    meta = monitor["metadata"]
    jobs = []
    for index, endpoint in enumerate(spec["endpoints"]):
        unknown = set(endpoint) - ENDPOINT_FIELDS
        if unknown:
            raise ValueError(f"ServiceMonitor endpoint fields not translated: {sorted(unknown)}")
        relabel: list[dict[str, Any]] = [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        ]
        if not namespaces.get("any"):
            names = namespaces.get("matchNames") or [meta["namespace"]]
            relabel.append({"action": "keep", "source_labels": ["__meta_kubernetes_namespace"],
                            "regex": "|".join(names)})
        for key, value in selector.get("matchLabels", {}).items():
            name = _sanitized(key)
            relabel.append({
                "action": "keep",
                "source_labels": [f"__meta_kubernetes_service_label_{name}",
                                  f"__meta_kubernetes_service_labelpresent_{name}"],
                "regex": f"({value});true",
            })
        port = endpoint["port"]
        relabel += [
            {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"],
             "regex": port},
            {"source_labels": ["__meta_kubernetes_endpoint_address_target_kind",
                               "__meta_kubernetes_endpoint_address_target_name"],
             "separator": ";", "regex": "Node;(.*)", "replacement": "${1}",
             "target_label": "node"},
            {"source_labels": ["__meta_kubernetes_endpoint_address_target_kind",
                               "__meta_kubernetes_endpoint_address_target_name"],
             "separator": ";", "regex": "Pod;(.*)", "replacement": "${1}",
             "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"],
             "target_label": "container"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
             "regex": "(Failed|Succeeded)"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
             "replacement": "${1}"},
            {"target_label": "endpoint", "replacement": port},
            {"source_labels": ["__address__"], "target_label": "__tmp_hash", "modulus": 1,
             "action": "hashmod"},
            {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"},
        ]
        job = {
            "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
            "honor_labels": False,
            "file_sd_configs": [{"files": [targets_file], "refresh_interval": "1s"}],
            "relabel_configs": relabel,
            "metrics_path": endpoint.get("path", "/metrics"),
        }
        if "interval" in endpoint:
            job["scrape_interval"] = endpoint["interval"]
        if "scheme" in endpoint:
            job["scheme"] = endpoint["scheme"]
        jobs.append(job)
    return jobs


def endpoint_targets(service: dict[str, Any], pod_name: str, container: dict[str, Any],
                     address: str, ports: dict[str, int], ready: bool) -> list[dict[str, Any]]:
    """file_sd entries for one pod behind `service` (a Service manifest): one target per
    Service port, as the endpoints role yields them, with `ports` mapping each port name to
    the local port the process listens on. `container` is the pod's container manifest that
    declares the ports; `ready` says whether the address is ready (a warming server is not:
    the endpoints role lists not-ready addresses too, with endpoint_ready false)."""
    meta = service["metadata"]
    labels = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_endpoints_name": meta["name"],
        "__meta_kubernetes_service_name": meta["name"],
        "__meta_kubernetes_pod_name": pod_name,
        "__meta_kubernetes_pod_ip": address,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_ready": str(ready).lower(),
        "__meta_kubernetes_pod_container_name": container["name"],
        "__meta_kubernetes_endpoint_ready": str(ready).lower(),
        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
        "__meta_kubernetes_endpoint_address_target_name": pod_name,
    }
    for key, value in meta["labels"].items():
        labels[f"__meta_kubernetes_service_label_{_sanitized(key)}"] = value
        labels[f"__meta_kubernetes_service_labelpresent_{_sanitized(key)}"] = "true"
    declared = {port["name"]: port for port in container["ports"]}
    targets = []
    for port in service["spec"]["ports"]:
        container_port = declared[port["targetPort"]]
        targets.append({
            "targets": [f"{address}:{ports[port['name']]}"],
            "labels": {**labels,
                       "__meta_kubernetes_endpoint_port_name": port["name"],
                       "__meta_kubernetes_endpoint_port_protocol": port["protocol"],
                       "__meta_kubernetes_pod_container_port_name": container_port["name"],
                       "__meta_kubernetes_pod_container_port_number":
                           str(container_port["containerPort"])},
        })
    return targets
