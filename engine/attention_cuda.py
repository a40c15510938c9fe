"""Ragged attention on CUDA: the backends, and the measured per-configuration choice among them.

Every backend implements the interface of `attention.py`:

    attention(q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D], cu_seqlens int32 [B+1], max_seqlen,
              causal) -> out [T, Hq, D]

and runs inside a CUDA graph: it reads no device value on the host and its launch shapes depend
only on tensor shapes and the Python int `max_seqlen`, which a graph fixes per bucket (any value
at least as long as the longest sequence is correct). Sequences of length zero are allowed (the
graph cache uses them for unused sequence slots).

- `varlen`: PyTorch's FlashAttention-2 varlen kernel (`torch.nn.attention.varlen.varlen_attn`,
  or the aten op beneath it). Grouped-query heads go to the kernel natively: keys and values
  are never repeated.
- `flash_attn`: `flash_attn.flash_attn_varlen_func`, used only when flash-attn is importable;
  grouped-query heads are native.
- `sdpa`: the fallback that runs anywhere CUDA does: the ragged axis is scattered into a padded
  [B, max_seqlen, H, D] block (positions computed on the device) and `scaled_dot_product_attention`
  runs with a key-padding mask (bidirectional) or `is_causal` (causal: right padding is never
  attended by a real query, so no mask is needed).

Not a backend: cuDNN's ragged attention (`aten._cudnn_attention_forward` with cu_seqlens). It is
correct but cannot be captured in a CUDA graph (torch 2.11, H200: the capture is invalidated),
so it cannot serve a whole-model graph.

`AttentionTable` is the per-configuration choice: for each attention shape (query heads, kv
heads, head dim, causal) a grid of measured (batch, length) cells, each with its time per
backend; `pick` returns the fastest available backend of the nearest cell. The table is measured
on the target GPU by `benchmarks/engine_gpu.py --attention-sweep` and stored in
`attention_table.json` beside this module.

This module knows nothing about models, graphs or scheduling.
"""

import inspect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from hedgerow.errors import ConfigError

BACKEND_NAMES = ("varlen", "flash_attn", "sdpa")
TABLE_PATH = Path(__file__).with_name("attention_table.json")

AttentionFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, bool], torch.Tensor
]


def _expand_kv(x: torch.Tensor, q_heads: int) -> torch.Tensor:
    """[T, Hkv, D] -> [T, Hq, D], each kv head repeated for its query group (a copy)."""
    group = q_heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


class VarlenAttention:
    """PyTorch's FlashAttention-2 varlen kernel, GQA native (the kernel groups query heads).

    Calls `torch.ops.aten._flash_attention_forward` directly when this torch has it: it is what
    `varlen_attn` calls, minus the wrapper's per-call zero-fill of an RNG state it never uses
    (one extra kernel per layer, seen in the kernel profile). Otherwise, the public
    `varlen_attn` with whichever causal/GQA spelling this torch's signature has.
    """

    name = "varlen"

    def __init__(self) -> None:
        from torch.nn.attention.varlen import varlen_attn

        self._public = varlen_attn
        params = inspect.signature(varlen_attn).parameters
        self._has_is_causal = "is_causal" in params
        self._has_gqa_flag = "enable_gqa" in params
        if not (self._has_is_causal or "window_size" in params):
            raise RuntimeError("varlen_attn takes neither is_causal nor window_size")
        self._aten = getattr(torch.ops.aten, "_flash_attention_forward", None)

    def __call__(self, q, k, v, cu_seqlens, max_seqlen, causal):
        if self._aten is not None:
            return self._aten(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, 0.0,
                              causal, False)[0]
        kwargs: dict[str, Any] = {}
        if self._has_is_causal:
            kwargs["is_causal"] = causal
        else:
            kwargs["window_size"] = (-1, 0) if causal else (-1, -1)
        if self._has_gqa_flag and k.shape[1] != q.shape[1]:
            kwargs["enable_gqa"] = True
        return self._public(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **kwargs)


class FlashAttnVarlen:
    """`flash_attn.flash_attn_varlen_func` (FlashAttention 2/3 package), GQA native."""

    name = "flash_attn"

    def __init__(self) -> None:
        from flash_attn import flash_attn_varlen_func

        self._fn = flash_attn_varlen_func

    def __call__(self, q, k, v, cu_seqlens, max_seqlen, causal):
        return self._fn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                        dropout_p=0.0, causal=causal)


class SdpaPaddedAttention:
    """Scatter to a padded block, SDPA with a key mask, gather back. Graph-safe, any GPU."""

    name = "sdpa"

    def __call__(self, q, k, v, cu_seqlens, max_seqlen, causal):
        num_tokens, q_heads, head_dim = q.shape
        batch = cu_seqlens.shape[0] - 1
        device = q.device
        cu = cu_seqlens.to(torch.int64)
        tokens = torch.arange(num_tokens, device=device)
        seq = torch.searchsorted(cu[1:], tokens, right=True)             # [T], sequence of token
        pos = tokens - cu[seq]                                             # [T], position in it
        k, v = _expand_kv(k, q_heads), _expand_kv(v, q_heads)

        def padded(x: torch.Tensor) -> torch.Tensor:
            block = x.new_zeros((batch, max_seqlen, q_heads, head_dim))
            block[seq, pos] = x
            return block.transpose(1, 2)                                   # [B, H, S, D]

        qp, kp, vp = padded(q), padded(k), padded(v)
        if causal:
            out = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True)
        else:
            lengths = cu[1:] - cu[:-1]
            keys = torch.arange(max_seqlen, device=device)
            mask = (keys[None, :] < lengths[:, None]) | (lengths[:, None] == 0)   # [B, S]
            out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask[:, None, None, :])
        return out.transpose(1, 2)[seq, pos]                               # [T, H, D]


def available_backends() -> dict[str, AttentionFn]:
    """Backends that can run here, by name, in preference order (varlen, flash_attn, sdpa)."""
    found: dict[str, AttentionFn] = {}
    if not torch.cuda.is_available():
        return found
    try:
        found["varlen"] = VarlenAttention()
    except (ImportError, RuntimeError):
        pass
    try:
        found["flash_attn"] = FlashAttnVarlen()
    except ImportError:
        pass
    found["sdpa"] = SdpaPaddedAttention()
    return found


def shape_key(q_heads: int, kv_heads: int, head_dim: int, causal: bool) -> str:
    """The table's name for an attention shape, e.g. `q16-kv8-d128-causal`."""
    return f"q{q_heads}-kv{kv_heads}-d{head_dim}-{'causal' if causal else 'bidirectional'}"


@dataclass(frozen=True)
class Cell:
    batch: int
    length: int
    times_us: dict[str, float]  # backend name -> median microseconds per call

    def fastest(self, allowed: set[str]) -> str | None:
        timed = [(t, name) for name, t in self.times_us.items() if name in allowed]
        return min(timed)[1] if timed else None


class AttentionTable:
    """Measured backend times per attention shape and (batch, length) cell."""

    def __init__(self, shapes: dict[str, list[Cell]], meta: dict[str, Any] | None = None):
        self.shapes = shapes
        self.meta = meta or {}

    @classmethod
    def load(cls, path: Path = TABLE_PATH) -> "AttentionTable":
        """Read a table; a missing file is an empty table (the preference order decides)."""
        if not path.is_file():
            return cls({})
        try:
            raw = json.loads(path.read_text())
            shapes = {
                key: [Cell(int(c["batch"]), int(c["length"]),
                           {str(n): float(t) for n, t in c["times_us"].items()})
                      for c in cells]
                for key, cells in raw["shapes"].items()
            }
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(
                f"attention table {path} is unreadable ({error}); re-measure it with "
                "`python benchmarks/engine_gpu.py --attention-sweep` or delete it"
            ) from None
        return cls(shapes, raw.get("meta", {}))

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "shapes": {
                key: [{"batch": c.batch, "length": c.length, "times_us": c.times_us,
                       "winner": c.fastest(set(c.times_us))} for c in cells]
                for key, cells in sorted(self.shapes.items())
            },
        }

    def save(self, path: Path = TABLE_PATH) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n")

    def pick(self, key: str, batch: int, length: int, available: list[str]) -> str:
        """Fastest available backend in the cell nearest (log scale) to (batch, length);
        the first available backend when the shape was never measured."""
        if not available:
            raise ConfigError("no CUDA attention backend is available")
        cells = self.shapes.get(key, [])
        allowed = set(available)

        def distance(cell: Cell) -> float:
            return (abs(math.log2(cell.batch) - math.log2(max(batch, 1)))
                    + abs(math.log2(cell.length) - math.log2(max(length, 1))))

        for cell in sorted(cells, key=distance):
            winner = cell.fastest(allowed)
            if winner is not None:
                return winner
        return available[0]


class AttentionChooser:
    """Hands the graph cache an attention backend per configuration: a forced backend
    (`--attention-backend NAME`) or the table's pick for the model's attention shape."""

    def __init__(self, q_heads: int, kv_heads: int, head_dim: int, causal: bool,
                 forced: str = "auto", table: AttentionTable | None = None,
                 backends: dict[str, AttentionFn] | None = None) -> None:
        self.backends = available_backends() if backends is None else backends
        if forced != "auto" and forced not in BACKEND_NAMES:
            raise ConfigError(f"attention backend {forced!r} is unknown; use auto or one of "
                              f"{', '.join(BACKEND_NAMES)}")
        if forced != "auto" and forced not in self.backends:
            raise ConfigError(
                f"attention backend {forced!r} is not available here (available: "
                f"{', '.join(self.backends) or 'none'}); use --attention-backend auto")
        self.forced = forced
        self.key = shape_key(q_heads, kv_heads, head_dim, causal)
        self.table = AttentionTable.load() if table is None else table

    def name_for(self, batch: int, length: int) -> str:
        if self.forced != "auto":
            return self.forced
        return self.table.pick(self.key, batch, length, list(self.backends))

    def for_batch(self, batch: int, length: int) -> AttentionFn:
        return self.backends[self.name_for(batch, length)]
