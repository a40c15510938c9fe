"""The Triton top-k kernel: one program per row, ranking in topk_reference's order, bit-exact.

Owns the kernel, its launch configurations and the launcher. It does not know about the custom
op, graph capture or argument checking (kernels/topk.py) and assumes valid arguments.

Every column gets the reference's 64-bit key (order-preserving float32 score bits above the
inverted column index), so all keys of a row are distinct and "top-k keys" is exact. Three
methods (see `choose_config`); kernels.topk uses `auto_config`, always threshold64, the fastest
on the H200. The other two stay as measured, tested alternatives.

- "threshold64" (after the warp-per-row design in seeds/001): pass 1 streams the row in chunks
  of BLOCK keeping an elementwise running max of the keys, folded into LANES lane maxima (lane =
  column mod LANES). The k-th largest lane maximum t bounds the k-th largest key from below (at
  least k keys, those lane maxima, are >= t). Pass 2 compacts the keys >= t into a per-row
  scratch of CAP slots (positions from a prefix sum, so no atomics) and ranks them with a
  bitonic top-k. For random data about k + k*k/(2*LANES) keys survive. If more than CAP survive
  (adversarial rows, e.g. the best values periodic in LANES), the row falls back to the exact
  "bitonic" method, so results never depend on the data's shape, only the time does.
- "threshold32": the same bound on 32-bit score bits, which are not distinct: pass 2 keeps the
  columns scoring above t (CAP slots) and the first CAP columns scoring exactly t, in column
  order, so ties at t keep the lowest indices. Narrower compares, one more prefix sum per
  chunk; measured 5-15% slower than threshold64 on the H200 (cause not profiled).
- "bitonic": stream the row in chunks, take each chunk's top KPAD keys with `tl.topk` (a bitonic
  top-k network) and merge them into a running top KPAD. One pass, no scratch, more compute:
  2 to 4 times slower than threshold64 on the H200.

Runs under the Triton CPU interpreter (TRITON_INTERPRET=1, decided when this module is imported)
and compiled on CUDA; written against triton 3.6 and 3.9.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .topk_reference import SENTINEL_KEY

_SENTINEL = tl.constexpr(SENTINEL_KEY)
MAX_K = 64  # the largest k the kernel handles; kernels.topk sorts past it
# below every column's order-preserving score bits (those of -inf are -2139095041)
_MIN32 = tl.constexpr(-2147483647)
METHODS = ("threshold32", "threshold64", "bitonic")


@triton.jit
def _row_ordered(scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f, has_forced):
    """int32 order-preserving score bits of columns `offs` of one row; _MIN32 at or past n."""
    in_row = offs < n
    x = tl.load(scores_ptr + row * stride_s + offs, mask=in_row, other=0.0).to(tl.float32)
    x = tl.where(x != x, float("-inf"), x)  # NaN -> -inf
    x = tl.where(x == 0.0, 0.0, x)  # -0 -> +0
    # has_forced is 0 or 1: with 0 no forced column is read
    f = tl.load(forced_ptr + row * stride_f + offs, mask=offs < n * has_forced, other=0)
    x = tl.where(f != 0, float("inf"), x)
    bits = x.to(tl.int32, bitcast=True)
    ordered = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return tl.where(in_row, ordered, _MIN32)


@triton.jit
def _keys_of(ordered, offs):
    """int64 keys from int32 ordered bits: the bits above the inverted column index."""
    return (ordered.to(tl.int64) << 32) | (0x7FFFFFFF - offs).to(tl.int64)


@triton.jit
def _row_keys(scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f, has_forced):
    """int64 keys of columns `offs` of one row; SENTINEL_KEY at or past the valid length n."""
    ordered = _row_ordered(scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f, has_forced)
    return tl.where(offs < n, _keys_of(ordered, offs), _SENTINEL)


@triton.jit
def _bitonic_top(scores_ptr, forced_ptr, row, n, stride_s, stride_f, has_forced,
                 BLOCK: tl.constexpr, KPAD: tl.constexpr):
    """The top KPAD keys of a row, best first, from per-chunk bitonic top-k and a running merge."""
    best = tl.full([KPAD], _SENTINEL, tl.int64)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        keys = _row_keys(scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f, has_forced)
        chunk_top = tl.topk(keys, KPAD)
        both = tl.reshape(tl.join(best, chunk_top), [2 * KPAD])
        best = tl.topk(both, KPAD)
    return best


@triton.jit(do_not_specialize=["cols", "k", "stride_s", "stride_f", "has_valid", "has_forced"])
def _topk_kernel(
    scores_ptr, valid_ptr, forced_ptr, scratch_ptr, out_index_ptr, out_value_ptr,
    cols, k, stride_s, stride_f, has_valid, has_forced,
    METHOD: tl.constexpr, BLOCK: tl.constexpr, KPAD: tl.constexpr,
    LANES: tl.constexpr, CAP: tl.constexpr, FALLBACK_BLOCK: tl.constexpr,
):
    """One program per row: writes out_index/out_value[row, :k], best first.

    METHOD indexes METHODS (0 threshold32, 1 threshold64, 2 bitonic); scratch holds the
    threshold methods' survivor slots for this row.
    """
    row = tl.program_id(0).to(tl.int64)
    n = cols
    if has_valid != 0:
        n = tl.minimum(tl.maximum(tl.load(valid_ptr + row), 0), cols).to(tl.int32)

    if METHOD == 0:
        # pass 1: per-lane maxima of the 32-bit score bits (lane = column mod LANES); t is the
        # k-th largest. Columns above t all survive; columns equal to t tie on score and only
        # the lowest-indexed ones can be needed, so the first CAP of them (column order) survive.
        running32 = tl.full([BLOCK], _MIN32, tl.int32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            running32 = tl.maximum(running32, _row_ordered(
                scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f, has_forced))
        lanes32 = tl.max(tl.reshape(running32, [BLOCK // LANES, LANES]), axis=0)
        lane_top32 = tl.topk(lanes32, KPAD)
        slot = tl.arange(0, KPAD)
        t32 = tl.max(tl.where(slot == k - 1, lane_top32, _MIN32), axis=0)
        # pass 2: above-t keys go to scratch slots [0, CAP), at-t keys to [CAP, 2 CAP)
        above = tl.full([], 0, tl.int32)
        at = tl.full([], 0, tl.int32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            ordered = _row_ordered(scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f,
                                   has_forced)
            in_row = offs < n
            is_above = ((ordered > t32) & in_row).to(tl.int32)
            is_at = ((ordered == t32) & in_row).to(tl.int32)
            packed = tl.sum(is_above + (is_at << 16), axis=0)  # BLOCK < 2**16
            found_above = packed & 0xFFFF
            found_at = packed >> 16
            if packed != 0:
                keys = _keys_of(ordered, offs)
                base = scratch_ptr + row * (2 * CAP)
                if found_above > 0:
                    pos = above + tl.cumsum(is_above, axis=0) - 1
                    tl.store(base + pos, keys, mask=(is_above != 0) & (pos < CAP))
                if found_at > 0:
                    pos = at + tl.cumsum(is_at, axis=0) - 1
                    tl.store(base + CAP + pos, keys, mask=(is_at != 0) & (pos < CAP))
            above += found_above
            at += found_at
        tl.debug_barrier()
        if above <= CAP:
            slots = tl.arange(0, 2 * CAP)
            filled = tl.where(slots < CAP, slots < above, slots - CAP < at)
            candidates = tl.load(scratch_ptr + row * (2 * CAP) + slots, mask=filled,
                                 other=_SENTINEL, cache_modifier=".cg")
            best = tl.topk(candidates, KPAD)
        else:
            best = _bitonic_top(scores_ptr, forced_ptr, row, n, stride_s, stride_f, has_forced,
                                FALLBACK_BLOCK, KPAD)
    elif METHOD == 1:
        # pass 1: per-lane maxima (lane = column mod LANES) and the threshold t
        running = tl.full([BLOCK], _SENTINEL, tl.int64)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            keys = _row_keys(scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f, has_forced)
            running = tl.maximum(running, keys)
        lanes = tl.max(tl.reshape(running, [BLOCK // LANES, LANES]), axis=0)
        lane_top = tl.topk(lanes, KPAD)
        slot = tl.arange(0, KPAD)
        t = tl.max(tl.where(slot == k - 1, lane_top, _SENTINEL), axis=0)
        # pass 2: compact the survivors (keys >= t) into the row's scratch, in column order
        count = tl.full([], 0, tl.int32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            keys = _row_keys(scores_ptr, forced_ptr, row, offs, n, stride_s, stride_f, has_forced)
            survive = (keys >= t) & (keys > _SENTINEL)
            found = tl.sum(survive.to(tl.int32), axis=0)
            if found > 0:
                pos = count + tl.cumsum(survive.to(tl.int32), axis=0) - 1
                tl.store(scratch_ptr + row * CAP + pos, keys, mask=survive & (pos < CAP))
            count += found
        tl.debug_barrier()
        if count <= CAP:
            cap_offs = tl.arange(0, CAP)
            candidates = tl.load(scratch_ptr + row * CAP + cap_offs, mask=cap_offs < count,
                                 other=_SENTINEL, cache_modifier=".cg")
            best = tl.topk(candidates, KPAD)
        else:
            best = _bitonic_top(scores_ptr, forced_ptr, row, n, stride_s, stride_f, has_forced,
                                FALLBACK_BLOCK, KPAD)
    else:
        best = _bitonic_top(scores_ptr, forced_ptr, row, n, stride_s, stride_f, has_forced,
                            BLOCK, KPAD)

    out = tl.arange(0, KPAD)
    real = best > _SENTINEL
    index = tl.where(real, 0x7FFFFFFF - (best & 0x7FFFFFFF), -1)
    ordered = (best >> 32).to(tl.int32)
    bits = tl.where(ordered < 0, ordered ^ 0x7FFFFFFF, ordered)
    value = tl.where(real, bits.to(tl.float32, bitcast=True), float("-inf"))
    keep = out < k
    tl.store(out_index_ptr + row * k + out, index, mask=keep)
    tl.store(out_value_ptr + row * k + out,
             value.to(out_value_ptr.dtype.element_ty), mask=keep)


@dataclass(frozen=True)
class Config:
    """One launch configuration: method, chunk width, padded k, lanes, scratch slots, warps.

    fallback_block is the chunk the threshold method's exact fallback streams in (at most 1024:
    a bitonic top-k over a wider chunk costs more to compile than it saves).
    """

    method: str
    block: int
    kpad: int
    lanes: int
    cap: int
    num_warps: int
    fallback_block: int


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def choose_config(cols: int, k: int, method: str = "threshold64", max_block: int = 1024,
                  num_warps: int | None = None) -> Config:
    """The launch configuration for rows of `cols` columns and a given k (1 <= k <= MAX_K).

    KPAD is k rounded up to 16, 32 or 64; LANES = CAP = 4 * KPAD. BLOCK, the chunk a row
    streams in, comes from few buckets so few variants compile: LANES for rows that short, 256,
    then `max_block` (a power of two from 256 to 32768).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"the kernel handles 1 <= k <= {MAX_K}, got {k}")
    if max_block < 256 or max_block > 32768 or max_block & (max_block - 1):
        # threshold32 packs two per-chunk counts into one int32 sum: BLOCK < 2**16
        raise ValueError(f"max_block must be a power of two in [256, 32768], got {max_block}")
    kpad = max(16, _pow2_at_least(k))
    lanes = 4 * kpad
    block = lanes if cols <= lanes else 256 if cols <= 256 else max_block
    block = max(block, lanes)
    if num_warps is None:
        num_warps = 1 if block <= 256 else 4 if block <= 2048 else 8
    return Config(method, block, kpad, lanes, lanes, num_warps, min(block, 1024))


def auto_config(rows: int, cols: int, k: int) -> Config:
    """The configuration kernels.topk uses, from the H200 benchmark (docs/kernels.md).

    threshold64 with max_block 1024 (rows stream in 1024-column chunks with 4 warps; short rows
    take one smaller chunk) for every row count: the fastest, or within a few percent of it, on
    every measured shape. (4096-column chunks cut the latency of 1 to 16
    rows of 4096+ columns by about a quarter but lose badly on many rows; `rows` is accepted so
    such a split can be made here once it is measured on this code.)
    """
    del rows  # one configuration for every row count, for now
    return choose_config(cols, k, "threshold64", 1024)


def topk_triton(
    scores: torch.Tensor,
    k: int,
    valid_lengths: torch.Tensor | None = None,
    forced: torch.Tensor | None = None,
    config: Config | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernel: same contract as topk_reference, for 1 <= k <= MAX_K.

    scores: [rows, cols] float32/bfloat16/float16 with unit column stride; valid_lengths: [rows]
    int32/int64 or None; forced: [rows, cols] bool or None. All on one device (CUDA, or CPU
    under TRITON_INTERPRET=1). Returns (indices int64 [rows, k], values [rows, k] scores.dtype).
    """
    rows, cols = scores.shape
    if config is None:
        config = auto_config(rows, cols, k)
    index = torch.empty((rows, k), dtype=torch.int64, device=scores.device)
    values = torch.empty((rows, k), dtype=scores.dtype, device=scores.device)
    if rows == 0:
        return index, values
    # per-row survivor slots: CAP for threshold64, 2 * CAP (above t, at t) for threshold32
    slots = {"threshold32": 2 * config.cap, "threshold64": config.cap, "bitonic": 1}
    scratch = torch.empty(
        (rows if config.method != "bitonic" else 1, slots[config.method]),
        dtype=torch.int64, device=scores.device,
    )
    # Absent arguments get a placeholder of the same pointer type; has_valid/has_forced = 0 keep
    # the kernel from reading them, and one compiled variant serves both cases.
    valid = index if valid_lengths is None else valid_lengths.to(torch.int64)
    if forced is None:
        forced_arg, stride_f = torch.empty(1, dtype=torch.uint8, device=scores.device), 0
    else:
        forced_arg, stride_f = forced.view(torch.uint8), forced.stride(0)
    _topk_kernel[(rows,)](
        scores, valid, forced_arg, scratch, index, values,
        cols, k, scores.stride(0), stride_f,
        int(valid_lengths is not None), int(forced is not None),
        METHOD=METHODS.index(config.method), BLOCK=config.block, KPAD=config.kpad,
        LANES=config.lanes, CAP=config.cap, FALLBACK_BLOCK=config.fallback_block,
        num_warps=config.num_warps,
    )
    return index, values

