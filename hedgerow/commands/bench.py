"""`hedgerow bench NAME [ARGS...]`: run one of the project's benchmarks; each prints a table.

The benchmarks live in benchmarks/ (imported as `hedgerow.bench`); every one is also a plain
script (`python -P benchmarks/NAME.py`). Arguments after NAME go to the benchmark unchanged:
`hedgerow bench serving-gpu --help` lists its own options. The GPU ones need a CUDA machine.
The ones that time a model's calls follow its task (benchmarks/tasks.py: a running server's
Info, else `--task`, else the checkpoint's): rerank-cpu times a cross-encoder's Rerank calls
(one query and N documents; p50, p99 and pairs/s) or an embedding model's Score calls,
server-cpu an embedding model's Embed or a sparse model's EmbedSparse calls; a task a
benchmark has no calls for, or a `--task` the server does not serve, is refused in one line.
"""

import argparse
import importlib
import sys

import grpc

from hedgerow.errors import ConfigError, HedgerowError

HELP = "Run one of Hedgerow's benchmarks and print its table (arguments after NAME go to it)."

BENCHMARKS = {
    "engine-cpu": ("engine_cpu", "CPU engine against sentence-transformers, real tokens/s"),
    "server-cpu": ("server_cpu", "gRPC server on CPU: batch-1 latency and concurrent throughput "
                                 "(Embed, or EmbedSparse for a sparse model)"),
    "server-overhead": ("server_overhead", "the server's own host cost per request, no model"),
    "server-start": ("server_start", "time to SERVING by phase, first minute's p99 against steady"),
    "server-memory": ("server_memory", "server RSS over identical rounds of mixed-size load"),
    "gateway-cpu": ("gateway_cpu", "latency the gateway adds, and tokenization throughput"),
    "peer-infinity": ("peer_infinity", "the local stack against Infinity on the same model"),
    "rerank-cpu": ("rerank_cpu", "end-to-end /v1/rerank latency and pairs/s, cosine or a "
                                 "cross-encoder (CPU, or --device cuda)"),
    "fp8-gate": ("fp8_gate", "how far --dtype float8 moves a model's vectors from float32's "
                             "(CPU, or --device cuda)"),
    "engine-gpu": ("engine_gpu", "GPU engine alone against transformers (CUDA)"),
    "serving-gpu": ("serving_gpu", "the seed's four charts and a rerank chart through server "
                                   "and gateway (CUDA)"),
    "topk": ("topk", "Triton top-k against torch.topk (CUDA)"),
    "models": ("models", "write random-weight BGE-M3 / Qwen3-0.6B model directories"),
    "autoscale": ("autoscale", "the HPA's algorithm over four traffic traces, both signals"),
}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    listing = "; ".join(f"{name}: {text}" for name, (_, text) in BENCHMARKS.items())
    parser.add_argument("benchmark", metavar="NAME", nargs="?", choices=sorted(BENCHMARKS),
                        help=f"which benchmark. {listing}.")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="passed to the benchmark unchanged")


def run(args: argparse.Namespace) -> int:
    if args.benchmark is None:
        raise ConfigError(f"name a benchmark: {', '.join(BENCHMARKS)}")
    module_name, _ = BENCHMARKS[args.benchmark]
    module = importlib.import_module(f"hedgerow.bench.{module_name}")
    sys.argv = [f"hedgerow bench {args.benchmark}", *args.arguments]
    try:
        return int(module.main() or 0)
    except grpc.RpcError as error:  # a server given by address that is not there, or failed
        raise HedgerowError(f"a gRPC call failed: {error.code().name}: {error.details()}"
                            ) from None
