"""The ragged batch: one flat token axis and cumulative offsets, no padding.

`input_ids` int32 [T], `cu_seqlens` int32 [B+1] (0 first, strictly increasing, T last),
`max_seqlen` the longest sequence. The same names are used from the wire to the kernels.
"""

import bisect
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from hedgerow.errors import InvalidInputError


@dataclass(frozen=True)
class RaggedBatch:
    input_ids: torch.Tensor   # int32 [T], on the host
    cu_seqlens: torch.Tensor  # int32 [B+1], on the host
    max_seqlen: int

    @property
    def num_seqs(self) -> int:
        return self.cu_seqlens.numel() - 1

    @property
    def num_tokens(self) -> int:
        return self.input_ids.numel()

    def uniform_length(self) -> int:
        """The length every sequence has, or 0 when lengths differ (O(1): `max_seqlen` is the
        longest, and no sequence is empty)."""
        uniform = self.num_tokens == self.num_seqs * self.max_seqlen
        return self.max_seqlen if uniform else 0

    @classmethod
    def from_sequences(cls, sequences: Sequence[Sequence[int]]) -> "RaggedBatch":
        """Pack token-id lists into one ragged batch; every sequence must be non-empty."""
        if not sequences:
            raise InvalidInputError("a batch needs at least one sequence")
        lengths = [len(seq) for seq in sequences]
        if min(lengths) == 0:
            raise InvalidInputError(f"sequence {lengths.index(0)} is empty")
        flat = [token for seq in sequences for token in seq]
        cu = [0]
        for length in lengths:
            cu.append(cu[-1] + length)
        return cls(
            input_ids=torch.tensor(flat, dtype=torch.int32),
            cu_seqlens=torch.tensor(cu, dtype=torch.int32),
            max_seqlen=max(lengths),
        )

    @classmethod
    def from_arrays(cls, input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> "RaggedBatch":
        """Wrap arrays that already hold the layout, checking it; raises InvalidInputError."""
        if input_ids.dtype != torch.int32 or cu_seqlens.dtype != torch.int32:
            raise InvalidInputError("input_ids and cu_seqlens must be int32")
        if input_ids.dim() != 1 or cu_seqlens.dim() != 1:
            raise InvalidInputError("input_ids and cu_seqlens must be one-dimensional")
        if cu_seqlens.numel() < 2:
            raise InvalidInputError("cu_seqlens needs at least two entries (one sequence)")
        if int(cu_seqlens[0]) != 0:
            raise InvalidInputError(f"cu_seqlens must start at 0, not {int(cu_seqlens[0])}")
        lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        if bool((lengths <= 0).any()):
            first = int(torch.nonzero(lengths <= 0)[0])
            raise InvalidInputError(
                f"cu_seqlens must be strictly increasing: sequence {first} has length "
                f"{int(lengths[first])}"
            )
        if int(cu_seqlens[-1]) != input_ids.numel():
            raise InvalidInputError(
                f"cu_seqlens ends at {int(cu_seqlens[-1])} but input_ids holds "
                f"{input_ids.numel()} tokens"
            )
        return cls(input_ids=input_ids, cu_seqlens=cu_seqlens, max_seqlen=int(lengths.max()))

    def lengths(self) -> list[int]:
        return (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).tolist()


# Up to this many ids Python's max over the buffer is cheaper than numpy's reduction, whose
# code is cold between a server's requests (measured: about 20 µs against 60 at 128 ids).
_SMALL_MAX = 512


def _largest_unsigned(input_ids: np.ndarray) -> int:
    """The largest of int32 `input_ids` [T] (T > 0) read as unsigned."""
    if input_ids.size <= _SMALL_MAX and input_ids.flags.c_contiguous:
        return max(memoryview(input_ids).cast("B").cast("I"))
    return int(input_ids.view(np.uint32).max())


def check_tokens(input_ids: np.ndarray, cu_seqlens: Sequence[int], max_seqlen: int,
                 vocab_size: int, max_tokens: int) -> None:
    """Raise InvalidInputError for a token id outside [0, vocab_size) or a sequence longer than
    `max_tokens`, naming the first. `input_ids` int32 [T] (numpy, on the host) and the offsets
    `cu_seqlens` [B+1] are a valid ragged layout."""
    # As unsigned, a negative id is larger than any vocabulary: one maximum checks both ends.
    if input_ids.size and _largest_unsigned(input_ids) >= vocab_size:
        bad = int(np.flatnonzero((input_ids < 0) | (input_ids >= vocab_size))[0])
        seq = bisect.bisect_right(cu_seqlens, bad) - 1
        raise InvalidInputError(
            f"token id {int(input_ids[bad])} in sequence {seq} is outside the vocabulary "
            f"[0, {vocab_size})")
    if max_seqlen > max_tokens:
        lengths = [b - a for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:])]
        seq = next(i for i, n in enumerate(lengths) if n > max_tokens)
        raise InvalidInputError(
            f"sequence {seq} has {lengths[seq]} tokens; the model accepts at most "
            f"{max_tokens} tokens per sequence")
