"""The public top-k: argument checks, the `hedgerow::topk` custom op, and where each device goes.

Owns `topk(scores, k, valid_lengths=None, forced=None)`. On CUDA with k <= topk_triton.MAX_K it
runs the Triton kernel; everywhere else (CPU, or a larger k) it runs the plain-torch reference,
which is the definition of the order (see kernels/topk_reference.py), so both paths return the
same bits. The op is registered with torch.library and a fake implementation, so it traces under
torch.compile and captures in a CUDA graph (no host synchronisation, no data-dependent shapes).

Triton is imported only when a CUDA tensor reaches the op, so CPU-only installs need no Triton.
This module knows nothing about embeddings, requests or Hedgerow's errors: bad arguments raise
ValueError or TypeError with a message that names the argument.
"""

from typing import Optional

import torch

from .topk_reference import SUPPORTED_DTYPES, topk_reference

__all__ = ["topk"]

MAX_COLUMNS = 2**31 - 1  # the key keeps 31 bits of column index


def _use_kernel(scores: torch.Tensor, k: int) -> bool:
    if not scores.is_cuda or scores.shape[1] == 0:
        return False
    from .topk_triton import MAX_K

    return k <= MAX_K


@torch.library.custom_op("hedgerow::topk", mutates_args=())
def _topk_op(
    scores: torch.Tensor,
    k: int,
    valid_lengths: Optional[torch.Tensor],
    forced: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    if _use_kernel(scores, k):
        from .topk_triton import topk_triton

        return topk_triton(scores, k, valid_lengths, forced)
    return topk_reference(scores, k, valid_lengths, forced)


@_topk_op.register_fake
def _topk_fake(scores, k, valid_lengths, forced):
    rows = scores.shape[0]
    return (
        scores.new_empty((rows, k), dtype=torch.int64),
        scores.new_empty((rows, k), dtype=scores.dtype),
    )


def _check(scores, k, valid_lengths, forced) -> None:
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if scores.dim() != 2:
        raise ValueError(f"scores must be 2-D [rows, cols], got shape {tuple(scores.shape)}")
    if scores.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"scores must be float32, bfloat16 or float16, got {scores.dtype}")
    if scores.shape[1] > MAX_COLUMNS:
        raise ValueError(f"scores may have at most {MAX_COLUMNS} columns, got {scores.shape[1]}")
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if k <= 0:
        raise ValueError(f"k must be at least 1, got {k}")
    rows = scores.shape[0]
    if valid_lengths is not None:
        if not isinstance(valid_lengths, torch.Tensor):
            raise TypeError("valid_lengths must be a torch.Tensor or None")
        if valid_lengths.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"valid_lengths must be int32 or int64, got {valid_lengths.dtype}")
        if tuple(valid_lengths.shape) != (rows,):
            raise ValueError(
                f"valid_lengths must have shape [rows] = ({rows},), "
                f"got {tuple(valid_lengths.shape)}"
            )
        if valid_lengths.device != scores.device:
            raise ValueError(
                f"valid_lengths is on {valid_lengths.device}, scores on {scores.device}"
            )
    if forced is not None:
        if not isinstance(forced, torch.Tensor):
            raise TypeError("forced must be a torch.Tensor or None")
        if forced.dtype != torch.bool:
            raise TypeError(f"forced must be a bool mask, got {forced.dtype}")
        if forced.shape != scores.shape:
            raise ValueError(
                f"forced must have the shape of scores {tuple(scores.shape)}, "
                f"got {tuple(forced.shape)}"
            )
        if forced.device != scores.device:
            raise ValueError(f"forced is on {forced.device}, scores on {scores.device}")


def topk(
    scores: torch.Tensor,
    k: int,
    valid_lengths: Optional[torch.Tensor] = None,
    forced: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best columns of each row, in Hedgerow's one total order, best first.

    The order: score descending (compared as float32); NaN ranks as -inf; -0 equals +0; a forced
    column ranks as +inf (a real +inf ties with it); ties go to the lower column index; columns
    at or past the row's valid length are not candidates. Merging partial top-k lists taken in
    this order (with global indices) gives exactly the top-k of the whole list.

    Args:
        scores: [rows, cols] float32, bfloat16 or float16, on CPU or CUDA (any strides).
        k: int >= 1. It may exceed cols or a row's valid length: such rows are padded.
        valid_lengths: optional [rows] int32/int64 on scores' device; row r considers columns
            [0, valid_lengths[r]). Values are clamped into [0, cols] (not checked on the host,
            so the call never synchronises).
        forced: optional [rows, cols] bool on scores' device; True columns rank as +inf.

    Returns:
        (indices, values): indices int64 [rows, k], values [rows, k] in scores.dtype, best first.
        Values are the ranking values: NaN reports -inf, -0 reports +0, a forced column reports
        +inf (gather scores[row, index] for the raw score). Slots past a row's candidates hold
        index -1 and value -inf.

    Raises:
        TypeError / ValueError: naming the offending argument (k <= 0, scores not 2-D, an
        unsupported dtype, mismatched shapes or devices).
    """
    _check(scores, k, valid_lengths, forced)
    scores = scores.contiguous()
    if forced is not None:
        forced = forced.contiguous()
    return torch.ops.hedgerow.topk(scores, k, valid_lengths, forced)
