"""`hedgerow gateway`: the HTTP gateway in front of one or more embedding servers.

Owns start-up: read the settings once, check the tokenizer and the model card load, bind the
port (a clear error when it is taken), and serve it (uvicorn on uvloop, under the limits of
gateway/uvicorn_server.py) in `--workers` processes that share the socket; each worker builds
its own app. With more than one
worker, the workers' metrics go through a shared directory (gateway/metrics.py). SIGINT and
SIGTERM stop it cleanly with status 0: requests already read are answered within the grace.
"""

import argparse
import asyncio
import errno
import logging
import os
import shutil
import socket
import tempfile

from hedgerow import logs, settings
from hedgerow.addresses import check_resolves, host_port
from hedgerow.defaults import default_model_path, model_name
from hedgerow.errors import ConfigError
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.gateway.workers import MULTIPROCESS_DIR, run_workers

HELP = "Run the OpenAI-compatible HTTP gateway: tokenize, chunk and route to servers."

log = logging.getLogger("hedgerow.gateway")

# Longest a stop waits for requests already admitted (a stalled upload is not waited for).
GRACEFUL_STOP_S = 10


def configure_parser(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, GatewaySettings)


def load_parts(config: GatewaySettings):
    """(model card, tokenizer, API keys) for `config`; a bad model directory, template or key
    file raises here with its reason."""
    from hedgerow.gateway.auth import ApiKeys, load_keys
    from hedgerow.gateway.model_card import load_card
    from hedgerow.gateway.tokenizer import TextTokenizer

    model_dir = config.model or default_model_path()
    name = config.served_model_name or model_name(model_dir)
    card = load_card(model_dir, name=name, query_template=config.query_template,
                     document_template=config.document_template)
    tokenizer = TextTokenizer(model_dir, threads=config.tokenizer_threads)
    return card, tokenizer, ApiKeys(load_keys(config.api_keys, config.api_keys_file))


def build_app(config: GatewaySettings):
    """The app for `config`: tokenizer, model card and API keys loaded, nothing started."""
    from hedgerow.gateway.app import create_app

    return create_app(config, *load_parts(config))


def listen(host: str, port: int) -> socket.socket:
    check_resolves(host, port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        hint = ("; is another process using it? Pick another with --port"
                if error.errno == errno.EADDRINUSE else "")
        raise ConfigError(f"cannot listen on {host_port(host, port)} ({error.strerror})"
                          f"{hint}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def worker_count(config: GatewaySettings) -> int:
    return config.workers or len(os.sched_getaffinity(0))


def serve_one(config: GatewaySettings, sock: socket.socket) -> int:
    """One worker: build the app and serve `sock` until SIGINT or SIGTERM; returns 0."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(http_server(config, build_app(config)).serve(sockets=[sock]))
    return 0


def http_server(config: GatewaySettings, app):
    """The uvicorn server for `app` under `config`'s limits (not started)."""
    from hedgerow.gateway import uvicorn_server

    limits = uvicorn_server.Limits(
        head_timeout=config.head_timeout, body_timeout=config.body_timeout,
        max_body_bytes=config.max_body_bytes, max_connections=config.max_connections)
    return uvicorn_server.server(app, limits, app.state.metrics.observe_request,
                                 config.keep_alive_timeout, GRACEFUL_STOP_S)


def _loop_factory():
    """uvloop's event loop when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(args: argparse.Namespace) -> int:
    config = settings.load(GatewaySettings, args)
    logs.configure(config.log_level, config.log_format)
    log.info("%s", logs.fields(event="gateway.settings", **{
        k: ",".join(v) if isinstance(v, tuple) else v
        for k, v in settings.describe(config).items()}))
    _, tokenizer, _ = load_parts(config)  # fails here, once, before any worker starts
    tokenizer.close()
    sock = listen(config.host, config.port)
    workers = worker_count(config)
    log.info("%s", logs.fields(event="gateway.listening", workers=workers,
                               url=f"http://{host_port(config.host, config.port)}"))
    if workers == 1:
        return serve_one(config, sock)
    # Workers share their metrics through files; prometheus-client reads this variable once,
    # when it is imported, which happens in the workers (nothing here has imported it).
    shared = tempfile.mkdtemp(prefix="hedgerow-gateway-metrics-")
    os.environ[MULTIPROCESS_DIR] = shared
    try:
        return run_workers(workers, lambda: serve_one(config, sock), on_reaped=_dead(shared))
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _dead(shared: str):
    def reaped(pid: int) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, shared)
    return reaped
