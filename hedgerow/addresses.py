"""host:port text for listeners, logs and URLs, with IPv6 hosts in brackets ("[::1]:50051"), and
the check that a host to listen on resolves at all."""

import socket

from hedgerow.errors import ConfigError


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_resolves(host: str, port: int) -> None:
    """ConfigError naming `--host` when `host` does not resolve (listeners would otherwise
    report a busy port, or grpc only a log line)."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ConfigError(f"--host {host}: cannot resolve it ({error.strerror})") from None
