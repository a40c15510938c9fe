"""Cut a request's sequences into chunks on a token budget, and put the results back together.

Pure functions, no I/O. Latency is proportional to tokens, so chunks are cut on a TOKEN budget,
never a sequence count: sequences are taken in input order until the next one would push the
chunk past the budget. A sequence longer than the budget travels alone. Chunks are contiguous
slices of the request, so results reassemble by concatenation in chunk order. Token ids are
`array('i')` and offsets lists (int32, little-endian on the wire). Knows nothing about servers,
tokenizers or HTTP.
"""

import array
import dataclasses
import struct
import sys
from typing import Sequence

import numpy as np

if sys.byteorder != "little":  # array('i') is native; the wire is little-endian int32
    raise ImportError("the gateway packs token ids as little-endian int32: a little-endian "
                      "machine is needed")


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Sequences [start, stop) of a request, carrying `tokens` tokens in all."""

    start: int
    stop: int
    tokens: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def plan_chunks(lengths: Sequence[int], budget: int) -> list[Chunk]:
    """Split sequences of `lengths` tokens into contiguous chunks of at most `budget` tokens.

    Order is kept; every sequence lands in exactly one chunk; a chunk exceeds the budget only
    when it holds a single sequence longer than the budget.
    """
    if budget < 1:
        raise ValueError(f"chunk budget must be at least 1 token, got {budget}")
    chunks: list[Chunk] = []
    start, used = 0, 0
    for index, length in enumerate(lengths):
        length = int(length)
        if index > start and used + length > budget:
            chunks.append(Chunk(start, index, used))
            start, used = index, 0
        used += length
    if len(lengths) > start:
        chunks.append(Chunk(start, len(lengths), used))
    return chunks


def _offsets(starts: Sequence[int], first: int, shift: int = 0) -> bytes:
    return struct.pack(f"<{len(starts)}i", *[start - first + shift for start in starts])


def pack(input_ids: array.array, starts: Sequence[int], chunk: Chunk) -> tuple[bytes, bytes]:
    """The wire bytes of one chunk: (input_ids int32 LE [T_c], cu_seqlens int32 LE [B_c+1]).

    `input_ids` is the request's flat int32 [T]; `starts` its offsets [B+1].
    """
    first, last = starts[chunk.start], starts[chunk.stop]
    return (input_ids[first:last].tobytes(),
            _offsets(starts[chunk.start:chunk.stop + 1], first))


def pack_with_query(query: array.array, input_ids: array.array, starts: Sequence[int],
                    chunk: Chunk) -> tuple[bytes, bytes]:
    """The wire bytes of a Score chunk: the query (int32 [q]) as sequence 0, then the chunk's
    sequences; (input_ids int32 LE [q + T_c], cu_seqlens int32 LE [B_c+2])."""
    first, last = starts[chunk.start], starts[chunk.stop]
    q = len(query)
    return (query.tobytes() + input_ids[first:last].tobytes(),
            b"\0\0\0\0" + _offsets(starts[chunk.start:chunk.stop + 1], first, q))


def reassemble(chunks: Sequence[Chunk], results: Sequence[np.ndarray]) -> np.ndarray:
    """Stack per-chunk results float32 [B_c, D] into float32 [B, D] in input order.

    Raises ValueError when a result's row count does not match its chunk or widths differ,
    so a wrong answer from a server can never be returned as someone else's embedding.
    """
    if len(chunks) != len(results):
        raise ValueError(f"{len(chunks)} chunks but {len(results)} results")
    for chunk, result in zip(chunks, results):
        if result.ndim != 2 or result.shape[0] != chunk.size:
            raise ValueError(
                f"chunk of sequences {chunk.start}..{chunk.stop} came back with shape "
                f"{tuple(result.shape)}, expected {chunk.size} rows"
            )
    widths = {int(result.shape[1]) for result in results}
    if len(widths) > 1:
        raise ValueError(f"chunks came back with different widths {sorted(widths)}")
    return np.concatenate(results, axis=0) if len(results) > 1 else results[0]
