"""A real Prometheus (Debian's `prometheus` package, `make prometheus-tools`) for the tests.

Starts `prometheus` on a free loopback port with a given configuration and rule files, its
storage in a temporary directory, waits for /-/ready, answers instant queries through the HTTP
API, and stops. Knows nothing about Hedgerow's metrics.
"""

import json
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port

START_TIMEOUT_S = 60.0


def missing_binaries() -> str | None:
    """Why these tests cannot run here, or None when `prometheus` and `promtool` are on PATH."""
    missing = [name for name in ("prometheus", "promtool") if shutil.which(name) is None]
    if not missing:
        return None
    return (f"{' and '.join(missing)} not on PATH: `make prometheus-tools` (run by `make test`) "
            "installs Debian's prometheus package with apt-get, which needs root")


class Prometheus:
    def __init__(self, workdir: Path, scrape_configs: list[dict[str, Any]],
                 rule_files: list[Path] = (), evaluation_interval: str = "1s") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                             "evaluation_interval": evaluation_interval},
                  "rule_files": [str(path) for path in rule_files],
                  "scrape_configs": scrape_configs}
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.config_path}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n"
                                     f"{self.log_text()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready:\n{self.log_text()}")

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/PATH?params; the `data` of a successful answer."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's vector (at `at`, a Unix time, or now)."""
        params = {"query": promql} if at is None else {"query": promql, "time": f"{at:.3f}"}
        data = self.api("query", **params)
        assert data["resultType"] == "vector", data
        return data["result"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
