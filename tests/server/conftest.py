"""Helpers for the server's integration tests: a real `hedgerow server` process on loopback.

`ServerProcess` starts the CLI in a child process on free ports, waits for gRPC health to say
SERVING, and offers a channel, the /metrics and /warmup bodies, and a clean stop. Modules
start one server each (module-scoped fixtures) to keep the suite fast.
"""

import json
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow.wire import embed_pb2
from tests.conftest import (PORT_RETRIES, child_env, free_port, hedgerow_command,
                            metric_value, says_port_taken)

START_TIMEOUT_S = 120.0
# The float32 references these tests compare against; a test may pass its own --dtype after.
DTYPE = ("--dtype", "float32")
CLS, SEP = 101, 102  # all-MiniLM-L6-v2's [CLS] and [SEP]


def sentence(*words: int, length: int | None = None) -> list[int]:
    """[CLS] words [SEP]; with `length`, the words repeated to `length` tokens in all."""
    body = list(words)
    if length is not None:
        body = (body * length)[: length - 2]
    return [CLS, *body, SEP]


def embed_request(sequences, **options) -> embed_pb2.EmbedRequest:
    """Token-id lists -> EmbedRequest with packed little-endian int32 bytes."""
    flat = [token for seq in sequences for token in seq]
    cu = np.cumsum([0] + [len(seq) for seq in sequences])
    return embed_pb2.EmbedRequest(
        input_ids=np.asarray(flat, dtype="<i4").tobytes(),
        cu_seqlens=np.asarray(cu, dtype="<i4").tobytes(),
        **options,
    )


class ServerProcess:
    """One `hedgerow server` child process on loopback."""

    def __init__(self, *flags: str, log_path) -> None:
        self._flags = flags
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self._spawn_on_new_ports()

    def _spawn_on_new_ports(self) -> None:
        self.port, self.http_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._log.flush()
        self._spawned_at = self._log.tell()  # this start's part of the log begins here
        self.proc = subprocess.Popen(
            hedgerow_command("server", "--host", "127.0.0.1", "--port", str(self.port),
                             "--http-port", str(self.http_port), *DTYPE, *self._flags),
            env=child_env(), stdout=self._log, stderr=subprocess.STDOUT,
        )

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def health(self, timeout: float = 2.0) -> int | None:
        """The overall health status, or None when the server does not answer."""
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout).status
            except grpc.RpcError:
                return None

    def wait_serving(self) -> None:
        """Until SERVING; a server whose port was taken (says_port_taken) starts again on new
        ports, up to PORT_RETRIES times."""
        deadline = time.monotonic() + START_TIMEOUT_S
        retries = PORT_RETRIES
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.flush()
                if not (retries and says_port_taken(self.log_path, self._spawned_at)):
                    raise AssertionError(
                        f"server exited with {self.proc.returncode}:\n{self.log_text()}")
                retries -= 1
                self._spawn_on_new_ports()
                continue
            if self.health() == health_pb2.HealthCheckResponse.SERVING:
                return
            time.sleep(0.1)
        raise AssertionError(f"server not SERVING after {START_TIMEOUT_S}s:\n{self.log_text()}")

    def http_get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=10) as r:
            return r.read()

    def warmup(self) -> dict:
        return json.loads(self.http_get("/warmup"))

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` on /metrics whose labels include `labels` (0.0
        when absent)."""
        return metric_value(self.http_get("/metrics").decode(), name, **labels)

    def terminate(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def start_server(tmp_path_factory):
    """Factory: start a server with extra flags, wait until SERVING; all stopped at the end."""
    started = []

    def start(*flags: str, wait: bool = True) -> ServerProcess:
        log_path = tmp_path_factory.mktemp("server") / "server.log"
        server = ServerProcess(*flags, log_path=log_path)
        started.append(server)
        if wait:
            server.wait_serving()
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            code = server.terminate()
            if code != 0:
                sys.stderr.write(server.log_text())
        server.kill()
