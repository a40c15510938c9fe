"""`hedgerow serve`: the local all-in-one stack, one server and the gateway, in one command.

Owns the two child processes' lives: pick the server's ports (50051 and 9090 when free, any free
ports otherwise, picked again if another process takes one before the server binds it), start
`hedgerow server` and wait until its gRPC health says SERVING, start `hedgerow gateway` in front of
it and wait until /readyz answers 200, print where to send requests, and on Ctrl-C or SIGTERM stop
the gateway, then the server, and exit 0. The children run in their own process groups so a
terminal's Ctrl-C reaches only this process, which stops them in order; each stops by itself if
this process is killed outright. Knows nothing about models or HTTP routes beyond those two probes.
"""

import argparse
import dataclasses
import errno
import http.client
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow import logs, settings
from hedgerow.addresses import bind_error, check_resolves, host_port
from hedgerow.errors import ConfigError, HedgerowError
from hedgerow.server_settings import ServerSettings
from hedgerow.settings import field_of, setting

HELP = ("Run the local stack: one embedding server (default model on CPU) and the "
        "OpenAI-compatible gateway on 127.0.0.1:8080. Ctrl-C stops both.")

log = logging.getLogger("hedgerow.serve")

DEFAULT_GRPC_PORT = 50051
DEFAULT_METRICS_PORT = 9090
POLL_S = 0.2
PORT_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    model: Path | None = setting(
        None, "Model directory for the server and the gateway's tokenizer. Unset uses the "
        "packaged all-MiniLM-L6-v2.", unit="path")
    host: str = setting("127.0.0.1", "Address the gateway listens on.")
    port: int = setting(8080, "Port the gateway listens on.", minimum=1, maximum=65535)
    server_port: int = setting(
        0, "The server's gRPC port; 0 takes 50051 when free, else any free port.",
        minimum=0, maximum=65535)
    server_http_port: int = setting(
        0, "The server's /metrics port; 0 takes 9090 when free, else any free port.",
        minimum=0, maximum=65535)
    device: str = setting("cpu", "Where the server runs the model: cpu, cuda or cuda:N.")
    dtype: str = setting(
        field_of(ServerSettings, "dtype").default,
        "The server's compute dtype (as `hedgerow server --dtype`): auto picks bfloat16 where "
        "it is faster and close to float32; float32 gives the reference vectors exactly.",
        choices=field_of(ServerSettings, "dtype").choices)
    task: str = setting(
        field_of(ServerSettings, "task").default,
        "What the server serves (as `hedgerow server --task`): auto reads it from the "
        "checkpoint; sparse serves SPLADE's or BGE-M3's sparse vectors (/embed_sparse, "
        "/v1/embeddings/sparse).",
        choices=field_of(ServerSettings, "task").choices)
    startup_timeout: float = setting(
        300.0, "Longest to wait for the server and the gateway to become ready.",
        unit="seconds", minimum=1)
    stop_timeout: float = setting(
        40.0, "Longest to wait for each child to exit on stop before killing it.",
        unit="seconds", minimum=1)
    log_level: str = setting("info", "Log level of this process and both children.",
                             choices=logs.LOG_LEVELS)
    log_format: str = setting("text", "Format of the log lines of this process and both "
                              "children: text (key=value pairs) or json (one object per line).",
                              choices=logs.LOG_FORMATS)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, ServeSettings)


def say(message: str) -> None:
    """A progress line for the person at the terminal (a log record under --log-format json,
    so every line on stderr is JSON)."""
    if logs.json_configured():
        log.info("%s", logs.fields(event="serve.progress", message=message))
        return
    print(f"hedgerow serve: {message}", file=sys.stderr, flush=True)


def port_free(host: str, port: int) -> bool:
    """Whether `host:port` can be bound now; a host this machine cannot listen on at all is a
    ConfigError, not a busy port."""
    check_resolves(host, port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as the gateway binds it
    error = bind_error(host, port, family)
    if error is not None and error.errno != errno.EADDRINUSE:
        raise ConfigError(f"cannot listen on {host_port(host, port)}: {error.strerror}")
    return error is None


def pick_port(host: str, asked: int, preferred: int, taken: set[int]) -> int:
    """`asked` when non-zero, else `preferred` when free, else a free port from the kernel."""
    if asked:
        return asked
    if preferred not in taken and port_free(host, preferred):
        return preferred
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in taken:
            return port


def hedgerow_child(*args: str) -> subprocess.Popen:
    """Start `hedgerow ARGS` with this interpreter, in its own process group; it stops by
    itself if this process dies without stopping it (hedgerow/lifeline.py)."""
    env = {**os.environ, "HEDGEROW_PARENT_PID": str(os.getpid())}
    return subprocess.Popen([sys.executable, "-P", "-m", "hedgerow", *args],
                            start_new_session=True, env=env)


class Stack:
    """The two children and the stop request; `stop()` is safe to call more than once."""

    def __init__(self, config: ServeSettings) -> None:
        self.config = config
        self.stopping = threading.Event()
        self.children: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen:
        child = hedgerow_child(*args)
        self.children.append((name, child))
        return child

    def wait_until(self, what: str, ready) -> bool:
        """Poll `ready()` until the `what` child is ready; False if asked to stop. Raises if any
        child dies meanwhile: the server dying while the gateway starts would otherwise leave
        the gateway waiting for a replica until --startup-timeout."""
        deadline = time.monotonic() + self.config.startup_timeout
        while not self.stopping.is_set():
            for name, child in self.children:
                if child.poll() is not None:
                    during = "while starting" if name == what else f"while the {what} started"
                    raise HedgerowError(f"the {name} exited with status {child.returncode} "
                                        f"{during}; its log is above")
            if ready():
                return True
            if time.monotonic() > deadline:
                raise HedgerowError(f"the {what} was not ready after "
                                    f"{self.config.startup_timeout:.0f} s (--startup-timeout)")
            self.stopping.wait(POLL_S)
        return False

    def watch(self) -> int:
        """Block until asked to stop (0) or until a child exits on its own (1)."""
        while not self.stopping.wait(POLL_S):
            for name, child in self.children:
                if child.poll() is not None:
                    say(f"the {name} exited unexpectedly with status {child.returncode}; "
                        "stopping")
                    return 1
        return 0

    def stop(self) -> None:
        """Stop children in reverse start order: gateway first, then the server."""
        for name, child in reversed(self.children):
            if child.poll() is not None:
                continue
            say(f"stopping the {name} (pid {child.pid})")
            child.terminate()
            try:
                child.wait(self.config.stop_timeout)
            except subprocess.TimeoutExpired:
                say(f"the {name} did not stop within {self.config.stop_timeout:.0f} s; killing it")
                child.kill()
                child.wait()


def server_serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=1.0)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def gateway_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=1.0) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError, http.client.HTTPException):  # not (yet) our gateway
        return False


def start_server(stack: Stack, model: list[str]) -> str | None:
    """Start the server and wait until it is SERVING: its gRPC address, or None when asked to
    stop first. A port picked here, free a moment before, can be taken by another process
    before the server binds it: the server exits saying so, and its ports are picked again
    (PORT_ATTEMPTS starts at most). Ports asked for are checked by `run` and never re-picked."""
    config = stack.config
    attempt = 1
    while True:
        grpc_port = pick_port("127.0.0.1", config.server_port, DEFAULT_GRPC_PORT, {config.port})
        http_port = pick_port("127.0.0.1", config.server_http_port, DEFAULT_METRICS_PORT,
                              {config.port, grpc_port})
        address = f"127.0.0.1:{grpc_port}"
        say(f"starting the server on {address} (model "
            f"{config.model or 'all-MiniLM-L6-v2, packaged'}, {config.device}; metrics on "
            f"http://127.0.0.1:{http_port}/metrics)")
        server = stack.start(
            "server", "server", *model, "--host", "127.0.0.1", "--port", str(grpc_port),
            "--http-port", str(http_port), "--device", config.device, "--dtype", config.dtype,
            "--task", config.task,
            "--log-level", config.log_level, "--log-format", config.log_format)
        try:
            if not stack.wait_until("server", lambda: server_serving(address)):
                return None
        except HedgerowError:
            picked = [port for port, asked in ((grpc_port, config.server_port),
                                               (http_port, config.server_http_port)) if not asked]
            taken = [port for port in picked if not port_free("127.0.0.1", port)]
            if server.poll() is None or not taken or attempt == PORT_ATTEMPTS:
                raise
            stack.children.remove(("server", server))
            say(f"port {taken[0]} was taken by another process while the server started; "
                "picking other ports")
            attempt += 1
            continue
        say(f"the server (pid {server.pid}) is SERVING; starting the gateway")
        return address


def run(args: argparse.Namespace) -> int:
    config = settings.load(ServeSettings, args)
    logs.configure(config.log_level, config.log_format)
    if not port_free(config.host, config.port):
        raise ConfigError(f"{config.host}:{config.port} is in use; stop what holds it or pass "
                          "--port")
    asked = [port for port in (config.port, config.server_port, config.server_http_port) if port]
    if len(set(asked)) < len(asked):
        raise ConfigError(f"--port, --server-port and --server-http-port must differ; got "
                          f"{config.port}, {config.server_port}, {config.server_http_port}")
    for flag, port in (("--server-port", config.server_port),
                       ("--server-http-port", config.server_http_port)):
        # Asked for and held by someone else: the gateway would find that process's server
        # SERVING and report ready before ours failed to bind.
        if port and not port_free("127.0.0.1", port):
            raise ConfigError(f"{flag} {port} is in use on 127.0.0.1; stop what holds it or "
                              f"pick another {flag}")
    model = ["--model", str(config.model)] if config.model else []
    url = f"http://{host_port(config.host, config.port)}"

    stack = Stack(config)
    previous = {signum: signal.signal(signum, lambda *_: stack.stopping.set())
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        server_address = start_server(stack, model)
        if server_address is not None:
            gateway = stack.start(
                "gateway", "gateway", *model, "--servers", server_address,
                "--host", config.host, "--port", str(config.port),
                "--log-level", config.log_level, "--log-format", config.log_format)
            if stack.wait_until("gateway", lambda: gateway_ready(url)):
                say(f"the gateway (pid {gateway.pid}) is ready")
                say(f"ready: POST {url}/v1/embeddings (OpenAI-compatible). Ctrl-C stops.")
                status = stack.watch()
                if status:
                    return status
        say("stopping")
        return 0
    finally:
        stack.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if stack.stopping.is_set():
            say("stopped")
