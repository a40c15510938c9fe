"""host:port text for listeners, logs and URLs, with IPv6 hosts in brackets ("[::1]:50051"), and
the checks that a host to listen on resolves and that a port there can be listened on."""

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


def check_can_listen(host: str, port: int, what: str) -> None:
    """ConfigError saying why `what` (e.g. "gRPC") cannot listen on host:port: a host that does
    not resolve, an address this machine does not have, a port in use. grpc itself only says
    that adding the port failed, and logs its own line. A probe, so a race with another
    process remains possible: the caller still handles the listener's own failure."""
    check_resolves(host, port)
    if host in ("::", "[::]"):
        return  # grpc falls back from the IPv6 wildcard to 0.0.0.0: only it can tell
    error = bind_error(host, port)
    if error is not None:
        raise ConfigError(f"cannot listen for {what} on {host_port(host, port)}: "
                          f"{error.strerror}")


def bind_error(host: str, port: int, family: int = 0) -> OSError | None:
    """Why nothing can listen on host:port now (None when something can): a bind and listen
    on each address `host` resolves to (within `family`, 0 for any), as a listener would set
    it up (SO_REUSEADDR: a port left in TIME_WAIT is free, a listening one is not). Listening
    on one of the addresses is enough, as for grpc; the first failure is returned otherwise."""
    first = None
    for af, kind, proto, _, address in socket.getaddrinfo(host, port, family=family,
                                                          type=socket.SOCK_STREAM):
        with socket.socket(af, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                probe.listen(1)
                return None
            except OSError as error:
                first = first or error
    return first
