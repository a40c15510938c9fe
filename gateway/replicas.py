"""Which embedding servers exist and which of them may take traffic right now.

Owns discovery (a static list, or a headless Service's DNS name re-resolved periodically), one
gRPC channel per server (plaintext, or mutual TLS with the gateway's --tls-* files), and one
health watcher per server: it follows the standard `grpc.health.v1` Watch stream (polling
Check when a server does not implement Watch), fetches the server's Info each time it turns
SERVING (again every interval until it answers), and only then counts the server as ready. A
server the router suspects (at once when it is gone, after --eject-after-failures failed calls
in a row when it answers errors) leaves traffic until its health is confirmed again. Also owns
each server's in-flight token count and failure count, which the router keeps. Knows nothing
about HTTP, chunks or tokenizers.
"""

import asyncio
import logging
import socket
from typing import Callable, Iterable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hedgerow.gateway.admission import Throughput
from hedgerow.gateway_settings import parse_address
from hedgerow.logs import fields
from hedgerow.tls import TlsFiles
from hedgerow.wire import embed_pb2, embed_pb2_grpc

log = logging.getLogger("hedgerow.gateway.replicas")

SERVING = health_pb2.HealthCheckResponse.SERVING
# The health service name a Hedgerow server reports; "" is the server as a whole.
HEALTH_SERVICE = ""
INFO_TIMEOUT_S = 5.0
# Responses of a chunk of 2048 sequences at width 4096 in float32 are 32 MiB.
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.enable_retries", 0),  # the router retries on another replica instead
    # A restarted server is found again within about two seconds, not after gRPC's default
    # reconnect backoff, which grows to two minutes.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class ChannelSecurity:
    """Mutual TLS for every channel: the gateway's certificate presented, the server's checked
    against the CA for `server_name` (the pods' IPs, which discovery dials, are not in their
    certificate; `<name>-server.<namespace>.svc` is), or for each address's host."""

    def __init__(self, files: TlsFiles, server_name: str | None = None) -> None:
        self.credentials = grpc.ssl_channel_credentials(
            root_certificates=files.ca, private_key=files.key, certificate_chain=files.cert)
        self.options: tuple[tuple[str, str], ...] = (
            (("grpc.ssl_target_name_override", server_name),) if server_name else ())


InfoCallback = Callable[["Replica", embed_pb2.InfoResponse], None]
StatusCallback = Callable[["Replica"], None]


class Replica:
    """One server: its channel, stubs, health, Info and in-flight tokens."""

    def __init__(self, address: str, *, on_info: InfoCallback, on_status: StatusCallback,
                 retry_interval: float, security: ChannelSecurity | None = None,
                 interceptors: tuple = ()) -> None:
        self.address = address
        if security is None:
            self.channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS,
                                                     interceptors=interceptors)
        else:
            self.channel = grpc.aio.secure_channel(address, security.credentials,
                                                   options=CHANNEL_OPTIONS + security.options,
                                                   interceptors=interceptors)
        self.embedder = embed_pb2_grpc.EmbedderStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.info: embed_pb2.InfoResponse | None = None
        self.in_flight_tokens = 0
        self.throughput = Throughput()  # measured by the router as calls start and end
        self.last_chosen = 0  # router's pick counter, for round-robin among equals
        self.removed = False  # left discovery (its channel is closing)
        self.busy_until = 0.0  # time.monotonic() until which the router leaves it alone
        self.failures = 0  # calls failed in a row (replica-side errors), kept by the router
        self.failed_at = 0.0  # time.monotonic() of the last of them
        self._serving = False
        self._on_info, self._on_status = on_info, on_status
        self._retry_interval = retry_interval
        self._watcher: asyncio.Task | None = None

    @property
    def ready(self) -> bool:
        """SERVING by its health service, with its Info known."""
        return self._serving and self.info is not None

    def start(self) -> None:
        self._watcher = asyncio.create_task(self._watch(), name=f"health {self.address}")

    def suspect(self, reason: str) -> None:
        """Take the replica out of traffic until its health is confirmed again."""
        if self._serving:
            log.warning("%s", fields(event="replica.suspect", replica=self.address, reason=reason))
            self._set_serving(False)
            if self._watcher is not None:
                self._watcher.cancel()
            self.start()

    def _set_serving(self, serving: bool) -> None:
        if serving != self._serving:
            self._serving = serving
            log.info("%s", fields(event="replica.ready" if serving else "replica.not_ready",
                                  replica=self.address))
            self._on_status(self)

    async def _fetch_info(self) -> bool:
        try:
            self.info = await self.embedder.Info(embed_pb2.InfoRequest(), timeout=INFO_TIMEOUT_S)
        except grpc.aio.AioRpcError as error:
            log.warning("%s", fields(event="replica.info_failed", replica=self.address,
                                     code=error.code().name, detail=error.details()))
            return False
        self._on_info(self, self.info)
        return True

    async def _apply(self, status: int) -> bool:
        """Follow `status`; False when the server is SERVING but its Info could not be had."""
        # Info is asked on every turn to SERVING: a restarted server may serve another version.
        if status == SERVING and not self._serving and not await self._fetch_info():
            self._set_serving(False)
            return False
        self._set_serving(status == SERVING)
        return True

    async def _watch(self) -> None:
        """Follow the health stream forever; on a broken stream, wait and watch again."""
        request = health_pb2.HealthCheckRequest(service=HEALTH_SERVICE)
        polling = False
        while True:
            try:
                if polling:
                    reply = await self.health.Check(request, timeout=INFO_TIMEOUT_S)
                    await self._apply(reply.status)
                else:
                    # Watch sends only changes: when Info fails, end this stream and watch
                    # again after the interval, whose first reply asks for Info again.
                    stream = self.health.Watch(request)
                    async for reply in stream:
                        if not await self._apply(reply.status):
                            stream.cancel()
                            break
                    self._set_serving(False)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNIMPLEMENTED and not polling:
                    log.info("%s", fields(event="replica.health_polling", replica=self.address))
                    polling = True
                    continue
                self._set_serving(False)
                log.debug("%s", fields(event="replica.health_error", replica=self.address,
                                       code=error.code().name))
            await asyncio.sleep(self._retry_interval)

    async def close(self, grace: float | None = None) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        self._set_serving(False)
        await self.channel.close(grace)


class ReplicaSet:
    """The current servers, from a static list or DNS; changes are logged and counted."""

    def __init__(
        self,
        *,
        servers: Iterable[str] = (),
        service_dns: str | None = None,
        dns_interval: float = 10.0,
        health_interval: float = 1.0,
        on_info: InfoCallback,
        on_status: StatusCallback = lambda replica: None,
        on_removed: Callable[[str], None] = lambda address: None,
        tls: TlsFiles | None = None,
        tls_server_name: str | None = None,
        interceptors: tuple = (),  # every channel's gRPC client interceptors (tracing)
    ) -> None:
        self._static = tuple(servers)
        self._interceptors = interceptors
        self._security = None if tls is None else ChannelSecurity(tls, tls_server_name)
        self._dns = parse_address(service_dns, "--service-dns") if service_dns else None
        self._dns_interval = dns_interval
        self._health_interval = health_interval
        self._on_info, self._on_status = on_info, on_status
        self._on_removed = on_removed  # called with the address once its channel closed
        self.replicas: dict[str, Replica] = {}
        self._resolver: asyncio.Task | None = None
        self._closing: set[asyncio.Task] = set()

    def ready(self) -> list[Replica]:
        return [replica for replica in self.replicas.values() if replica.ready]

    async def start(self) -> None:
        if self._dns is None:
            self._update(self._static)
        else:
            await self._resolve_once()
            self._resolver = asyncio.create_task(self._resolve_forever(), name="dns")

    def _update(self, addresses: Iterable[str]) -> None:
        wanted = set(addresses)
        for address in sorted(wanted - self.replicas.keys()):
            log.info("%s", fields(event="replica.added", replica=address))
            replica = Replica(address, on_info=self._on_info, on_status=self._on_status,
                              retry_interval=self._health_interval, security=self._security,
                              interceptors=self._interceptors)
            self.replicas[address] = replica
            replica.start()
        for address in sorted(self.replicas.keys() - wanted):
            log.info("%s", fields(event="replica.removed", replica=address))
            replica = self.replicas.pop(address)
            replica.removed = True  # its metric series go with it: nothing may add them back
            self._on_status(replica)  # the ready set changed
            # Let chunks already on their way finish before the channel closes.
            task = asyncio.create_task(replica.close(grace=30.0), name=f"close {address}")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            task.add_done_callback(lambda _, address=address: self._on_removed(address))

    async def _resolve_once(self) -> None:
        assert self._dns is not None
        host, port = self._dns
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            log.warning("%s", fields(event="dns.failed", name=host, error=str(error)))
            return  # keep the last known set: a DNS hiccup must not drop every server
        addresses = set()
        for family, _, _, _, sockaddr in infos:
            ip = sockaddr[0]
            addresses.add(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
        self._update(addresses)

    async def _resolve_forever(self) -> None:
        while True:
            await asyncio.sleep(self._dns_interval)
            await self._resolve_once()

    async def close(self) -> None:
        if self._resolver is not None:
            self._resolver.cancel()
        await asyncio.gather(*(replica.close() for replica in self.replicas.values()))
        self.replicas.clear()
