"""Helpers for the server's integration tests: requests of token ids, and `start_server`, a
real `hedgerow server` process on loopback (tests/children.py's RealServer). Modules start one
server each (module-scoped fixtures) to keep the suite fast.
"""

import sys

import numpy as np
import pytest

from hedgerow.wire import embed_pb2
from tests.children import RealServer

CLS, SEP = 101, 102  # all-MiniLM-L6-v2's [CLS] and [SEP]


def sentence(*words: int, length: int | None = None) -> list[int]:
    """[CLS] words [SEP]; with `length`, the words repeated to `length` tokens in all."""
    body = list(words)
    if length is not None:
        body = (body * length)[: length - 2]
    return [CLS, *body, SEP]


def embed_request(sequences, **options) -> embed_pb2.EmbedRequest:
    """Token-id lists -> EmbedRequest with packed little-endian int32 bytes."""
    flat = [token for seq in sequences for token in seq]
    cu = np.cumsum([0] + [len(seq) for seq in sequences])
    return embed_pb2.EmbedRequest(
        input_ids=np.asarray(flat, dtype="<i4").tobytes(),
        cu_seqlens=np.asarray(cu, dtype="<i4").tobytes(),
        **options,
    )


@pytest.fixture(scope="module")
def start_server(tmp_path_factory):
    """Factory: start a server with extra flags, wait until SERVING; all stopped at the end."""
    started = []

    def start(*flags: str, wait: bool = True) -> RealServer:
        server = RealServer(tmp_path_factory.mktemp("server") / "server.log", *flags)
        started.append(server)
        if wait:
            server.wait_serving()
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            code = server.stop()
            if code != 0:
                sys.stderr.write(server.log_text())
        server.kill()
