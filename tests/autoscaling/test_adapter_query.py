"""The number the HPA reads equals the tokens actually served: a real Prometheus behind it.

A real `hedgerow serve` (server and gateway, the packaged model on CPU) and a real
`hedgerow server` held in its warmup (not SERVING: what a new pod looks like while it loads)
are scraped every second by a real Prometheus, through the relabelling prometheus-operator
generates for the chart's own ServiceMonitors (tests/autoscaling/servicemonitor.py), with the
targets labelled as the operator's Services and pods of an EmbeddingService `minilm` would be.
Prometheus also loads the chart's PrometheusRule. A bounded load of known token counts goes
through the gateway; then the exact query prometheus-adapter would send for each signal's
metric (the chart's rendered metricsQuery, filled as the adapter fills it) is evaluated
through Prometheus' HTTP API over a window inside the load, and must equal the client's own
measured token rate over that window within 10 %. The warming replica is scraped (its `up` is
1) and adds nothing; a per-pod average, which the operator avoids, would have halved the rate.
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from hedgerow.operator import names, token_signals
from hedgerow.operator.manifests import build_all
from hedgerow.operator.spec import parse
from tests.autoscaling.prometheus import Prometheus, missing_binaries
from tests.autoscaling.servicemonitor import endpoint_targets, scrape_jobs
from tests.children import RealServe, RealServer
from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.skipif(missing_binaries() is not None,
                                reason=str(missing_binaries()))

HELM = Path(sys.executable).parent / "helm"
NAMESPACE = "ml"
RESOURCE = {"apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
            "metadata": {"name": "minilm", "namespace": NAMESPACE, "uid": "u-1"},
            "spec": {"model": {"path": "/opt/hedgerow/models/all-MiniLM-L6-v2"},
                     "server": {"image": "hedgerow-server:test", "gpus": 0},
                     "gateway": {"image": "hedgerow-gateway:test"},
                     "autoscaling": {"enabled": True}}}
WINDOW_S = token_signals.RATE_WINDOW_SECONDS
LOAD_S = WINDOW_S + 20        # the window lies inside the load, away from both ends
CLIENTS = 2
MAX_REQUESTS = 20_000         # the load is bounded in count as well as in time
TEXTS = ["Roses are red", "The quick brown fox jumps over the lazy dog near the riverbank",
         "Hedgerows shelter birds, insects and small mammals through the winter months",
         "A short one"]


def render_chart() -> list[dict]:
    result = subprocess.run(
        [str(HELM), "template", "hedgerow", str(ROOT / "charts" / "hedgerow"),
         "--namespace", "monitoring", "--set", "serviceMonitor.enabled=true",
         "--set", "serviceMonitor.interval=1s", "--set", "prometheusAdapter.rules.enabled=true",
         "--set", "prometheusRule.enabled=true"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def adapter_rules(docs: list[dict]) -> dict[str, dict]:
    """The chart's prometheus-adapter rules by the series they discover."""
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"])
    rules = yaml.safe_load(config["data"]["config.yaml"])["rules"]
    return {rule["name"]["matches"].strip("^$"): rule for rule in rules}


class ScrapedServe(RealServe):
    """`hedgerow serve` whose server's ports are picked here, for Prometheus to scrape."""

    def _command_on_new_ports(self) -> list[str]:
        self.grpc_port, self.http_port = free_port(), free_port()
        return [*super()._command_on_new_ports(), "--server-port", str(self.grpc_port),
                "--server-http-port", str(self.http_port)]


class WarmingServer(RealServer):
    """tests/autoscaling/warming_server.py: a server held in its warmup (never SERVING)."""

    def _command(self) -> list[str]:
        return [sys.executable, "-P", str(Path(__file__).with_name("warming_server.py")),
                str(self.port), str(self.http_port)]

    def answers_metrics(self) -> bool:
        try:
            return bool(self.http_get("/metrics"))
        except OSError:
            return False


def send_load(url: str, seconds: float) -> list[tuple[float, int]]:
    """CLIENTS threads posting /v1/embeddings back to back for `seconds` (at most MAX_REQUESTS
    in all); (time of the answer, usage.prompt_tokens) per answered request."""
    answered: list[tuple[float, int]] = []
    lock = threading.Lock()
    end = time.time() + seconds
    sent = iter(range(MAX_REQUESTS))

    def client(index: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            for number in sent:
                if time.time() >= end:
                    return
                texts = [TEXTS[(number + i) % len(TEXTS)] for i in range(1 + number % 3)]
                answer = http.post("/v1/embeddings", json={"input": texts})
                assert answer.status_code == 200, answer.text
                with lock:
                    answered.append((time.time(), answer.json()["usage"]["prompt_tokens"]))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answered


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The stack, the warming replica and Prometheus scraping both, with the chart's rules."""
    workdir = tmp_path_factory.mktemp("autoscaling")
    docs = render_chart()
    service = parse(RESOURCE)
    children = {(c["kind"], c["metadata"]["name"]): c for c in build_all(service)}
    server_service, gateway_service = (children[("Service", names.server_name(service))],
                                       children[("Service", names.gateway_service_name(service))])
    server_container = children[("Deployment", names.server_name(service))][
        "spec"]["template"]["spec"]["containers"][0]
    gateway_container = children[("Deployment", names.gateway_name(service))][
        "spec"]["template"]["spec"]["containers"][0]

    targets_file = workdir / "targets.json"  # written once the children's ports are known
    jobs = [job for doc in docs if doc["kind"] == "ServiceMonitor"
            for job in scrape_jobs(doc, str(targets_file))]
    rules = next(d for d in docs if d["kind"] == "PrometheusRule")
    rule_file = workdir / "hedgerow-rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": rules["spec"]["groups"]}))

    stack = ScrapedServe(workdir / "stack.log", "--dtype", "float32", "--log-level", "warning")
    warming = WarmingServer(workdir / "warming.log")
    prometheus = None
    try:
        stack.wait_until(stack.ready, "hedgerow serve")
        warming.wait_until(warming.answers_metrics, "the warming server")
        targets_file.write_text(json.dumps(
            endpoint_targets(server_service, "minilm-server-5d8c7-serving", server_container,
                             "127.0.0.1", {"grpc": stack.grpc_port, "metrics": stack.http_port},
                             ready=True)
            + endpoint_targets(server_service, "minilm-server-5d8c7-warming", server_container,
                               "127.0.0.1", {"grpc": warming.port, "metrics": warming.http_port},
                               ready=False)
            + endpoint_targets(gateway_service, "minilm-gateway-6f9b4-a", gateway_container,
                               "127.0.0.1", {"http": stack.port}, ready=True)))
        prometheus = Prometheus(workdir, jobs, [rule_file])
        prometheus.wait_ready()
        yield {"url": stack.url, "prometheus": prometheus, "docs": docs}
    finally:
        if prometheus is not None:
            prometheus.stop()
        warming.stop()
        stack.stop()


def wait_until_scraped(prometheus: Prometheus, expected: int) -> list[dict]:
    """The `up` series once every kept target has been scraped at least once."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        up = prometheus.query("up")
        if len(up) == expected and all(series["value"][1] == "1" for series in up):
            return up
        time.sleep(0.5)
    raise AssertionError(f"targets not all up: {prometheus.query('up')}\n{prometheus.log_text()}")


def test_the_adapter_query_equals_the_clients_token_rate(fleet):
    prometheus = fleet["prometheus"]
    # The ServiceMonitors keep the servers' `metrics` port and the gateway's `http` port and
    # drop the servers' gRPC port: three targets, the warming replica among them.
    up = wait_until_scraped(prometheus, 3)
    assert {(s["metric"]["service"], s["metric"]["pod"], s["metric"]["container"],
             s["metric"]["endpoint"]) for s in up} == {
        ("minilm-server", "minilm-server-5d8c7-serving", "server", "metrics"),
        ("minilm-server", "minilm-server-5d8c7-warming", "server", "metrics"),
        ("minilm", "minilm-gateway-6f9b4-a", "gateway", "http")}
    assert all(s["metric"]["namespace"] == NAMESPACE for s in up)

    answered = send_load(fleet["url"], LOAD_S)
    # A window inside the load: a few seconds before its end, so every answer in it was
    # scraped and the ramp at the start lies outside it.
    at = answered[-1][0] - 5
    time.sleep(3)  # two scrapes past the window's end
    client_rate = sum(tokens for done, tokens in answered if at - WINDOW_S < done <= at) / WINDOW_S

    rules = adapter_rules(fleet["docs"])
    measured = {}
    for signal in token_signals.SIGNALS.values():
        rule = rules[signal.counter]
        assert rule["seriesQuery"] == signal.series_query
        # What prometheus-adapter sends for the Object metric on the signal's Service:
        # the chart's template, filled as the adapter fills it.
        sent = token_signals.adapter_query(rule["metricsQuery"], signal.counter, NAMESPACE,
                                           "service", [signal.service_name("minilm")])
        assert sent == token_signals.query(signal, NAMESPACE, "minilm")  # KEDA's trigger too
        result = prometheus.query(sent, at=at)
        assert [s["metric"] for s in result] == [{"service": signal.service_name("minilm")}]
        measured[signal.name] = float(result[0]["value"][1])
        print(f"{signal.name}: adapter query {sent}\n  = {measured[signal.name]:.1f} tokens/s;"
              f" the client measured {client_rate:.1f} tokens/s over the same {WINDOW_S} s")
        assert measured[signal.name] == pytest.approx(client_rate, rel=0.10)

    # The warming replica was scraped the whole time and counted nothing.
    warming = 'service="minilm-server",pod="minilm-server-5d8c7-warming"'
    assert prometheus.query(f"hedgerow_server_tokens_total{{{warming}}}", at=at)[0]["value"][1] == "0"
    assert prometheus.query(f"hedgerow_server_serving{{{warming}}}", at=at)[0]["value"][1] == "0"
    # Averaged over the two server pods, as a Pods metric would be, the warming replica
    # halves what the HPA sees; the Object metric's total does not depend on it.
    average = prometheus.query(
        f'avg(rate(hedgerow_server_tokens_total{{namespace="{NAMESPACE}",service="minilm-server"}}'
        f'[{token_signals.RATE_WINDOW}]))', at=at)
    assert float(average[0]["value"][1]) == pytest.approx(measured["served"] / 2, rel=0.01)


def test_the_charts_rules_load_and_record_the_same_rates(fleet):
    prometheus = fleet["prometheus"]
    groups = prometheus.api("rules")["groups"]
    assert {g["name"] for g in groups} == {"hedgerow.recording", "hedgerow.alerts"}
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"]
                 if r["health"] != "ok"]
    assert not unhealthy, unhealthy
    # The recording rules computed over the same series as the adapter (evaluated each second).
    at = time.time() - 2
    served = prometheus.query("hedgerow:served_tokens_per_second", at=at)
    assert [s["metric"] for s in served] == [{"__name__": "hedgerow:served_tokens_per_second",
                                              "namespace": NAMESPACE, "service": "minilm-server"}]
    warm = prometheus.query("hedgerow:warm_replicas", at=at)
    assert [(s["metric"]["service"], s["value"][1]) for s in warm] == [("minilm-server", "1")]
    offered = prometheus.query("hedgerow:offered_tokens_per_second", at=at)
    assert [s["metric"]["service"] for s in offered] == ["minilm"]
