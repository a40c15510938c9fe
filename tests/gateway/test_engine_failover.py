"""A server whose GPU breaks leaves traffic by itself, and no client sees a 5xx: REAL processes.

A real gateway (`hedgerow gateway`) in front of two real servers of the packaged model on CPU:
one is `hedgerow server`, the other the same server app whose engine is wrapped by the
test-only tests/server/faulty_engine.py (passed in through `serve`'s loader), which raises a
sticky CUDA error ("an illegal memory access was encountered") on every step once a trigger
file exists. From then on: every request still answers 200 (the chunks that met the error
are retried on the healthy server), the failing server's health is NOT_SERVING, its /livez
answers 503 (what the kubelet's liveness probe restarts it on) and /warmup says why.
"""

import sys
import urllib.error
from pathlib import Path

import httpx
import pytest
from grpc_health.v1 import health_pb2

from tests.children import RealGateway, RealServer

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
FAULTY_ENGINE = Path(__file__).parents[1] / "server" / "faulty_engine.py"


class FaultyServer(RealServer):
    """The server app on loopback whose engine turns sticky once `trigger` exists."""

    def __init__(self, log_path, trigger: Path) -> None:
        self._trigger = trigger
        super().__init__(log_path)

    def _command(self) -> list[str]:
        return [sys.executable, "-P", str(FAULTY_ENGINE), str(self.port), str(self.http_port),
                str(self._trigger)]


def test_a_server_with_a_sticky_device_error_leaves_traffic_and_clients_see_no_5xx(tmp_path):
    trigger = tmp_path / "break-the-gpu"
    faulty = FaultyServer(tmp_path / "faulty.log", trigger)
    healthy = RealServer(tmp_path / "healthy.log")
    gateway = None
    try:
        faulty.wait_until(faulty.serving, "faulty server")
        healthy.wait_until(healthy.serving, "healthy server")
        gateway = RealGateway(tmp_path / "gateway.log",
                              [faulty.address, healthy.address], "--chunk-tokens", "64")
        gateway.wait_until(lambda: gateway.ready_replicas() == 2, "gateway")
        texts = [f"hedgerow number {i} shelters wrens and dormice" for i in range(12)]

        def embed(batch) -> int:
            answer = httpx.post(gateway.url + "/v1/embeddings",
                                json={"model": MODEL, "input": batch}, timeout=120)
            assert answer.status_code < 500, (answer.status_code, answer.text)
            return answer.status_code

        assert embed(texts) == 200  # both servers take chunks of it
        trigger.touch()
        statuses = [embed(texts if i % 2 else texts[i]) for i in range(12)]
        assert statuses == [200] * 12

        assert faulty.health() == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(urllib.error.HTTPError) as livez:
            faulty.http_get("/livez")
        body = livez.value.read().decode()
        assert livez.value.code == 503 and "illegal memory access" in body, body
        assert faulty.warmup()["failed"].startswith("sticky device error")
        gateway.wait_until(lambda: gateway.ready_replicas() == 1, "the failing server leaving")
        assert healthy.serving()
        assert "event=engine.failed" in faulty.log_text()
    finally:
        if gateway is not None:
            gateway.stop()
        for server in (faulty, healthy):
            server.stop()
