"""The gateway's one settings object: every field is a flag and a `HEDGEROW_...` variable.

Owns what the gateway is told at start: where it listens, where the servers are, which
tokenizer and templates to use, and the limits it enforces. It knows nothing about how those
values are used; `hedgerow gateway` loads it once at start. It lives in the base package,
importable without uvicorn or gRPC, because the operator generates the CRD's schema and the
gateway pods' environment from these same definitions.
"""

import dataclasses
from pathlib import Path

from hedgerow import tls, tracing
from hedgerow.errors import ConfigError
from hedgerow.logs import LOG_LEVELS, format_setting
from hedgerow.settings import setting


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    host: str = setting("127.0.0.1", "Address the HTTP API listens on.")
    port: int = setting(8080, "Port the HTTP API listens on.", minimum=1, maximum=65535)
    servers: tuple[str, ...] = setting(
        (),
        "Static list of embedding servers as host:port,host:port. Use this or --service-dns.",
    )
    service_dns: str | None = setting(
        None,
        "A headless Service name and gRPC port (name:port); every address it resolves to is "
        "a server. Re-resolved every --dns-interval seconds; a failed lookup keeps the last "
        "known set.",
    )
    dns_interval: float = setting(
        10.0, "How often --service-dns is re-resolved.", unit="seconds", minimum=0.1
    )
    model: Path | None = setting(
        None,
        "Model directory whose tokenizer.json (and config files) the gateway uses. "
        "Unset uses the packaged all-MiniLM-L6-v2.",
    )
    served_model_name: str | None = setting(
        None,
        "The `model` name clients send and /v1/models lists. Unset: the model directory's "
        "name, its parent's for a folder named `model` (all-MiniLM-L6-v2 for the packaged "
        "model), as in the server's Info.",
    )
    served_model_aliases: tuple[str, ...] = setting(
        (),
        "More names the gateway answers to as the served model, comma separated: an app with "
        "another model's name written in (text-embedding-3-small, say) keeps working after "
        "only its base URL changes. /v1/models lists them after the served name; answers name "
        "the served model.",
        max_items=64,
    )
    accept_token_ids: bool = setting(
        False,
        "Accept inputs given as token ids (lists of integers) on /v1/embeddings and /embed, "
        "taken as ids of the served model's own tokenizer. Off, they get 400: the clients "
        "that send ids unasked (LangChain's OpenAIEmbeddings by default) tokenize with "
        "OpenAI's tiktoken, whose ids name other tokens in this model's vocabulary and would "
        "embed as other words.",
    )
    allow_truncated_dimensions: bool = setting(
        False,
        "Accept `dimensions` (Cohere's `output_dimension`) below the width for any model. Off, "
        "only a model that declares Matryoshka training (`matryoshka_dimensions` or "
        "`is_matryoshka` in its config.json or config_sentence_transformers.json) may be "
        "truncated, to a width it lists; others get 400: the leading dimensions of a model "
        "not trained for it are a poor embedding.",
    )
    chunk_tokens: int = setting(
        2048,
        "Token budget of one chunk sent to one server. Smaller balances better across "
        "servers; larger costs fewer messages and keeps each GPU batch saturated. Capped by "
        "the server's own request-token limit (from its Info).",
        unit="tokens",
        minimum=1,
    )
    max_body_bytes: int = setting(
        16 * 1024 * 1024,
        "Largest request body accepted; larger gets 413 before any parsing.",
        unit="bytes",
        minimum=1,
    )
    max_inputs: int = setting(2048, "Most inputs in one request (400 past it).", unit="inputs",
                              minimum=1)
    max_request_tokens: int = setting(
        300_000, "Most tokens in one request, after templates (400 past it).", unit="tokens",
        minimum=1
    )
    truncate: bool = setting(
        False,
        "Truncate inputs longer than the model's limit instead of answering 400.",
    )
    query_template: str | None = setting(
        None,
        "Prefix for input_type=query; \"\" for none. Unset: the model's prompts "
        "(config_sentence_transformers.json) or the server's Info templates.",
        literal=True,
    )
    document_template: str | None = setting(
        None,
        "Prefix for input_type=document; \"\" for none. Unset: the model's prompts or the "
        "server's Info.",
        literal=True,
    )
    api_keys_file: Path | None = setting(
        None,
        "File with one accepted API key per line (blank lines and # comments ignored). "
        "With no keys configured, the API is open.",
    )
    api_keys: tuple[str, ...] = setting(
        (), "Accepted API keys, comma separated (prefer --api-keys-file).", secret=True
    )
    request_timeout: float = setting(
        60.0,
        "Longest a request may take end to end; a client's X-Request-Timeout header may "
        "shorten it. The remainder is the gRPC deadline of each chunk.",
        unit="seconds",
        minimum=0.001, maximum=86_400,
    )
    health_interval: float = setting(
        1.0,
        "Delay before re-watching a server whose health stream broke, between Info attempts, "
        "and between health polls of a server without Watch.",
        unit="seconds",
        minimum=0.05,
    )
    eject_after_failures: int = setting(
        3,
        "Outlier ejection: a server whose calls failed this many times in a row (INTERNAL, "
        "UNKNOWN or DATA_LOSS; each such chunk is retried on another server) leaves traffic "
        "until its health says SERVING again and its Info answers, as Envoy's "
        "consecutive-5xx ejection. Lower ejects a failing server sooner, at the cost of "
        "ejecting one for a few unlucky errors. Never ejects the last ready server. 0: never.",
        unit="failures", minimum=0, maximum=1000,
    )
    tokenizer_threads: int = setting(
        2, "Threads that tokenize, off the event loop (per worker).", unit="threads",
        minimum=1
    )
    workers: int = setting(
        0,
        "Worker processes sharing the port, each with its own event loop, tokenizer and "
        "channels to every server. 0 takes one per core this process may run on.",
        unit="processes", minimum=0, maximum=256,
    )
    max_connections: int = setting(
        1024,
        "Open client connections one worker holds; a request arriving past it gets 503 at once.",
        unit="connections", minimum=1,
    )
    head_timeout: float = setting(
        10.0,
        "A request's headers (and a new connection's first bytes) must arrive within this, "
        "else the connection gets 408 and is closed.",
        unit="seconds", minimum=0.1, maximum=3600,
    )
    body_timeout: float = setting(
        30.0,
        "A request's body must arrive within this from its headers, else 408.",
        unit="seconds", minimum=0.1, maximum=3600,
    )
    keep_alive_timeout: float = setting(
        5.0,
        "An idle keep-alive connection is closed after this.",
        unit="seconds", minimum=0.1, maximum=3600,
    )
    max_queue_seconds: float = setting(
        10.0,
        "Admission: a request whose chunks would wait longer than this for the servers (by "
        "this worker's estimate: tokens it has queued on each server over that server's "
        "measured throughput), or longer than its own deadline allows, gets 429 at once with a "
        "Retry-After from the estimate. 0 admits everything and lets requests wait.",
        unit="seconds", minimum=0, maximum=3600,
    )
    access_log_sample: float = setting(
        1.0,
        "Fraction of requests that get an access-log line at INFO (request id, method, route, "
        "status, tokens, milliseconds, client address, user agent; logger "
        "hedgerow.gateway.access): 1 logs every request, 0.01 one in a hundred at random, 0 "
        "none. A line costs 10-30 microseconds of CPU (about 1-3% of the gateway's own time "
        "per short request); an unsampled request almost none.",
        unit="fraction", minimum=0, maximum=1,
    )
    docs: bool = setting(
        True,
        "Serve the interactive API documentation (Swagger UI) at /docs; /openapi.json is "
        "served either way.",
    )
    tls_cert: Path | None = tls.cert_setting("gateway")
    tls_key: Path | None = tls.key_setting("gateway")
    tls_ca: Path | None = tls.ca_setting("gateway")
    tls_server_name: str | None = setting(
        None,
        "The name the servers' certificates are checked for, instead of the address dialled "
        "(--service-dns yields pod IPs): e.g. <name>-server.<namespace>.svc. Needs --tls-cert. "
        "Unset: the host of each address.",
        pattern=r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?", pattern_help="a DNS name",
    )
    otlp_endpoint: str | None = tracing.endpoint_setting("gateway")
    log_level: str = setting("info", "Log level.", choices=LOG_LEVELS)
    log_format: str = format_setting()

    def tls_files(self) -> tls.TlsFiles | None:
        """The checked certificate files, None for plaintext gRPC; ConfigError naming the
        problem."""
        return tls.load(self.tls_cert, self.tls_key, self.tls_ca)

    def __post_init__(self) -> None:
        if self.servers and self.service_dns:
            raise ConfigError("give either --servers or --service-dns, not both")
        if not self.servers and not self.service_dns:
            raise ConfigError(
                "no servers: pass --servers host:port[,host:port...] or --service-dns NAME:PORT"
            )
        for address in self.servers:
            parse_address(address, "--servers")
        if self.service_dns:
            parse_address(self.service_dns, "--service-dns")
        check_model_names(self.served_model_name, self.served_model_aliases)
        if self.tls_server_name and self.tls_cert is None:
            raise ConfigError("--tls-server-name is for mutual TLS: give --tls-cert, --tls-key "
                              "and --tls-ca too")
        self.tls_files()  # a bad certificate stops the gateway here, before any worker starts


def check_model_names(name: str | None, aliases: tuple[str, ...]) -> None:
    """ConfigError for a served name with a comma (a list belongs in the aliases) or an empty
    or padded alias."""
    if name is not None and "," in name:
        first, _, rest = name.partition(",")
        raise ConfigError(
            f"--served-model-name: {name!r} holds a comma; it is one name. Serve "
            f"{first.strip()!r} and answer to the others too with --served-model-aliases "
            f"{rest.replace(' ', '')!r}")
    for alias in aliases:
        if not alias or alias != alias.strip():
            raise ConfigError(f"--served-model-aliases: {alias!r} is not a name (empty, or "
                              "with spaces around it)")


def parse_address(address: str, source: str) -> tuple[str, int]:
    """Split `host:port` (IPv6 as `[::1]:50051`); raise ConfigError naming `source`."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{source}: {address!r} is not host:port")
    return host, int(port)
