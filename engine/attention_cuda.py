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
- `fa4`: FlashAttention 4 (`flash_attn.cute.flash_attn_varlen_func`, the `flash-attn-4`
  package, CuTe DSL; Hopper and newer), used when it imports; GQA native. Its first call per
  kernel variant compiles for a few seconds; `compile_cache` keeps the result on disk.
- `flash_attn`: `flash_attn.flash_attn_varlen_func` (FlashAttention 2/3 package), used only
  when it is importable; grouped-query heads are native.
- `triton`: Hedgerow's own Triton kernel (`kernels/ragged_attention.py`): blocks of tokens of the
  ragged axis per head, so its grid ignores `max_seqlen` and short sequences share a
  program; built for the short cells, where the FlashAttention kernels are mostly launch and
  ramp. GQA native. Needs Triton only; made only once a first call on this GPU matches the
  reference.
- `sdpa`: the fallback that runs anywhere CUDA does: the ragged axis is scattered into a padded
  [B, max_seqlen, H, D] block (positions computed on the device) and `scaled_dot_product_attention`
  runs with a key-padding mask (bidirectional) or `is_causal` (causal: right padding is never
  attended by a real query, so no mask is needed).
- `cudnn`: cuDNN's fused attention through SDPA on a dense [B, H, L, D] view. Not ragged: it
  serves only a batch of `T / max_seqlen` sequences all `max_seqlen` long (a uniform
  configuration of the graph cache), where it measured fastest for head dim 64.

Not a backend: cuDNN's ragged attention (`aten._cudnn_attention_forward` with cu_seqlens). It is
correct but cannot be captured in a CUDA graph (torch 2.11, H200: the capture is invalidated),
so it cannot serve a whole-model graph. Padding a ragged batch into a masked dense cuDNN call
measured slower than varlen.

Every backend is reached through one torch custom op, `hedgerow::attention(..., backend)`, with a
fake implementation: torch.compile traces through it without looking inside (FA4's CuTe kernels
and cuDNN's graphs are not traceable), CUDA-graph capture records what it launches, and since the
backend is an integer argument rather than a different Python object, one compiled forward
serves every backend.

`AttentionTable` is the per-configuration choice: for each attention shape (query heads, kv
heads, head dim, causal) a grid of measured (batch, length) cells, each with its time per
backend; `pick` returns the fastest available backend of the nearest cell. The table is measured
on the target GPU by `benchmarks/engine_gpu.py --attention-sweep` and stored in
`attention_table.json` beside this module.

This module knows nothing about models, graphs or scheduling.
"""

import functools
import inspect
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from hedgerow.errors import ConfigError
from hedgerow.gpu_settings import ATTENTION_BACKENDS
from hedgerow.kernels.ragged_attention import ragged_attention, reference_attention
from hedgerow.logs import fields

log = logging.getLogger(__name__)

# Backends that serve only uniform batches (every sequence `max_seqlen` long), and the shortest
# length they are given: cuDNN refuses key/value length 1 ("No available kernel"), and the
# table measures no cell below 64 tokens, where the ragged kernels tie with it anyway.
UNIFORM_ONLY = ("cudnn",)
UNIFORM_MIN_LENGTH = 64
# Every backend's name, in preference order (the first available one serves a shape the table
# never measured); a backend's index here is what the custom op is given.
BACKEND_NAMES = ATTENTION_BACKENDS + UNIFORM_ONLY
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


class Fa4Varlen:
    """FlashAttention 4's varlen forward (`flash-attn-4`, CuTe DSL), GQA native. Hopper+."""

    name = "fa4"

    def __init__(self) -> None:
        if torch.cuda.get_device_capability() < (9, 0):
            raise RuntimeError("FlashAttention 4 needs compute capability 9.0 or newer")
        from flash_attn.cute import flash_attn_varlen_func

        self._fn = flash_attn_varlen_func

    def __call__(self, q, k, v, cu_seqlens, max_seqlen, causal):
        out = self._fn(q, k, v, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens,
                       max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen, causal=causal)
        return out[0] if isinstance(out, tuple) else out


class TritonRagged:
    """Hedgerow's Triton ragged-attention kernel (`kernels/ragged_attention.py`), GQA native.

    Made only after a first call on this GPU (which compiles the kernel) matches the float64
    reference: a kernel that fails to build or disagrees here leaves the backend out, logged
    once, instead of failing the warm-up of every configuration the table gives it."""

    name = "triton"

    def __init__(self) -> None:
        import triton  # noqa: F401  (ImportError: the backend is left out)

        lengths = [3, 0, 70]
        cu = torch.tensor([0, 3, 3, 73], dtype=torch.int32)
        q, k, v = (torch.randn(sum(lengths), heads, 64, dtype=torch.bfloat16)
                   for heads in (4, 2, 2))
        want = reference_attention(q, k, v, cu, max(lengths), True).float()
        try:
            got = ragged_attention(q.cuda(), k.cuda(), v.cuda(), cu.cuda(), True).float().cpu()
        except Exception as error:  # noqa: BLE001  (a compiler's own error types vary)
            raise RuntimeError(f"the kernel failed its first call: {error}") from None
        if not torch.allclose(got, want, atol=2e-2, rtol=2e-2):
            raise RuntimeError("the kernel disagrees with its reference on this GPU (largest "
                               f"difference {(got - want).abs().max().item():.3g})")

    def __call__(self, q, k, v, cu_seqlens, max_seqlen, causal):
        return ragged_attention(q, k, v, cu_seqlens, causal)


class CudnnUniform:
    """cuDNN attention on a dense [B, H, L, D] view of a uniform batch (B = T / max_seqlen
    sequences, every one `max_seqlen` long; `cu_seqlens` is not read). Keys and values are
    repeated for grouped-query heads."""

    name = "cudnn"

    def __call__(self, q, k, v, cu_seqlens, max_seqlen, causal):
        tokens, q_heads, head_dim = q.shape
        seqs = tokens // max_seqlen

        def dense(x: torch.Tensor) -> torch.Tensor:
            x = _expand_kv(x, q_heads)
            return x.view(seqs, max_seqlen, q_heads, head_dim).transpose(1, 2)

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(dense(q), dense(k), dense(v), is_causal=causal)
        return out.transpose(1, 2).reshape(tokens, q_heads, head_dim)


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


_MAKERS: dict[str, Callable[[], AttentionFn]] = {
    "varlen": VarlenAttention, "fa4": Fa4Varlen, "flash_attn": FlashAttnVarlen,
    "triton": TritonRagged, "sdpa": SdpaPaddedAttention, "cudnn": CudnnUniform,
}


@functools.cache
def available_backends() -> dict[str, AttentionFn]:
    """Backends that can run here, by name, in preference order (BACKEND_NAMES). Computed once
    per process; an optional kernel that does not import is logged once and left out."""
    found: dict[str, AttentionFn] = {}
    if not torch.cuda.is_available():
        return found
    for name in BACKEND_NAMES:
        try:
            found[name] = _MAKERS[name]()
        except (ImportError, RuntimeError, OSError) as error:
            if name in ("fa4", "flash_attn", "triton"):
                log.info("%s", fields(event="engine.attention_unavailable", backend=name,
                                      reason=f"{type(error).__name__}: {error}"[:300]))
    return found


@torch.library.custom_op("hedgerow::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                 max_seqlen: int, causal: bool, backend: int) -> torch.Tensor:
    """The backend `BACKEND_NAMES[backend]` on a ragged batch: [T, Hq, D], contiguous."""
    fn = available_backends()[BACKEND_NAMES[backend]]
    return fn(q, k, v, cu_seqlens, max_seqlen, causal).contiguous()


@attention_op.register_fake
def _attention_fake(q, k, v, cu_seqlens, max_seqlen, causal, backend):
    return q.new_empty(q.shape)


def routed(backend: int) -> AttentionFn:
    """An attention callable (the models' interface) that runs backend number `backend`
    through the custom op; built inside the compiled forward, so `backend` stays an input."""

    def attention(q, k, v, cu_seqlens, max_seqlen, causal):
        return torch.ops.hedgerow.attention(q, k, v, cu_seqlens, max_seqlen, causal, backend)

    return attention


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
    (`--attention-backend NAME`, ragged ones only) or the table's pick for the model's shape.
    Uniform-only backends (cuDNN) are picked by the table alone, for uniform batches."""

    def __init__(self, q_heads: int, kv_heads: int, head_dim: int, causal: bool,
                 forced: str = "auto", table: AttentionTable | None = None,
                 backends: dict[str, AttentionFn] | None = None) -> None:
        self.backends = available_backends() if backends is None else backends
        if forced != "auto" and forced not in ATTENTION_BACKENDS:
            raise ConfigError(f"attention backend {forced!r} is unknown; use auto or one of "
                              f"{', '.join(ATTENTION_BACKENDS)}")
        if forced != "auto" and forced not in self.backends:
            raise ConfigError(
                f"attention backend {forced!r} is not available here (available: "
                f"{', '.join(self.backends) or 'none'}); use --attention-backend auto")
        self.forced = forced
        self.key = shape_key(q_heads, kv_heads, head_dim, causal)
        self.table = AttentionTable.load() if table is None else table
        self._ragged = [name for name in self.backends if name not in UNIFORM_ONLY]
        self._uniform_picks: dict[tuple[int, int], str] = {}

    def name_for(self, batch: int, length: int) -> str:
        """The backend for a ragged configuration of `batch` slots, `length` tokens each on
        average."""
        if self.forced != "auto":
            return self.forced
        return self.table.pick(self.key, batch, length, self._ragged)

    def uniform_name_for(self, batch: int, length: int) -> str:
        """The backend for `batch` sequences all `length` long: uniform-only ones compete.
        Asked on every step of a uniform batch, so each answer is kept."""
        if self.forced != "auto":
            return self.forced
        name = self._uniform_picks.get((batch, length))
        if name is None:
            allowed = list(self.backends) if length >= UNIFORM_MIN_LENGTH else self._ragged
            name = self.table.pick(self.key, batch, length, allowed)
            self._uniform_picks[(batch, length)] = name
        return name

    def for_batch(self, batch: int, length: int) -> AttentionFn:
        return self.backends[self.name_for(batch, length)]
