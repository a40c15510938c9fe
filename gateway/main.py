"""`hedgerow gateway`: the HTTP gateway in front of one or more embedding servers.

Owns start-up: read the settings once, load the tokenizer and the model card, bind the port
(a clear error when it is taken), and run the app on uvicorn with uvloop and httptools when
they are installed. Uvicorn stops it cleanly on SIGINT/SIGTERM.
"""

import argparse
import contextlib
import errno
import importlib.util
import logging
import signal
import socket
from typing import Iterator

import uvicorn

from hedgerow import logs, settings
from hedgerow.addresses import check_resolves, host_port
from hedgerow.defaults import default_model_path, model_name
from hedgerow.errors import ConfigError
from hedgerow.gateway.app import create_app
from hedgerow.gateway.auth import ApiKeys, load_keys
from hedgerow.gateway.http_errors import MALFORMED_HTTP
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


def openai_shaped_400(protocol: type) -> type:
    """uvicorn's HTTP protocol class `protocol`, answering a request its parser refuses before
    the app sees it in OpenAI's error shape (uvicorn answers plain text)."""

    class Protocol(protocol):
        def send_400_response(self, msg: str) -> None:
            head = [b"HTTP/1.1 400 Bad Request\r\n"]
            head += [name + b": " + value + b"\r\n"
                     for name, value in self.server_state.default_headers]
            head += [b"content-type: application/json\r\n",
                     b"content-length: %d\r\n" % len(MALFORMED_HTTP),
                     b"connection: close\r\n\r\n"]
            self.transport.write(b"".join(head) + MALFORMED_HTTP)
            self.transport.close()

    return Protocol


def http_protocol() -> type:
    """httptools when installed (faster), else h11; either with OpenAI-shaped parse errors."""
    if importlib.util.find_spec("httptools"):
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as protocol
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as protocol
    return openai_shaped_400(protocol)


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
        http=http_protocol(),
        log_config=None,
        log_level=config.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    ))
    log.info("%s", logs.fields(event="gateway.listening",
                               url=f"http://{host_port(config.host, config.port)}"))
    server.run(sockets=[sock])
    return 0
