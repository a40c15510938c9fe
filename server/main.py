"""`hedgerow server`: the gRPC embedding server, one per GPU (or one on a CPU machine).

Parses the flags (every one also an HEDGEROW_* variable) into ServerSettings and the
engine's GpuSettings (graph cache, hot set; used on CUDA devices: a CPU server logs the
ones given without effect) once, sets up logging, and runs the asyncio server on uvloop when
it is installed. Knows nothing else.
"""

import argparse
import asyncio
import dataclasses
import logging
import os

from hedgerow import logs, settings
from hedgerow.gpu_settings import GpuSettings
from hedgerow.server_settings import ServerSettings

HELP = ("Serve a text-embedding model over gRPC (Embedder + grpc.health.v1) with /metrics and "
        "/warmup over HTTP.")

log = logging.getLogger("hedgerow.server")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, ServerSettings)
    settings.add_arguments(parser, GpuSettings)


def run(args: argparse.Namespace) -> int:
    config = settings.load(ServerSettings, args)
    gpu = settings.load(GpuSettings, args)
    gpu.hot_set()  # a bad graph setting fails at start on CPU too, not later on a GPU
    logs.configure(config.log_level, config.log_format)
    log.info("%s", logs.fields(event="server.settings", **settings.describe(config)))
    if config.device != "cpu":
        log.info("%s", logs.fields(event="server.gpu_settings", **settings.describe(gpu)))
    elif changed := _changed_from_defaults(gpu):
        log.warning("%s", logs.fields(event="server.gpu_settings_ignored", device="cpu",
                                      settings=",".join(changed)))
    from hedgerow.server.app import StoppedWhileLoading, serve

    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(serve(config, gpu_settings=gpu))
    except StoppedWhileLoading:
        # Python would wait for the load's thread at exit (minutes with a large model and its
        # graph capture) after the server already said it stopped.
        log.info("%s", logs.fields(event="server.stopped", while_loading=True))
        logging.shutdown()
        os._exit(0)


def _changed_from_defaults(gpu: GpuSettings) -> list[str]:
    """The flags of the GPU settings given other values than their defaults: a CPU server
    does not use them, and says so rather than leave them silently without effect."""
    default = GpuSettings()
    return [settings.flag_name(field.name) for field in dataclasses.fields(gpu)
            if getattr(gpu, field.name) != getattr(default, field.name)]


def _loop_factory():
    """uvloop's event loop when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
