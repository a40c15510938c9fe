"""A real `hedgerow server` held in its warmup: run as `python -P warming_server.py GRPC HTTP`.

The server app of `hedgerow server` (gRPC with health NOT_SERVING, /metrics and /warmup on
HTTP) whose model load is held back until SIGTERM, so it stays a replica that is not yet
SERVING for as long as a test needs: what a pod loading its weights or capturing its hot set
looks like to Prometheus. Exits 0 on SIGTERM, as `hedgerow server` does when stopped while
loading.
"""

import asyncio
import os
import sys
import threading

from hedgerow.server.app import StoppedWhileLoading, serve
from hedgerow.server_settings import ServerSettings

RELEASED = threading.Event()  # never set: the load is held for the process's life


def held_loader(settings, gpu_settings, golden):
    RELEASED.wait()


def main() -> int:
    grpc_port, http_port = int(sys.argv[1]), int(sys.argv[2])
    settings = ServerSettings(host="127.0.0.1", port=grpc_port, http_port=http_port,
                              host_cpu="off")
    try:
        return asyncio.run(serve(settings, loader=held_loader))
    except StoppedWhileLoading:
        os._exit(0)  # as `hedgerow server` does: the held load's thread is never waited for


if __name__ == "__main__":
    sys.exit(main())
