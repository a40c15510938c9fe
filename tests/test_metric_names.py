"""Metric names: every series the gateway and the server export passes `promtool check metrics`,
no name means two things (each component's names start with its own prefix; only
`hedgerow_build_info` is shared, with one meaning), and the docs' tables list every metric."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.server.metrics import ServerMetrics

ROOT = Path(__file__).resolve().parent.parent
SHARED = {"hedgerow_build_info"}


def server_text() -> str:
    metrics = ServerMetrics("all-MiniLM-L6-v2")
    metrics.watch_device_memory(lambda: 1 << 20, lambda: 1 << 21)  # as on a GPU
    metrics.record(metrics.tokens.inc, 12)
    metrics.record(metrics.request_seconds.observe, 0.003)
    return metrics.render().decode()


def gateway_text() -> str:
    metrics = GatewayMetrics("all-MiniLM-L6-v2")
    metrics.tokens.inc(12)
    metrics.observe_request("/v1/embeddings", 200, 0.004)
    metrics.in_flight("10.0.0.2:50051").set(3)
    metrics.chunk_outcome("10.0.0.2:50051", "OK").inc()
    metrics.retries.labels("UNAVAILABLE").inc()
    return metrics.render().decode()


def families(text: str) -> dict[str, str]:
    """name as written in the docs (a counter with its _total) -> type; prometheus-client's
    `_created` timestamps (read back as families of their own) left out."""
    return {family.name + ("_total" if family.type == "counter" else ""): family.type
            for family in text_string_to_metric_families(text)
            if not family.name.endswith("_created")}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
@pytest.mark.parametrize("render", [server_text, gateway_text], ids=["server", "gateway"])
def test_promtool_finds_nothing_to_complain_about(render):
    checked = subprocess.run(["promtool", "check", "metrics"], input=render(),
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + \
        checked.stderr


def test_each_component_has_names_of_its_own():
    server, gateway = families(server_text()), families(gateway_text())
    assert set(server) & set(gateway) == SHARED
    assert all(name.startswith("hedgerow_server_") for name in set(server) - SHARED), server
    assert all(name.startswith("hedgerow_gateway_") for name in set(gateway) - SHARED), gateway
    assert "hedgerow_server_tokens_total" in server  # the `served` autoscaling counter


@pytest.mark.parametrize("render, doc", [(server_text, "docs/server.md"),
                                         (gateway_text, "docs/gateway.md")],
                         ids=["server", "gateway"])
def test_the_docs_list_every_metric(render, doc):
    text = (ROOT / doc).read_text()
    table = text[text.index("\n## Metrics"):]
    table = table[:table.index("\n## ", 1)]
    documented = set(re.findall(r"`(hedgerow_[a-z_]+[a-z])(?:\{[^`]*\})?`", table))
    exported = set(families(render()))
    assert exported <= documented, exported - documented
    assert documented <= exported, documented - exported
