"""The top-k order, defined in plain torch: the oracle for the Triton kernel and the CPU path.

Owns the one total order every top-k in Hedgerow ranks in, and its encoding as 64-bit keys:

1. score descending, compared as float32 (bfloat16 and float16 convert exactly);
2. NaN ranks as -inf, and -0 equals +0;
3. a forced column ranks as +inf, so a real +inf ties with it;
4. ties go to the lower column index;
5. columns at or past a row's valid length are not candidates at all.

Each candidate's key is its order-preserving score bits (signed int32) above its inverted column
index (31 bits), so keys are distinct and a plain descending sort of keys IS the order. Because
every partial top-k is taken in this order, merging partial top-k lists (with global indices) in
the same order gives exactly the top-k of the whole list, ties included (`merge_topk`).

Reported values are the ranking values, not the raw inputs: NaN reports -inf, -0 reports +0 and a
forced column reports +inf. That keeps outputs self-describing: merging them by (value
descending, index ascending) reproduces the order without knowing what was forced. Gather
`scores[row, index]` for a raw score. When fewer than k candidates exist, the tail of a row is
padded with index -1 and value -inf (the padding ranks after every real candidate, a real -inf
included).

This module knows nothing about Triton, devices or Hedgerow; it runs on any torch device.
"""

from __future__ import annotations

import torch

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# Below every real key: real keys have score bits >= bits(-inf) = -2139095041 after the
# order-preserving flip, and this is (-2**31 + 1) << 32. (INT64_MIN itself is avoided so the
# literal is easy to write in Triton.)
SENTINEL_KEY = -2147483647 * 2**32
INDEX_MASK = 0x7FFFFFFF  # the inverted index lives in the low 31 bits
PAD_INDEX = -1


def _ordered_bits(values: torch.Tensor) -> torch.Tensor:
    """Rules 1-2 as int64: float32 bits flipped so integer order is score order, NaN as -inf,
    -0 as +0. Any float dtype in, same shape out."""
    x = values.to(torch.float32)
    x = torch.where(torch.isnan(x), float("-inf"), x)
    x = torch.where(x == 0, 0.0, x)  # -0 -> +0
    bits = x.contiguous().view(torch.int32)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)


def order_keys(
    scores: torch.Tensor,
    valid_lengths: torch.Tensor | None = None,
    forced: torch.Tensor | None = None,
) -> torch.Tensor:
    """The 64-bit ranking key of every column; larger key = better rank.

    scores: [rows, cols] float32/bfloat16/float16. valid_lengths: [rows] integer or None (all
    columns valid); values are clamped into [0, cols]. forced: [rows, cols] bool or None.
    Returns int64 [rows, cols]; columns past a row's valid length hold SENTINEL_KEY.
    """
    cols = scores.shape[1]
    x = scores
    if forced is not None:
        x = torch.where(forced, float("inf"), x.to(torch.float32))
    ordered = _ordered_bits(x)
    column = torch.arange(cols, device=scores.device, dtype=torch.int64)
    keys = (ordered << 32) | (INDEX_MASK - column)
    if valid_lengths is not None:
        limit = valid_lengths.to(device=scores.device, dtype=torch.int64).clamp(0, cols)
        keys = torch.where(column[None, :] < limit[:, None], keys, SENTINEL_KEY)
    return keys


def decode_keys(keys: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys back to (indices int64, values `dtype`); SENTINEL_KEY decodes to (-1, -inf)."""
    real = keys > SENTINEL_KEY
    index = torch.where(real, INDEX_MASK - (keys & INDEX_MASK), PAD_INDEX)
    ordered = (keys >> 32).to(torch.int32)
    bits = torch.where(ordered < 0, ordered ^ 0x7FFFFFFF, ordered)
    values = torch.where(real, bits.view(torch.float32), float("-inf")).to(dtype)
    return index, values


def top_keys(keys: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest keys of each row, best first; rows shorter than k pad with SENTINEL_KEY."""
    rows, cols = keys.shape
    ranked = torch.sort(keys, dim=1, descending=True, stable=True).values[:, :k]
    if cols < k:
        pad = torch.full((rows, k - cols), SENTINEL_KEY, dtype=torch.int64, device=keys.device)
        ranked = torch.cat([ranked, pad], dim=1)
    return ranked


def topk_reference(
    scores: torch.Tensor,
    k: int,
    valid_lengths: torch.Tensor | None = None,
    forced: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of each row in the order above, by a stable sort of the 64-bit keys.

    scores: [rows, cols] float32/bfloat16/float16, any device. k: int >= 1 (may exceed cols).
    valid_lengths: [rows] integer or None, clamped into [0, cols]. forced: [rows, cols] bool or
    None. Returns (indices int64 [rows, k], values [rows, k] in scores.dtype), best first, padded
    with (-1, -inf) past the row's candidates. Arguments are assumed valid (see kernels.topk).
    """
    keys = order_keys(scores, valid_lengths, forced)
    return decode_keys(top_keys(keys, k), scores.dtype)


def merge_topk(
    indices: torch.Tensor, values: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge candidate lists that were each taken in this order into one top-k.

    indices: int64 [rows, m] global column indices, -1 for padding (ignored); values: [rows, m]
    float32/bfloat16/float16 ranking values as reported by `topk_reference` (forced already +inf).
    Candidates may come in any order (e.g. several partial top-k lists concatenated); indices
    must be distinct within a row and below 2**31. Returns the same layout as `topk_reference`.
    """
    ordered = _ordered_bits(values)
    keys = (ordered << 32) | (INDEX_MASK - indices.clamp(min=0))
    keys = torch.where(indices >= 0, keys, SENTINEL_KEY)
    return decode_keys(top_keys(keys, k), values.dtype)
