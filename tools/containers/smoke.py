"""Run the three built images as the chart runs them and check that they serve.

Every container runs as its image's non-root user, with a read-only root filesystem, every
capability dropped and no privilege gain (Builder.hardened_run_options). Checked:
- each image's config: a numeric non-root USER, HOME=/tmp, a HEALTHCHECK;
- operator: `hedgerow operator --help` answers;
- gateway: no torch and no weight files inside;
- server on CPU with the baked all-MiniLM-L6-v2 (float32), until its HEALTHCHECK passes and
  its process runs as that user; gateway in front of it, until its HEALTHCHECK passes and
  /readyz sees the server; then /v1/embeddings answers with the vectors `hedgerow embed
  --dtype float32` computes here, cosine at least MIN_COSINE per text.
Containers are removed afterwards, passed or not. Knows nothing about building.
"""

import json
import math
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from builder import Builder, ContainerError

MIN_COSINE = 0.99999
START_TIMEOUT_S = 300.0
TEXTS = [
    "Roses are red",
    "The quick brown fox jumps over the lazy dog.",
    "Hedgerows shelter birds, insects and small mammals; hawthorn and blackthorn are common.",
    "Ünïcödé façade — naïve café 東京",
]
MODEL_DIR = "/opt/hedgerow/models/all-MiniLM-L6-v2"
# Runs inside the gateway image: what must not be there.
_GATEWAY_CONTENTS = f"""
import importlib.util, json, pathlib
print(json.dumps({{"torch": importlib.util.find_spec("torch") is not None,
    "files": sorted(p.name for p in pathlib.Path("{MODEL_DIR}").rglob("*") if p.is_file())}}))
"""


class SmokeFailure(Exception):
    """A check failed; the message says which and what was seen."""


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def output(command: list[str], timeout: float = 300.0) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise SmokeFailure(f"`{' '.join(command[:6])} ...` failed ({result.returncode}):\n"
                           f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout


def check_config(builder: Builder, image: str) -> list[str]:
    """The image's HEALTHCHECK command; SmokeFailure unless the config is as the chart needs."""
    config = builder.image_config(image)
    if not config:
        raise SmokeFailure(f"{image} does not exist: build it first (make images)")
    user = str(config.get("User", "")).split(":")[0]
    if not user.isdigit() or user == "0":
        raise SmokeFailure(f"{image} runs as user {user!r}: want a numeric non-root user, "
                           "which Kubernetes' runAsNonRoot can verify")
    if "HOME=/tmp" not in config.get("Env", []):
        raise SmokeFailure(f"{image} has no HOME=/tmp: {config.get('Env')}")
    test = (config.get("Healthcheck") or {}).get("Test") or []
    if test[:1] != ["CMD"]:
        raise SmokeFailure(f"{image} has no exec-form HEALTHCHECK (got {test!r})")
    return test[1:]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def http_json(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {"error": error.read().decode(errors="replace")[:500]}
    except (urllib.error.URLError, OSError) as error:
        return 0, {"error": str(error)}


class Fleet:
    """The containers this test started, by name, so that all of them are removed."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self.names: list[str] = []
        self.suffix = uuid.uuid4().hex[:8]

    def start(self, role: str, image: str, env: dict[str, str]) -> str:
        name = f"hedgerow-smoke-{role}-{self.suffix}"
        self.names.append(name)
        output(self.builder.run_command(image, [], name=name, env=env, detach=True))
        return name

    def logs(self, name: str) -> str:
        result = subprocess.run([self.builder.name, "logs", name], capture_output=True,
                                text=True)
        return (result.stdout + result.stderr)[-4000:]

    def running(self, name: str) -> bool:
        result = subprocess.run([self.builder.name, "inspect", "--type=container", "--format",
                                 "{{.State.Running}}", name], capture_output=True, text=True)
        return result.stdout.strip() == "true"

    def wait_healthy(self, name: str, healthcheck: list[str]) -> float:
        """Run the image's HEALTHCHECK command in the container until it passes; seconds."""
        start = time.monotonic()
        last = ""
        while time.monotonic() - start < START_TIMEOUT_S:
            if not self.running(name):
                raise SmokeFailure(f"{name} exited:\n{self.logs(name)}")
            result = subprocess.run(self.builder.exec_command(name, healthcheck),
                                    capture_output=True, text=True, timeout=60)
            if result.returncode == 0:
                return time.monotonic() - start
            last = (result.stdout + result.stderr).strip()
            time.sleep(2)
        raise SmokeFailure(f"{name} not healthy after {START_TIMEOUT_S:.0f} s ({last}):\n"
                           f"{self.logs(name)}")

    def remove_all(self) -> None:
        for name in self.names:
            subprocess.run([self.builder.name, "rm", "--force", name], capture_output=True)


def check_operator(builder: Builder, image: str) -> None:
    text = output(builder.run_command(image, ["operator", "--help"]))
    if "hedgerow operator" not in text:
        raise SmokeFailure(f"`hedgerow operator --help` in {image} printed:\n{text[:1000]}")


def check_gateway_contents(builder: Builder, image: str) -> None:
    seen = json.loads(output(builder.run_command(image, ["-P", "-c", _GATEWAY_CONTENTS],
                                                 entrypoint="python")))
    if seen["torch"]:
        raise SmokeFailure(f"{image} carries torch, which the gateway never imports")
    if "model.safetensors" in seen["files"] or "tokenizer.json" not in seen["files"]:
        raise SmokeFailure(f"{image}'s {MODEL_DIR} should hold the tokenizer and configs "
                           f"only; it holds {seen['files']}")


def reference_vectors(hedgerow: Path) -> list[list[float]]:
    """What `hedgerow embed` computes here, in float32, for TEXTS."""
    text = output([str(hedgerow), "embed", "--dtype", "float32", *TEXTS])
    return [row["embedding"] for row in json.loads(text)["data"]]


def check_embeddings(url: str, expected: list[list[float]]) -> float:
    """The lowest cosine between the gateway's vectors and `expected`."""
    status, body = http_json(url, {"model": "all-MiniLM-L6-v2", "input": TEXTS})
    if status != 200:
        raise SmokeFailure(f"POST {url} answered {status}: {body}")
    got = [row["embedding"] for row in sorted(body["data"], key=lambda row: row["index"])]
    if len(got) != len(expected) or any(len(g) != len(e) for g, e in zip(got, expected)):
        raise SmokeFailure(f"{url} answered {len(got)} vectors of {len(got[0])} dimensions; "
                           f"`hedgerow embed` gives {len(expected)} of {len(expected[0])}")
    worst = min(cosine(g, e) for g, e in zip(got, expected))
    if worst < MIN_COSINE:
        raise SmokeFailure(f"the gateway's vectors differ from `hedgerow embed`'s: cosine "
                           f"{worst:.6f} < {MIN_COSINE}")
    return worst


def wait_ready(url: str) -> None:
    start = time.monotonic()
    while time.monotonic() - start < START_TIMEOUT_S:
        status, body = http_json(url)
        if status == 200:
            return
        time.sleep(1)
    raise SmokeFailure(f"{url} not ready after {START_TIMEOUT_S:.0f} s: {status} {body}")


def smoke_test(builder: Builder, images: dict[str, str], hedgerow: Path) -> None:
    """`images` maps gateway, server and operator to built image names; `hedgerow` is the
    CLI here that computes the reference vectors."""
    if not builder.can_run:
        raise ContainerError(f"{builder.name} cannot run containers: install podman or docker")
    checks = {role: check_config(builder, image) for role, image in images.items()}
    say("image configs: numeric non-root user, HOME=/tmp, HEALTHCHECK: ok")
    check_operator(builder, images["operator"])
    say("operator: `hedgerow operator --help` answers: ok")
    check_gateway_contents(builder, images["gateway"])
    say("gateway: no torch, no weight files: ok")
    expected = reference_vectors(hedgerow)
    grpc_port, http_port, gateway_port = free_port(), free_port(), free_port()
    fleet = Fleet(builder)
    try:
        server = fleet.start("server", images["server"], {
            "HEDGEROW_DEVICE": "cpu", "HEDGEROW_DTYPE": "float32", "HEDGEROW_HOST": "127.0.0.1",
            "HEDGEROW_PORT": str(grpc_port), "HEDGEROW_HTTP_PORT": str(http_port)})
        seconds = fleet.wait_healthy(server, checks["server"])
        say(f"server: healthy (gRPC SERVING) after {seconds:.0f} s")
        uid = output(builder.exec_command(server, ["python", "-P", "-c",
                                                   "import os; print(os.getuid())"])).strip()
        if uid in ("", "0"):
            raise SmokeFailure(f"the server runs as uid {uid!r}")
        gateway = fleet.start("gateway", images["gateway"], {
            "HEDGEROW_HOST": "127.0.0.1", "HEDGEROW_PORT": str(gateway_port),
            "HEDGEROW_SERVERS": f"127.0.0.1:{grpc_port}"})
        seconds = fleet.wait_healthy(gateway, checks["gateway"])
        base = f"http://127.0.0.1:{gateway_port}"
        wait_ready(f"{base}/readyz")
        say(f"gateway: healthy after {seconds:.0f} s, ready with the server")
        worst = check_embeddings(f"{base}/v1/embeddings", expected)
        say(f"/v1/embeddings equals `hedgerow embed` (uid {uid}, lowest cosine {worst:.7f}): ok")
    finally:
        fleet.remove_all()
