"""Start, wait for and stop `hedgerow` processes on loopback, for the benchmarks.

Processes run as `python -P -m hedgerow ...` (never with the repository root on sys.path) in
their own session, with no stray HEDGEROW_ settings from the caller's environment.
"""

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum` (argparse reports anything else)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(text)
        return value
    parse.__name__ = f"integer >= {minimum}"  # argparse's message: "invalid integer >= 2 value"
    return parse


def int_list(minimum: int) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers, at least one, each at least `minimum`."""
    item = at_least(minimum)

    def parse(text: str) -> list[int]:
        values = [item(part) for part in text.split(",") if part.strip()]
        if not values:
            raise ValueError(text)
        return values
    parse.__name__ = f"comma-separated list of integers >= {minimum}"
    return parse


def positive(text: str) -> float:
    """An argparse type: a finite number above 0 (argparse reports anything else)."""
    value = float(text)
    if not 0 < value < math.inf:
        raise ValueError(text)
    return value


positive.__name__ = "number > 0"  # argparse's message: "invalid number > 0 value"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], log_path: Path | None = None,
          log_level: str | None = "warning") -> subprocess.Popen:
    """Start `hedgerow ARGS [--log-level LEVEL]`; output to `log_path` (inherited when None)."""
    if log_level is not None:
        args = [*args, "--log-level", log_level]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDGEROW_")}
    env["PYTHONUNBUFFERED"] = "1"
    output = open(log_path, "w") if log_path is not None else None
    return subprocess.Popen([sys.executable, "-P", "-m", "hedgerow", *args], env=env,
                            stdout=output, stderr=subprocess.STDOUT if output else None,
                            start_new_session=True)


def wait(what: str, proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 180,
         log_path: Path | None = None) -> None:
    """Poll `ready()` until it is true; exit with the log's tail if `proc` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}{_tail(log_path)}")
        if ready():
            return
        time.sleep(0.2)
    raise SystemExit(f"{what} not ready after {timeout:.0f} s{_tail(log_path)}")


def grpc_serving(address: str) -> bool:
    """True when the server at `address` reports grpc.health.v1 SERVING."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM (the servers drain), then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(log_path: Path | None) -> str:
    if log_path is None or not log_path.exists():
        return ""
    return ":\n" + log_path.read_text()[-3000:]
