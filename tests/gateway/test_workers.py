"""`hedgerow gateway` as a real process with several workers, in front of the stand-ins.

Workers share the one port and their metrics add up on /metrics whichever worker answers it;
a stop does not wait on a client that stalled mid-upload, and exits cleanly.
"""

import signal
import socket
import subprocess
import time

import httpx
import pytest

from tests.children import RealGateway

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    found = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                           text=True).stdout.split()
    return [int(child) for child in found]


@pytest.fixture
def gateway(tmp_path, standins):
    process = RealGateway(tmp_path / "gateway.log", [s.address for s in standins],
                          "--workers", "2")
    process.wait_until(lambda: process.ready_replicas() == 2, "gateway")
    yield process
    process.stop()


def test_workers_share_the_port_and_their_metrics_add_up(gateway):
    assert len(children(gateway.proc.pid)) == 2
    for _ in range(40):  # a new connection each: the kernel spreads them over the workers
        with httpx.Client(base_url=gateway.url) as client:
            client.post("/v1/embeddings", json={"input": "hello"}).raise_for_status()
    text = httpx.get(gateway.url + "/metrics").text
    count = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith('hedgerow_gateway_request_seconds_count{route="/v1/embeddings",'
                                   'status="200"}'))
    assert count == 40
    assert 'hedgerow_gateway_inputs_total{model="all-MiniLM-L6-v2"} 40.0' in text
    info = [line for line in text.splitlines() if line.startswith("hedgerow_build_info{")]
    assert len(info) == 1 and 'component="gateway"' in info[0] and info[0].endswith(" 1.0")


def test_a_stop_closes_a_stalled_upload_and_exits_cleanly(gateway):
    port = int(gateway.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as stalled:
        stalled.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                        b"\r\n{")
        time.sleep(0.3)
        gateway.proc.send_signal(signal.SIGTERM)
        assert stalled.recv(1) == b""  # closed by the stop, not left to its body timeout
        assert gateway.stop(timeout=60) == 0
    log = gateway.log_path.read_text()
    assert "Traceback" not in log and "stop_abandoned" not in log, log
