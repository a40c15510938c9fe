"""The server's one settings object, read once at start (flags and HEDGEROW_* variables).

Owns every knob of the `hedgerow server` process and the checks between them. Knows nothing
about gRPC or the engine: it is plain data that `hedgerow.server.main` builds and hands down.
It lives in the base package, importable without torch or gRPC, because the operator generates
the CRD's schema and the server pods' environment from these same definitions.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from hedgerow import tls, tracing
from hedgerow.errors import ConfigError
from hedgerow.graph_grid import GraphGrid
from hedgerow.logs import LOG_LEVELS, format_setting
from hedgerow.model_files import TASKS
from hedgerow.settings import setting


# A gRPC message is at most 2 GiB and a request carries 8 bytes per token (id and offset).
MAX_TOKENS = 200_000_000


@dataclass(frozen=True)
class ServerSettings:
    model: Path | None = setting(
        None,
        "Hugging Face model directory to serve (config.json, safetensors, tokenizer.json). "
        "Unset serves the packaged all-MiniLM-L6-v2.",
        unit="path",
    )
    task: str = setting(
        "auto",
        "What the model serves: embed (vectors: Embed and Score), rerank (a cross-encoder's "
        "pair scores: Rerank) or sparse (EmbedSparse: SPLADE vectors of a "
        "(Distil)BertForMaskedLM, or BGE-M3's lexical weights from the sparse_linear.pt beside "
        "its weights). auto: what the checkpoint is (config.json architectures: "
        "*ForSequenceClassification is rerank, (Distil)BertForMaskedLM sparse, else embed). A "
        "checkpoint of another task than the one named here is refused at start.",
        choices=("auto", *TASKS),
    )
    host: str = setting(
        "0.0.0.0",
        "Address the gRPC and HTTP listeners bind to; 127.0.0.1 keeps them on loopback.",
    )
    port: int = setting(
        50051, "gRPC port (Embedder and grpc.health.v1).", unit="TCP port",
        minimum=1, maximum=65535,
    )
    http_port: int = setting(
        9090, "HTTP port for /metrics, /warmup, /readyz and /livez.", unit="TCP port", minimum=1,
        maximum=65535,
    )
    device: str = setting(
        "cpu", "Where the engine runs: `cpu`, `cuda` or `cuda:N`.",
    )
    dtype: str = setting(
        "auto",
        "Engine compute dtype. auto: bfloat16 on a GPU; on a CPU, bfloat16 where the CPU "
        "computes it natively (AVX512_BF16 or AMX) and a probe at load shows it faster than "
        "float32 with every probe vector within cosine 0.9999 of float32's, else float32 "
        "(the choice and its reason are logged and in Info; the probe costs a second load "
        "of the model). bfloat16/float16 halve weight memory and roughly double GPU "
        "throughput at a small accuracy cost; float32 is exact. float8 (opt-in, a GPU with "
        "FP8 tensor cores: compute capability 8.9 or newer): bfloat16, except that the "
        "layers' QKV products and GELU MLPs of batches from 2,048 tokens run in FP8 e4m3 "
        "with row-wise scales (BGE-M3's bulk 1.15x bf16 on an H100); its vectors are a "
        "space of their own, at a "
        "smallest cosine of 0.991-0.997 to float32's (docs/gpu.md, FP8 products).",
        choices=("auto", "float32", "float16", "bfloat16", "float8"),
    )
    cpu_threads: int = setting(
        0,
        "Threads torch uses for one CPU step. 0 takes one per core this process may run on, "
        "minus one left for the event loop (at least 1). More threads than free cores spin "
        "against each other: on a 2-core machine with torch's default of 2, batch-1 latency "
        "went from 6 ms to 400 ms. In a container with a CPU limit, set it below the limit.",
        unit="threads", minimum=0, maximum=4096,
    )

    host_cpu: str = setting(
        "auto",
        "The CPU for the server's I/O: the event loop and gRPC's threads, which hand every "
        "request to one another; the engine thread and torch's threads get the other CPUs. "
        "On one CPU those hand-offs skip waking other cores (measured on a 2-core machine "
        "with an engine that answers at once: 90-145 µs less per request). "
        "auto: the CPU the server starts on, when it may use 2 to 4 CPUs (a larger set is "
        "usually a shared node); off: the OS places every thread; or a CPU number.",
        pattern=r"auto|off|[0-9]+", pattern_help="auto, off or a CPU number",
    )
    max_batch_tokens: int = setting(
        2048,
        "Token budget of one engine step. Larger batches amortise launch cost until the device "
        "saturates (about 512 tokens for a sub-billion model on a GPU) and then only add latency "
        "for the requests that share the batch. A single longer sequence still runs alone.",
        unit="tokens", minimum=1,
    )
    max_batch_seqs: int = setting(
        GraphGrid.max_seqs,  # the graph grid's own, so a default batch always fits a graph
        "Most sequences in one engine step. On a GPU a batch with more sequences than "
        "--graph-max-seqs runs without a CUDA graph (slower), so keep the two equal.",
        unit="sequences", minimum=1,
    )
    max_inflight_tokens: int = setting(
        65536,
        "Admission bound: tokens accepted but not yet answered (waiting in the pool or on the "
        "engine). Past it a request gets RESOURCE_EXHAUSTED at once. Higher absorbs bursts at "
        "the cost of queueing delay and host memory (4 bytes per token plus the results).",
        unit="tokens", minimum=1, maximum=MAX_TOKENS,
    )
    max_request_tokens: int = setting(
        16384,
        "Most tokens one Embed request may carry; the gateway chunks larger inputs. Must not "
        "exceed --max-inflight-tokens, or such a request could never be admitted.",
        unit="tokens", minimum=1, maximum=MAX_TOKENS,
    )
    inflight_batches: int = setting(
        0,
        "Batches handed to the engine and not yet answered. 0 picks 2 on a GPU (batch N+1 is "
        "formed and launched while N computes, so the device never waits for the host) and 1 "
        "on CPU (the step computes on the engine thread, so a second batch would only be formed "
        "early and small while later arrivals wait).",
        unit="batches", minimum=0, maximum=8,
    )
    shutdown_grace: float = setting(
        30.0,
        "On SIGTERM, how long to keep finishing admitted work before exiting anyway (the "
        "engine step under way still completes). Keep it below the pod's "
        "terminationGracePeriodSeconds.",
        unit="seconds", minimum=0,
    )
    probe_interval: float = setting(
        30.0,
        "How often an idle server steps its probe batch (two tiny sequences of fixed token "
        "ids) and compares the rows with those taken before it served: an error, or a cosine "
        "below --probe-min-cosine, fails the engine (health NOT_SERVING, /livez 503). A busy "
        "server's own steps show a device that raises; this catches one that answers wrong "
        "numbers. Costs one tiny step per interval. 0 turns the periodic probe off (a step "
        "error is still checked against the probe at once).",
        unit="seconds", minimum=0,
    )
    probe_min_cosine: float = setting(
        0.99,
        "Smallest cosine between the probe batch's rows and those taken before serving that "
        "still counts as a healthy engine. Graph replay against eager warmup rows in bfloat16 "
        "stays above 0.999; a corrupted device or weights fall far below.",
        minimum=0, maximum=1,
    )
    golden_set: Path | None = setting(
        None,
        "Golden set to check this server's embedding space against at start (the "
        "golden-set.json that `hedgerow guard record` writes, or its ConfigMap as JSON): its "
        "texts are embedded before the server reports SERVING and /warmup reports the smallest "
        "cosine to its vectors, which the operator holds to spec.guard.minCosine. Costs one "
        "pass over its texts at start. Unset: no check (the fingerprint is reported anyway).",
        unit="path",
    )
    tls_cert: Path | None = tls.cert_setting("server")
    tls_key: Path | None = tls.key_setting("server")
    tls_ca: Path | None = tls.ca_setting("server")
    otlp_endpoint: str | None = tracing.endpoint_setting("server")
    log_level: str = setting("info", "Log verbosity.", choices=LOG_LEVELS)
    log_format: str = format_setting()

    def overlap_depth(self) -> int:
        """The number of batches in flight `inflight_batches` resolves to."""
        if self.inflight_batches:
            return self.inflight_batches
        return 1 if self.device == "cpu" else 2

    def torch_threads(self) -> int:
        """The thread count `cpu_threads` resolves to on this machine."""
        if self.cpu_threads:
            return self.cpu_threads
        return max(1, len(os.sched_getaffinity(0)) - 1)

    def __post_init__(self) -> None:
        if self.max_request_tokens > self.max_inflight_tokens:
            raise ConfigError(
                f"--max-request-tokens ({self.max_request_tokens}) exceeds --max-inflight-tokens "
                f"({self.max_inflight_tokens}): such a request could never be admitted; raise "
                "the admission bound or lower the request limit"
            )
        if self.port == self.http_port:
            raise ConfigError(f"--port and --http-port must differ (both {self.port}): gRPC and "
                              "the /metrics, /warmup HTTP side each need their own port")
        if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", self.device):
            raise ConfigError(f"--device: {self.device!r} is not cpu, cuda or cuda:N")
        if self.dtype == "float8" and self.device == "cpu":
            raise ConfigError("--dtype float8 needs --device cuda: its products run on a GPU's "
                              "FP8 tensor cores (compute capability 8.9 or newer)")
        self.tls_files()  # a bad certificate file stops the server here, before anything starts

    def tls_files(self) -> tls.TlsFiles | None:
        """The checked certificate files, None for plaintext gRPC; ConfigError naming the
        problem."""
        return tls.load(self.tls_cert, self.tls_key, self.tls_ca)
