"""Embed requests of given sequence lengths, as the benchmarks' gRPC clients send them."""

from typing import Sequence

import numpy as np

from hedgerow.wire import embed_pb2


def embed_request(lengths: Sequence[int], salt: int = 0) -> embed_pb2.EmbedRequest:
    """One sequence per length (each at least 2 tokens): 101, ordinary ids, 102. The ids vary
    with `salt`, so requests differ; all lie below 21,000, inside every model's vocabulary the
    benchmarks serve."""
    ids: list[int] = []
    offsets = [0]
    for number, length in enumerate(lengths):
        base = salt + 7919 * number
        ids += [101] + [1000 + (base + i) % 20000 for i in range(length - 2)] + [102]
        offsets.append(len(ids))
    return embed_pb2.EmbedRequest(input_ids=np.asarray(ids, dtype="<i4").tobytes(),
                                  cu_seqlens=np.asarray(offsets, dtype="<i4").tobytes())
