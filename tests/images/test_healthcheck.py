"""images/healthcheck.py, the images' HEALTHCHECK, against real listeners on loopback."""

import http.server
import threading
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.conftest import free_port


def http_listener(status: int, path: str = "/healthz") -> tuple[http.server.HTTPServer, int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            self.send_response(status if self.path == path else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


@pytest.mark.parametrize("status, code", [(200, 0), (503, 1)])
def test_gateway_healthz(healthcheck_script, monkeypatch, capsys, status, code):
    server, port = http_listener(status)
    monkeypatch.setenv("HEDGEROW_HOST", "0.0.0.0")  # reached on loopback
    monkeypatch.setenv("HEDGEROW_PORT", str(port))
    try:
        assert healthcheck_script.main(["gateway"]) == code
    finally:
        server.shutdown()
    assert capsys.readouterr().out == ("healthy\n" if code == 0 else
                                       f"unhealthy: http://127.0.0.1:{port}/healthz answered "
                                       f"{status}\n")


def test_nothing_listening_is_unhealthy(healthcheck_script, monkeypatch, capsys):
    monkeypatch.setenv("HEDGEROW_PORT", str(free_port()))
    assert healthcheck_script.main(["gateway"]) == 1
    assert "refused" in capsys.readouterr().out


@pytest.mark.parametrize("status, code", [(health_pb2.HealthCheckResponse.SERVING, 0),
                                          (health_pb2.HealthCheckResponse.NOT_SERVING, 1)])
def test_server_grpc_health(healthcheck_script, monkeypatch, capsys, status, code):
    servicer = health.HealthServicer()
    servicer.set("", status)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("HEDGEROW_HOST", "127.0.0.1")
    monkeypatch.setenv("HEDGEROW_PORT", str(port))
    monkeypatch.setenv("HEDGEROW_HTTP_PORT", str(free_port()))
    try:
        assert healthcheck_script.main(["server"]) == code
    finally:
        server.stop(None)
    out = capsys.readouterr().out
    assert out == "healthy\n" if code == 0 else "NOT_SERVING" in out


@pytest.mark.parametrize("status, code", [(200, 0), (503, 1)])
def test_a_server_with_mutual_tls_is_judged_by_readyz(healthcheck_script, monkeypatch, capsys,
                                                      status, code):
    server, port = http_listener(status, "/readyz")
    monkeypatch.setenv("HEDGEROW_HOST", "127.0.0.1")
    monkeypatch.setenv("HEDGEROW_PORT", str(free_port()))  # nothing there: gRPC is not asked
    monkeypatch.setenv("HEDGEROW_HTTP_PORT", str(port))
    monkeypatch.setenv("HEDGEROW_TLS_CERT", "/etc/hedgerow/tls/tls.crt")
    try:
        assert healthcheck_script.main(["server"]) == code
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert out == "healthy\n" if code == 0 else f"/readyz answered {status}" in out


def test_operator_liveness_off_is_reported(healthcheck_script, monkeypatch, capsys):
    monkeypatch.setenv("HEDGEROW_HEALTH_PORT", "0")
    assert healthcheck_script.main(["operator"]) == 1
    assert "liveness endpoint is off" in capsys.readouterr().out


def test_bad_settings_and_usage_are_named(healthcheck_script, monkeypatch, capsys):
    monkeypatch.setenv("HEDGEROW_PORT", "eighty")
    assert healthcheck_script.main(["gateway"]) == 1
    assert capsys.readouterr().out.startswith("unhealthy: bad settings: HEDGEROW_PORT")
    assert healthcheck_script.main(["database"]) == 2
    assert "usage: healthcheck.py gateway|server|operator" in capsys.readouterr().err
