"""A real Prometheus (Debian's `prometheus` package, `make prometheus-tools`) for the tests.

Starts `prometheus` on a free loopback port (tests/children.py's Child: another on a port taken
meanwhile) with a given configuration and rule files, its storage in a temporary directory,
waits for /-/ready, answers instant queries through the HTTP API, and stops. Knows nothing
about Hedgerow's metrics.
"""

import json
import shutil
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.children import Child
from tests.conftest import free_port


def missing_binaries() -> str | None:
    """Why these tests cannot run here, or None when `prometheus` and `promtool` are on PATH."""
    missing = [name for name in ("prometheus", "promtool") if shutil.which(name) is None]
    if not missing:
        return None
    return (f"{' and '.join(missing)} not on PATH: `make prometheus-tools` (run by `make test`) "
            "installs Debian's prometheus package with apt-get, which needs root")


class Prometheus(Child):
    def __init__(self, workdir: Path, scrape_configs: list[dict[str, Any]],
                 rule_files: list[Path] = (), evaluation_interval: str = "1s") -> None:
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                             "evaluation_interval": evaluation_interval},
                  "rule_files": [str(path) for path in rule_files],
                  "scrape_configs": scrape_configs}
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._storage = workdir / "data"
        super().__init__(workdir / "prometheus.log")

    def _command_on_new_ports(self) -> list[str]:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        return ["prometheus", f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self._storage}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def wait_ready(self) -> None:
        self.wait_until(self.ready, "prometheus")

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
