"""The images' HEALTHCHECK: is this container's Hedgerow process answering?

Usage: python -P healthcheck.py gateway|server|operator

For plain Docker or Podman users; Kubernetes uses the pods' own probes instead. The port and
address are the process's settings, read from the same HEDGEROW_* environment the process
reads, one setting at a time (a port changed by a command-line flag instead is not seen
here):
- gateway: GET /healthz on its HTTP port answers 200;
- server: the standard gRPC health service reports SERVING, which the server does once its
  model is loaded and its hot graphs are captured; with HEDGEROW_TLS_CERT set (mutual TLS,
  which this probe holds no client certificate for), GET /readyz on its HTTP port answers 200,
  the same state;
- operator: GET /healthz on kopf's liveness port answers 200.
Exit status 0 is healthy, 1 unhealthy (Docker's convention), with one line saying why.
"""

import sys
import urllib.error
import urllib.request

from hedgerow import settings
from hedgerow.errors import ConfigError

TIMEOUT_S = 4.0
# A process listening on every address is reached on loopback.
_ANY = {"", "0.0.0.0", "::", "[::]"}


def local_address(host: str) -> str:
    if host in _ANY:
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def http_ok(url: str) -> str | None:
    """None when GET url answers 200; else why not."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return None if response.status == 200 else f"{url} answered {response.status}"
    except urllib.error.HTTPError as error:
        return f"{url} answered {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return f"{url}: {getattr(error, 'reason', error)}"


def check_gateway() -> str | None:
    from hedgerow.gateway_settings import GatewaySettings

    host = settings.load_one(GatewaySettings, "host")
    return http_ok(f"http://{local_address(host)}:{settings.load_one(GatewaySettings, 'port')}"
                   "/healthz")


def check_server() -> str | None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from hedgerow.server_settings import ServerSettings

    host = settings.load_one(ServerSettings, "host")
    if settings.load_one(ServerSettings, "tls_cert") is not None:
        port = settings.load_one(ServerSettings, "http_port")
        return http_ok(f"http://{local_address(host)}:{port}/readyz")
    target = f"{local_address(host)}:{settings.load_one(ServerSettings, 'port')}"
    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S)
        except grpc.RpcError as error:
            return f"gRPC health at {target}: {error.code().name} {error.details() or ''}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return None if status == "SERVING" else f"gRPC health at {target}: {status}"


def check_operator() -> str | None:
    from hedgerow.operator.main import OperatorSettings

    port = settings.load_one(OperatorSettings, "health_port")
    if not port:
        return "the liveness endpoint is off (HEDGEROW_HEALTH_PORT=0): nothing to check"
    return http_ok(f"http://127.0.0.1:{port}/healthz")


# Each check imports what it needs when it runs: every image has only its own process's
# packages (no grpc in the operator's, no kopf in the gateway's).
CHECKS = {"gateway": check_gateway, "server": check_server, "operator": check_operator}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(f"usage: healthcheck.py {'|'.join(CHECKS)}", file=sys.stderr)
        return 2
    try:
        problem = CHECKS[argv[0]]()
    except ConfigError as error:
        problem = f"bad settings: {error}"
    if problem:
        print(f"unhealthy: {problem}")
        return 1
    print("healthy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
