"""`hedgerow gateway`: the HTTP gateway in front of one or more embedding servers.

Owns start-up: read the settings once, load the tokenizer and the model card, bind the port
(a clear error when it is taken), and run the app on uvicorn with uvloop and httptools when
they are installed. Uvicorn stops it cleanly on SIGINT/SIGTERM.
"""

import argparse
import contextlib
import importlib.util
import logging
import signal
import socket
from typing import Iterator

import uvicorn

from hedgerow import logs, settings
from hedgerow.addresses import host_port
from hedgerow.defaults import default_model_path, model_name
from hedgerow.errors import ConfigError
from hedgerow.gateway.app import create_app
from hedgerow.gateway.auth import ApiKeys, load_keys
from hedgerow.gateway.model_card import load_card
from hedgerow.gateway.settings import GatewaySettings
from hedgerow.gateway.tokenizer import TextTokenizer

HELP = "Run the OpenAI-compatible HTTP gateway: tokenize, chunk and route to servers."

log = logging.getLogger("hedgerow.gateway")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, GatewaySettings)


def build_app(config: GatewaySettings):
    """The app for `config`: tokenizer, model card and API keys loaded, nothing started."""
    model_dir = config.model or default_model_path()
    name = config.served_model_name or model_name(model_dir)
    card = load_card(model_dir, name=name, query_template=config.query_template,
                     document_template=config.document_template)
    tokenizer = TextTokenizer(model_dir, threads=config.tokenizer_threads)
    keys = ApiKeys(load_keys(config.api_keys, config.api_keys_file))
    return create_app(config, card, tokenizer, keys)


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} ({error.strerror}); is another "
                          "process using it? Pick another with --port") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Server(uvicorn.Server):
    """Uvicorn's server, except that a stop by SIGINT or SIGTERM is a clean exit (status 0).

    Uvicorn re-raises the captured signal after its graceful shutdown, which makes the process
    die by that signal; a supervisor (`hedgerow serve`, Kubernetes) should see a clean exit.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    config = settings.load(GatewaySettings, args)
    logs.configure(config.log_level)
    log.info("%s", logs.fields(event="gateway.settings", **{
        k: ",".join(v) if isinstance(v, tuple) else v
        for k, v in settings.describe(config).items()}))
    app = build_app(config)
    sock = listen(config.host, config.port)
    server = Server(uvicorn.Config(
        app,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        log_config=None,
        log_level=config.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    ))
    log.info("%s", logs.fields(event="gateway.listening",
                               url=f"http://{host_port(config.host, config.port)}"))
    server.run(sockets=[sock])
    return 0
