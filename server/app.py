"""The server process's life: listen, load, serve, drain, exit.

Order of events: the golden set (`--golden-set`) is read, so a bad one stops the server before
anything else; the gRPC listener (Embedder, grpc.health.v1 with health NOT_SERVING, and server
reflection, so grpcurl and other reflection clients list and call the services without the
.proto), plaintext or, with --tls-cert/--tls-key/--tls-ca, mutual TLS for all three, and
the HTTP listener come up, so probes get answers while the model loads on a worker
thread; the embedding space is measured there too (fingerprint, golden-set check:
server/space.py, server/golden_check.py), before the hot-set capture; then the scheduling loop
starts and health turns SERVING once the engine is loaded, its warmup has returned and the
probe batch's rows are taken (server/engine_health.py). From then on the probe runs every
--probe-interval while the server is idle; when it, or a step, shows the engine failed, health
turns NOT_SERVING at once and stays so, /livez answers 503 (the kubelet restarts the container)
and /warmup's `failed` says why; the process keeps running until it is restarted. SIGTERM
or SIGINT turns health NOT_SERVING, stops admitting (new Embed calls get UNAVAILABLE), finishes
admitted work within the shutdown grace, stops the listeners and returns 0. If the scheduling
loop itself fails (a bug), the same shutdown runs at once and returns 1, so a supervisor
restarts the process. Knows nothing about batching or byte layouts.
"""

import asyncio
import gc
import logging
import os
import signal
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from hedgerow.addresses import check_can_listen, host_port
from hedgerow.defaults import default_model_path, model_name
from hedgerow.errors import ConfigError, HedgerowError
from hedgerow import tracing
from hedgerow.golden_set import GoldenSet
from hedgerow.logs import fields
from hedgerow.server import affinity, golden_check, space
from hedgerow.server.convert import space_field
from hedgerow.server.engine_health import Probe
from hedgerow.server.engine_thread import EngineThread
from hedgerow.server.http import start_http
from hedgerow.server.loop import EmbedLoop
from hedgerow.server.metrics import ServerMetrics
from hedgerow.server.scheduler import Scheduler
from hedgerow.server.service import SERVICE_NAME, EmbedderService, add_to_server
from hedgerow.server_settings import ServerSettings
from hedgerow.server.state import ServerState, warmup_report
from hedgerow.warmup_report import GoldenCheck

log = logging.getLogger("hedgerow.server")

HEALTH_SERVICES = ("", SERVICE_NAME)  # overall health and the Embedder service
# What reflection lists: every service this server answers.
REFLECTED_SERVICES = (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                      reflection.SERVICE_NAME)
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_SERVING = health_pb2.HealthCheckResponse.SERVING


RESPONSE_WRITE_SECONDS = 0.2


class StoppedWhileLoading(Exception):
    """Stop was asked for before the model finished loading. The load cannot be interrupted
    on its thread and nothing was served: the process should exit without waiting for it."""


def grpc_options(settings: ServerSettings) -> list[tuple[str, int]]:
    """Message size limits (responses unbounded); no port sharing.

    A request may be several times the largest legal one, so that one over
    --max-request-tokens reaches the decoder and gets INVALID_ARGUMENT naming the limit; past
    that gRPC itself answers RESOURCE_EXHAUSTED ("Received message larger than max")."""
    legal_bytes = 8 * settings.max_request_tokens + 64 * 1024  # int32 ids + cu_seqlens
    request_bytes = min(4 * legal_bytes + (1 << 20), (1 << 31) - 1)
    return [
        ("grpc.max_receive_message_length", request_bytes),
        ("grpc.max_send_message_length", -1),
        # grpc shares ports by default: a second server on a taken port would start and
        # split the traffic instead of failing.
        ("grpc.so_reuseport", 0),
        # Gateways keep their channels alive with a ping every 10 s, calls or not; grpc's
        # default (one ping per 5 minutes without data) answers that with GOAWAY
        # "too_many_pings", and the gateway drops this replica for a moment.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ]


def load_engine(settings: ServerSettings, gpu_settings: Any = None,
                golden: GoldenSet | None = None):
    """Load the engine, measure its space, capture its hot set (blocking; run it on the engine
    thread). Returns (engine, space.Space, the golden-set check or None).

    Raises ModelLoadError. `gpu_settings` (hedgerow.gpu_settings.GpuSettings) configures the
    CUDA graph cache; None takes the engine's defaults; the CPU engine ignores it.
    """
    import torch

    from hedgerow.engine.engine import Engine

    if settings.device == "cpu":
        torch.set_num_threads(settings.torch_threads())
    path = Path(settings.model or default_model_path())
    weights = space.start_weights_digest(path)
    engine = Engine.load(path, device=settings.device, dtype=settings.dtype,
                         gpu_settings=gpu_settings,
                         task=None if settings.task == "auto" else settings.task)
    # Before the capture: a replica in the wrong space is told so without waiting for it.
    measured, check = measure_space(engine, path, golden, weights)
    engine.warmup()
    return engine, measured, check


def measure_space(engine: Any, directory: Path, golden: GoldenSet | None,
                  weights: Future[str]
                  ) -> tuple[space.Space, GoldenCheck | None]:
    """The engine's space and, with a golden set, its check (blocks; steps the engine);
    `weights` is the directory's `space.start_weights_digest`."""
    began = time.perf_counter()
    text_tokenizer = space.tokenizer(directory)
    measured = space.measure(engine, directory, text_tokenizer, weights)
    check = None if golden is None else golden_check.check(engine, text_tokenizer, golden,
                                                           directory)
    cosine = check.min_cosine if check else None
    delta = check.max_score_delta if check else None
    log.info("%s", fields(event="server.space", seconds=time.perf_counter() - began,
                          fingerprint=measured.fingerprint,
                          golden_texts=check.texts if check else None,
                          golden_min_cosine=None if cosine is None else f"{cosine:.6f}",
                          golden_max_score_delta=None if delta is None else f"{delta:.6f}",
                          golden_problem=check.problem if check else None))
    return measured, check


async def serve(settings: ServerSettings, gpu_settings: Any = None,
                stop: asyncio.Event | None = None,
                loader: Callable[[ServerSettings, Any], Any] = load_engine) -> int:
    """Run the server until SIGTERM/SIGINT (or `stop` is set); returns the exit status.

    `loader(settings, gpu_settings, golden)` returns (engine, its space, the golden-set check)
    (blocking; it runs on the engine thread). Raises ConfigError for an unreadable golden set.
    Unless `settings.host_cpu` is off, the calling thread and gRPC's threads stay on one CPU
    from here on (server/affinity.py): an in-process caller that minds passes off.
    """
    golden = None
    if settings.golden_set is not None:
        golden = golden_check.read_golden_set(settings.golden_set)
    stop = stop or asyncio.Event()
    running = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        running.add_signal_handler(signum, stop.set)

    state = ServerState(settings=settings, metrics=ServerMetrics(
        model_name(Path(settings.model or default_model_path()))))
    failed = asyncio.Event()  # the loop failed the engine
    health = HealthServicer()
    for name in HEALTH_SERVICES:
        await health.set(name, _NOT_SERVING)
    # Pinned before gRPC starts its threads: they inherit this thread's CPUs.
    cpus = affinity.plan(settings.host_cpu)
    if cpus is not None and not affinity.pin(cpus.io):
        cpus = None  # refused: every thread stays where the OS puts it
    if cpus is not None:
        log.info("%s", fields(event="server.cpus", io=sorted(cpus.io),
                              engine=sorted(cpus.engine)))
    server = grpc.aio.server(options=grpc_options(settings))
    traces = tracing.setup("server", settings.otlp_endpoint)
    add_to_server(EmbedderService(state, traces), server)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(REFLECTED_SERVICES, server)
    address = host_port(settings.host, settings.port)
    check_can_listen(settings.host, settings.port, "gRPC")
    # With --tls-*, every service on the port (Embedder, health, reflection) is behind the
    # same credentials: mutual TLS, a client certificate signed by the CA required. Never a
    # plaintext port beside it.
    files = settings.tls_files()
    try:
        if files is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, grpc.ssl_server_credentials(
                [(files.key, files.cert)], root_certificates=files.ca,
                require_client_auth=True))
    except RuntimeError:  # grpcio raises where older releases returned 0
        bound = 0
    if bound == 0:
        raise ConfigError(f"cannot listen for gRPC on {address}: is the port in use?")
    await server.start()
    try:
        http = await start_http(state, settings.host, settings.http_port)
    except OSError as error:
        await server.stop(None)
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise ConfigError(
            f"cannot listen for HTTP on {host_port(settings.host, settings.http_port)}: {reason}"
        ) from None
    log.info("%s", fields(event="server.listening", grpc=address,
                          tls="mutual" if files else "off",
                          http=host_port(settings.host, settings.http_port)))
    try:
        try:
            loaded = await _load(state, stop, lambda: loader(settings, gpu_settings, golden),
                                 cpus.engine if cpus else None, failed)
        except BaseException:
            await server.stop(None)  # a listener left to the collector logs a traceback
            raise
        if not loaded:
            await server.stop(None)
            raise StoppedWhileLoading()
        await _set_serving(state, health)
        watching = asyncio.ensure_future(_watch_engine(state, health, failed))
        await stop.wait()
        watching.cancel()
        return await _shutdown(state, health, server)
    finally:
        http.close()
        await http.wait_closed()
        if traces is not None:
            traces.close()


async def _load(state: ServerState, stop: asyncio.Event, load: Callable[[], Any],
                engine_cpus: set[int] | None, failed: asyncio.Event) -> bool:
    """Load the engine unless asked to stop first, take the probe's rows, start the loop
    (which sets `failed` when it fails the engine). Raises ModelLoadError."""
    settings = state.settings
    # The engine is loaded, warmed and stepped on this one thread.
    threads = EngineThread(depth=settings.overlap_depth(), cpus=engine_cpus)
    loading = asyncio.ensure_future(threads.run(load))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({loading, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not loading.done():
        return False
    try:
        engine, state.space, state.golden = loading.result()
    except HedgerowError as error:
        state.load_error = str(error)
        await threads.close()
        raise
    threads.engine = engine
    if str(engine.info.device).startswith("cuda"):
        watch_device_memory(state.metrics, engine.info.device)
    probe = Probe(engine.info.vocab_size, settings.probe_min_cosine)
    await threads.run(probe.take_reference, engine)
    threads.probe = probe
    scheduler = Scheduler(settings.max_batch_tokens, settings.max_batch_seqs,
                          settings.max_inflight_tokens)
    loop = EmbedLoop(threads, scheduler, state.metrics, on_crash=lambda error: stop.set(),
                     on_engine_failed=lambda reason: failed.set())
    state.space_field = space_field(state.space.fingerprint)
    state.engine, state.loop, state.engine_thread = engine, loop, threads
    return True


def watch_device_memory(metrics: ServerMetrics, device: Any) -> None:
    """The GPU's memory gauges, read from torch's caching allocator at each scrape (no device
    synchronisation: the allocator's own counters)."""
    import torch

    metrics.watch_device_memory(lambda: torch.cuda.memory_allocated(device),
                                lambda: torch.cuda.memory_reserved(device))


async def _set_serving(state: ServerState, health: HealthServicer) -> None:
    """Health SERVING: the engine is loaded and its warmup (hot-set capture) has returned.

    A hot set that could not be captured whole (a failed or over-budget capture) runs those
    configurations eagerly: slower, still correct, so the replica serves and says so in the
    log and in /warmup's coverage, which the operator's graphs-warm gate reads.
    """
    report = warmup_report(state)
    if not report.hot_set_complete:
        log.warning("%s", fields(event="server.hot_set_incomplete", coverage=report.coverage,
                                 hot_set=report.hot_set, captured=report.hot_set_captured))
    # Everything alive now (model, modules, the engine's buffers) lives until exit: move it out
    # of the collector's view, so full collections while serving stay short (tail latency).
    gc.freeze()
    for name in HEALTH_SERVICES:
        await health.set(name, _SERVING)
    state.serving = True
    state.metrics.serving.set(1)
    info = state.engine.info
    log.info("%s", fields(event="server.serving", model=info.name, dimensions=info.dimensions,
                          device=info.device, dtype=info.dtype, space=state.space.fingerprint))


async def _watch_engine(state: ServerState, health: HealthServicer,
                        failed: asyncio.Event) -> None:
    """Every --probe-interval (0: never), while nothing is admitted, check the engine with
    the probe; once the engine failed (here or in a step), take it out of traffic for good:
    health NOT_SERVING, /readyz and /livez 503."""
    loop, threads = state.loop, state.engine_thread
    interval = state.settings.probe_interval or None
    while not failed.is_set():
        try:
            await asyncio.wait_for(failed.wait(), interval)
        except asyncio.TimeoutError:
            if loop.idle and not failed.is_set():
                problem = await threads.run(threads.probe.check, state.engine)
                if problem is not None:
                    loop.fail_engine(problem)
    state.serving = False
    state.metrics.serving.set(0)
    for name in HEALTH_SERVICES:
        await health.set(name, _NOT_SERVING)


async def _shutdown(state: ServerState, health: HealthServicer, server: grpc.aio.Server) -> int:
    settings = state.settings
    began = time.monotonic()
    state.serving = False
    state.metrics.serving.set(0)
    await health.enter_graceful_shutdown()
    loop = state.loop
    inflight = loop.inflight_tokens if loop else 0
    log.info("%s", fields(event="server.draining", inflight_tokens=inflight,
                          grace_seconds=settings.shutdown_grace))
    drained = True
    if loop is not None:
        drained = await loop.drain(settings.shutdown_grace)
    # Handlers whose futures are complete still return and write their responses. Gateways'
    # health Watch streams never end on their own: waiting for them would always spend the
    # whole grace, so wait for our handlers instead, then give writes a moment (even at the
    # grace's end: the work is done, only the answers are left to send).
    while state.active_calls and time.monotonic() - began < settings.shutdown_grace:
        await asyncio.sleep(0.01)
    left = max(settings.shutdown_grace - (time.monotonic() - began), 0.0)
    await server.stop(RESPONSE_WRITE_SECONDS if drained else left)
    if loop is not None:
        await loop.close()
    log.info("%s", fields(event="server.stopped", drained=drained,
                          seconds=time.monotonic() - began))
    if loop is not None and loop.crashed is not None:
        return 1  # a supervisor should restart this process
    return 0
