"""Real `hedgerow` processes for the integration tests, each on loopback ports picked free.

A port picked free may be taken by another socket before the child binds it (see free_port):
a child whose log says so (says_port_taken) starts again on new ports, up to PORT_RETRIES
times, while a test waits for it (`Child.wait_until`).
"""

import abc
import json
import signal
import subprocess
import time
import urllib.request

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow.commands.serve import server_serving
from tests.conftest import (PORT_RETRIES, child_env, free_port, hedgerow_command, metric_value,
                            says_port_taken)

START_TIMEOUT_S = 180.0


class Child(abc.ABC):
    """A child process with its log in a file; a subclass gives its command line on newly picked
    ports (`_command_on_new_ports`); `env`: variables (HEDGEROW_* settings, say) on top of
    child_env()'s."""

    def __init__(self, log_path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._env = {**child_env(), **(env or {})}
        self._log = open(log_path, "wb")
        self._spawn()

    @abc.abstractmethod
    def _command_on_new_ports(self) -> list[str]:
        """The command line, on ports picked now (and kept on self for the test)."""

    def _spawn(self) -> None:
        command = self._command_on_new_ports()
        self._log.flush()
        self._spawned_at = self._log.tell()  # where the log of this start begins
        self.proc = subprocess.Popen(command, env=self._env, stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def log_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_until(self, ready, what: str) -> None:
        """Until `ready()`; raises with the log when the child exits (other than for a taken
        port) or START_TIMEOUT_S pass."""
        deadline = time.monotonic() + START_TIMEOUT_S
        retries = PORT_RETRIES
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.flush()
                if not (retries and says_port_taken(self.log_path, self._spawned_at)):
                    raise AssertionError(f"{what} exited with {self.proc.returncode}:\n"
                                         f"{self.log_text()}")
                retries -= 1
                self._spawn()
                continue
            if ready():
                return
            time.sleep(0.1)
        raise AssertionError(f"{what} not ready after {START_TIMEOUT_S}s:\n{self.log_text()}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then SIGKILL after `timeout` seconds; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class RealServer(Child):
    """`hedgerow server` in float32 (the references the tests compare against) with `flags` after
    (a test's own --dtype, say), the packaged model on CPU."""

    def __init__(self, log_path, *flags: str) -> None:
        self._flags = flags
        super().__init__(log_path)

    def _command_on_new_ports(self) -> list[str]:
        self.port, self.http_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        return self._command()

    def _command(self) -> list[str]:
        """The command line on self.port and self.http_port: the server app by another entry
        point (a test's own script) overrides this."""
        return hedgerow_command("server", "--host", "127.0.0.1", "--port", str(self.port),
                                "--http-port", str(self.http_port), "--dtype", "float32",
                                *self._flags)

    def health(self, timeout: float = 2.0) -> int | None:
        """The overall gRPC health status, or None when the server does not answer."""
        with grpc.insecure_channel(self.address) as channel:
            try:
                return health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=timeout).status
            except grpc.RpcError:
                return None

    def serving(self) -> bool:
        return server_serving(self.address)

    def wait_serving(self) -> None:
        self.wait_until(self.serving, "server")

    def http_get(self, path: str) -> bytes:
        """The body of GET `path` on the server's HTTP port (urllib's HTTPError on a 4xx/5xx)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}",
                                    timeout=10) as answer:
            return answer.read()

    def warmup(self) -> dict:
        return json.loads(self.http_get("/warmup"))

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` on /metrics whose labels include `labels` (0.0
        when absent)."""
        return metric_value(self.http_get("/metrics").decode(), name, **labels)


class RealGateway(Child):
    """`hedgerow gateway` in front of `servers`; `auth`: the headers carrying an API key, when
    the gateway has keys (its /readyz names servers only then); `env`: as Child's."""

    def __init__(self, log_path, servers, *flags: str, auth: dict | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.auth = auth
        self._servers, self._flags = servers, flags
        super().__init__(log_path, env=env)

    def _command_on_new_ports(self) -> list[str]:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        return hedgerow_command("gateway", "--servers", ",".join(self._servers), "--port",
                                str(self.port), "--health-interval", "0.2", *self._flags)

    def ready_replicas(self) -> int:
        try:
            answer = httpx.get(self.url + "/readyz", headers=self.auth, timeout=2.0)
        except httpx.HTTPError:
            return 0
        return len(answer.json()["ready_replicas"]) if answer.status_code == 200 else 0


class RealServe(Child):
    """`hedgerow serve` with `flags` (its server's ports are its own pick); `env`: as Child's."""

    def __init__(self, log_path, *flags: str, env: dict[str, str] | None = None) -> None:
        self._flags = flags
        super().__init__(log_path, env=env)

    def _command_on_new_ports(self) -> list[str]:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        return hedgerow_command("serve", "--port", str(self.port), *self._flags)

    def ready(self) -> bool:
        """Whether serve said it is ready (after the gateway's /readyz answered 200, and from
        then on watching both children)."""
        return "hedgerow serve: ready" in self.log_text()


def start_stack(tmp_dir, servers: int, *gateway_flags: str, auth: dict | None = None):
    """`servers` real servers and a gateway over them, all ready (`auth`: as RealGateway's)."""
    procs = [RealServer(tmp_dir / f"server{i}.log") for i in range(servers)]
    for proc in procs:
        proc.wait_serving()
    gateway = RealGateway(tmp_dir / "gateway.log", [p.address for p in procs], *gateway_flags,
                          auth=auth)
    gateway.wait_until(lambda: gateway.ready_replicas() == servers, "gateway")
    return procs, gateway
