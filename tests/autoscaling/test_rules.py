"""The chart's PrometheusRule under `promtool`: `check rules` and the unit tests of
rules-test.yaml on synthetic series (test_adapter_query.py loads the same rules into a real
Prometheus scraping a real stack)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.autoscaling.prometheus import missing_binaries
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(missing_binaries() is not None,
                                reason=str(missing_binaries()))

HELM = Path(sys.executable).parent / "helm"
HERE = Path(__file__).parent


def render_rules(tmp_path: Path, *values: str) -> Path:
    args = [str(HELM), "template", "hedgerow", str(ROOT / "charts" / "hedgerow"),
            "--set", "prometheusRule.enabled=true",
            "--show-only", "templates/prometheusrule.yaml"]
    for value in values:
        args += ["--set-json", value]
    rendered = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    rule = yaml.safe_load(rendered.stdout)
    path = tmp_path / "hedgerow-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_promtool_checks_the_rules(tmp_path):
    rules = render_rules(tmp_path)
    checked = promtool("check", "rules", str(rules), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 10 rules found" in checked.stdout


def test_promtool_unit_tests_pass(tmp_path):
    render_rules(tmp_path)
    shutil.copy(HERE / "rules-test.yaml", tmp_path)
    tested = promtool("test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_unit_tests_fail_when_the_thresholds_move(tmp_path):
    # The alert tests hold the values' defaults: a stricter 5xx fraction fires at another
    # value and the annotations the tests expect no longer match.
    render_rules(tmp_path, "prometheusRule.errorRatio=0.5")
    shutil.copy(HERE / "rules-test.yaml", tmp_path)
    tested = promtool("test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert tested.returncode != 0
    assert "HedgerowGatewayErrors" in tested.stdout + tested.stderr
