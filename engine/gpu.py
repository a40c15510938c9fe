"""The CUDA step path: bucketed static buffers, graph capture and replay, the copy back.

`CudaStepper.step(batch)` pads the ragged batch to its configuration (`graphs.GraphGrid`),
writes it into that configuration's static input buffer with one host-to-device copy from pinned
memory, runs the forward pass and pooling (eagerly, or by replaying the captured graph, as the
`GraphCache` decides), and queues the copy of the pooled embeddings into pinned host memory
behind it, all on the engine's own stream; it returns a LazyTensor at once.

Padding never changes a real sequence's output. A configuration `S x N` holds S real-sequence
slots and one padding slot: the batch's B sequences fill slots 0..B-1, slots B..S-1 are empty
(length 0), and the N - T tail tokens the batch does not fill form the padding slot's own
sequence, which attention confines to itself and pooling writes to a row nobody reads.

A batch whose sequences all have one length may instead run in a uniform configuration
(`S` sequences of `L` tokens, nothing padded), when the attention table says a uniform-only
kernel (cuDNN on a dense block) beats the ragged pick for that cell and the graph memory has
room; otherwise it takes its grid configuration like any other batch.

With `compile` (the default) the model's forward and pooling go through `torch.compile`
(Inductor, dynamic shapes) before capture; batches past the grid run uncompiled. The attention
backend enters the compiled forward as an integer (`attention_cuda.routed`), so one compile
serves every backend the table picks.

Static input layout, one int32 buffer per configuration (views, no copies):
    input_ids [N] | position_ids [N] | seq_index [N] | cu_seqlens [S+2] | pool_starts [S+2] |
    lengths [S+1]
`pool_starts` is `cu_seqlens` with empty slots' starts clamped into range, so CLS pooling's
gather stays inside the buffer.

This module owns device memory, streams and graphs for one model. It knows nothing about
tokenization, requests or scheduling, and the model math lives in `models/`.
"""

import functools
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch._dynamo.exc import TorchDynamoException

from hedgerow.engine import compile_cache, resident
from hedgerow.engine.attention_cuda import (BACKEND_NAMES, UNIFORM_ONLY, AttentionChooser,
                                            AttentionTable, routed)
from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.cuda_linear import use_gelu_epilogues, use_swiglu_products
from hedgerow.engine.fp8_linear import FP8_MIN_TOKENS, use_fp8_products
from hedgerow.engine.graphs import CaptureError, GraphCache
from hedgerow.engine.lazy import LazyTensor
from hedgerow.engine.pooling import pool
from hedgerow.errors import ConfigError
from hedgerow.gpu_settings import GpuSettings
from hedgerow.graph_grid import Config
from hedgerow.logs import fields

log = logging.getLogger(__name__)

MIB = 1 << 20


class BucketViews(NamedTuple):
    """Views into a packed bucket buffer (see the module docstring), all int32."""

    input_ids: torch.Tensor     # [N]
    position_ids: torch.Tensor  # [N]
    seq_index: torch.Tensor     # [N], S for the padding slot's tokens
    cu_seqlens: torch.Tensor    # [S+2]: real, empty, then padding slot
    pool_starts: torch.Tensor   # [S+2]
    lengths: torch.Tensor       # [S+1]


@functools.cache
def _bucket_slices(config: Config) -> tuple[slice, ...]:
    """Where each of BucketViews' fields lies in a packed bucket buffer (cached: every step
    asks)."""
    n, s = config.tokens, config.seq_slots
    edges = (0, n, 2 * n, 3 * n, 3 * n + s + 2, 3 * n + 2 * s + 4, 3 * n + 3 * s + 5)
    return tuple(slice(start, end) for start, end in zip(edges, edges[1:]))


def bucket_views(packed: torch.Tensor, config: Config) -> BucketViews:
    return BucketViews(*(packed[where] for where in _bucket_slices(config)))


def pack_bucket(feed: RaggedBatch, config: Config, pooling: str) -> torch.Tensor:
    """The static-buffer image of `feed` padded to `config`: int32 [3N + 3S + 5], pinned when
    CUDA is available. Layout in the module docstring. Plain numpy on the host (tens of
    microseconds at most), since it sits on every step's critical path."""
    n, slots = config.tokens, config.seq_slots
    t, b = feed.num_tokens, feed.num_seqs
    if t > n or b > slots:
        raise ValueError(f"a batch of {b} sequences and {t} tokens does not fit {config}")
    packed = torch.empty(3 * n + 3 * slots + 5, dtype=torch.int32,
                         pin_memory=torch.cuda.is_available())
    # numpy slices of one numpy view: six torch slices and their .numpy() took 12 of 20 µs.
    whole = packed.numpy()
    ids, pos, seq, cu, starts, lengths = (whole[where] for where in _bucket_slices(config))
    real_cu = feed.cu_seqlens.numpy()
    ids[:t] = feed.input_ids.numpy()
    ids[t:] = 0
    if b == 1:  # the latency path's batch of one: no repeat, no gather
        seq[:t] = 0
        pos[:t] = np.arange(t, dtype=np.int32)
    else:
        seq[:t] = np.repeat(np.arange(b, dtype=np.int32), np.diff(real_cu))
        np.subtract(np.arange(t, dtype=np.int32), real_cu[seq[:t]], out=pos[:t])
    seq[t:] = slots
    pos[t:] = 0  # any valid position: the padding slot's output is never read
    cu[:b + 1] = real_cu
    cu[b + 1:slots + 1] = t
    cu[slots + 1] = n
    starts[:] = cu
    if pooling == "cls":
        np.minimum(starts, n - 1, out=starts)
    np.subtract(cu[1:], cu[:-1], out=lengths)
    if pooling == "mean":
        np.maximum(lengths, 1, out=lengths)  # empty slots: a zero sum over one, not 0/0
    return packed


def pack_unpadded(feed: RaggedBatch) -> torch.Tensor:
    """The batch as it is, for the eager path past the grid: int32 [3T + 2B + 1] holding
    input_ids [T] | position_ids [T] | seq_index [T] | cu_seqlens [B+1] | lengths [B]."""
    t, b = feed.num_tokens, feed.num_seqs
    packed = torch.empty(3 * t + 2 * b + 1, dtype=torch.int32,
                         pin_memory=torch.cuda.is_available())
    a = packed.numpy()
    cu = feed.cu_seqlens.numpy()
    seq = np.repeat(np.arange(b, dtype=np.int32), np.diff(cu))
    a[:t] = feed.input_ids.numpy()
    a[t:2 * t] = np.arange(t, dtype=np.int32) - cu[:-1][seq]
    a[2 * t:3 * t] = seq
    a[3 * t:3 * t + b + 1] = cu
    a[3 * t + b + 1:] = np.diff(cu)
    return packed


@dataclass
class _Static:
    """A configuration's device buffers: the packed inputs and, once captured, the graph."""

    packed: torch.Tensor
    attention_name: str
    max_seqlen: int
    graph: "torch.cuda.CUDAGraph | None" = None
    output: torch.Tensor | None = None  # float32 [S+1, H], written by every replay


class CudaStepper:
    """Runs `model` on one CUDA device through the graph cache. One thread calls `step`."""

    def __init__(self, model: nn.Module, *, pooling: str, max_tokens: int, q_heads: int,
                 kv_heads: int, head_dim: int, causal: bool, device: torch.device,
                 vocab_size: int, settings: GpuSettings = GpuSettings(),
                 table: AttentionTable | None = None, head: nn.Module | None = None) -> None:
        if device.type != "cuda":
            raise ConfigError(f"CudaStepper needs a CUDA device, got {device}")
        self.model = model
        self.head = head  # a cross-encoder's ScoreHead, after pooling (captured with it)
        self.pooling = pooling
        self.device = device
        self.settings = settings
        self.max_tokens = max_tokens
        self.vocab_size = vocab_size
        if settings.compile_cache is not None:
            # Before the attention backends import: FA4 reads its cache location at import.
            compile_cache.use(settings.compile_cache)
        self.chooser = AttentionChooser(q_heads, kv_heads, head_dim, causal,
                                        forced=settings.attention_backend, table=table)
        self.stream = torch.cuda.Stream(device)
        self.pool_handle = torch.cuda.graph_pool_handle()
        grid = settings.grid()
        hot = settings.hot_set() if settings.graphs else []
        self.cache = GraphCache(grid, self, hot_set=hot,
                                memory_limit_bytes=settings.graph_memory_limit_mib * MIB)
        self._static: dict[Config, _Static] = {}
        self._model_and_pool = self._eager_model_and_pool
        self.compiled = settings.compile
        if settings.compile:
            # Inductor fuses the elementwise chains (norms, RoPE, activations, residual adds)
            # into generated kernels; one dynamic-shape compile serves every bucket, and the
            # first (eager) hit of each configuration absorbs any recompile before capture.
            mode = None if settings.compile_mode == "default" else settings.compile_mode
            self._model_and_pool = torch.compile(self._eager_model_and_pool, dynamic=True,
                                                 mode=mode)

    # -- the public step -------------------------------------------------------------------

    def step(self, batch: RaggedBatch) -> LazyTensor:
        """Launch `batch` (validated) and return a LazyTensor of float32 [B, H]."""
        # One stream context for the whole launch; the helpers below use the current stream.
        with torch.inference_mode(), torch.cuda.stream(self.stream):
            try:
                pooled = self._run(batch)
            except TorchDynamoException as error:
                self._give_up_compiling(error)
                pooled = self._run(batch)
            return LazyTensor.copy_from_device(pooled, self.stream)

    def _run(self, feed: RaggedBatch) -> torch.Tensor:
        if self.settings.graphs:
            uniform = self._uniform_config(feed)
            if uniform is not None:
                return self.cache.run_config(uniform, feed)
            return self.cache.run(feed.num_seqs, feed.num_tokens, feed)
        self.cache.eager_runs += 1
        return self.run_eager(None, feed)

    def _uniform_config(self, feed: RaggedBatch) -> Config | None:
        """The uniform configuration for `feed` when its sequences share one length, the table
        prefers a uniform-only kernel there, and the cache can still replay or capture it."""
        length = feed.uniform_length()
        config = self.cache.grid.uniform_for(feed.num_seqs, length) if length else None
        if config is None or not self.cache.can_take(config):
            return None
        if self.chooser.uniform_name_for(feed.num_seqs, length) not in UNIFORM_ONLY:
            return None
        return config

    def warmup(self) -> None:
        """Compile (when enabled) and capture the hot set; blocks, call before reporting
        ready."""
        with torch.inference_mode(), torch.cuda.stream(self.stream):
            try:
                self.cache.warmup()
            except TorchDynamoException as error:
                self._give_up_compiling(error)
                self.cache.warmup()
        torch.cuda.synchronize(self.device)
        self.cache.loaded = True

    def _give_up_compiling(self, error: Exception) -> None:
        """torch.compile failed: serve uncompiled from here on, with fresh graphs."""
        if self._model_and_pool is self._eager_model_and_pool:
            raise error
        log.warning("%s", fields(event="engine.compile_failed", error=str(error)[:300],
                                 action="serving uncompiled; --no-compile skips the attempt"))
        self._model_and_pool = self._eager_model_and_pool
        self.compiled = False
        self._static.clear()
        self.cache.reset()

    def report(self) -> dict[str, Any]:
        out = self.cache.report()
        out["attention"] = {str(c): s.attention_name for c, s in sorted(self._static.items())}
        out["static_buffers"] = len(self._static)
        out["compiled"] = self.compiled
        return out

    # -- GraphBackend -------------------------------------------------------------------------

    def run_eager(self, config: Config | None, feed: RaggedBatch) -> torch.Tensor:
        """Forward + pooling without a graph: at `config`'s static shapes (warming it), or on
        the unpadded batch when `config` is None (past the grid). Returns float32 [B, H].
        Like `replay`, runs on the current stream: `step` and `warmup` make it the engine's."""
        if config is None:
            return self._run_unpadded(feed)
        static = self._load(config, feed)
        return self._forward(config, static)[:feed.num_seqs]

    def capture(self, config: Config) -> int:
        static = self._static[config]
        self.stream.synchronize()
        before = torch.cuda.memory_reserved(self.device)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(self.stream):
                graph.capture_begin(pool=self.pool_handle, capture_error_mode="thread_local")
                try:
                    output = self._forward(config, static)
                finally:
                    graph.capture_end()
        except RuntimeError as error:
            raise CaptureError(
                f"capturing {config} with attention backend {static.attention_name!r} failed "
                f"({error}); use --attention-backend with another backend, shrink "
                "--graph-max-tokens, or run without graphs (--no-graphs)"
            ) from None
        static.graph, static.output = graph, output
        added = torch.cuda.memory_reserved(self.device) - before
        return max(added, 0) + static.packed.numel() * static.packed.element_size()

    def replay(self, config: Config, feed: RaggedBatch) -> torch.Tensor:
        static = self._load(config, feed)
        assert static.graph is not None and static.output is not None
        static.graph.replay()
        return static.output[:feed.num_seqs]

    def warmup_feed(self, config: Config) -> RaggedBatch:
        """`config.seq_slots` sequences of near-equal length filling `config.tokens` tokens
        (capped at the model's longest sequence)."""
        slots = config.seq_slots
        per = min(self.max_tokens, max(1, config.tokens // slots))
        lengths = [per] * slots
        cu = torch.zeros(slots + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int32), 0)
        total = int(cu[-1])
        ids = torch.randint(0, self.vocab_size, (total,), dtype=torch.int32)
        return RaggedBatch(ids, cu, per)

    # -- internals ----------------------------------------------------------------------------

    def _graph_max_seqlen(self, config: Config) -> int:
        # Any bound >= the longest sequence is correct; real sequences are at most
        # max_tokens long and the padding slot is shorter than one large bucket step. A
        # uniform configuration's sequences are exactly `uniform` long (no padding slot).
        if config.uniform:
            return config.uniform
        return min(config.tokens, max(self.max_tokens, self.cache.grid.large_step))

    def _attention_name(self, config: Config) -> str:
        if config.uniform:
            return self.chooser.uniform_name_for(config.seq_slots, config.uniform)
        return self.chooser.name_for(config.seq_slots, max(1, config.tokens // config.seq_slots))

    def _load(self, config: Config, feed: RaggedBatch) -> _Static:
        static = self._static.get(config)
        packed = pack_bucket(feed, config, self.pooling)
        if static is None:
            name = self._attention_name(config)
            device_packed = torch.empty(packed.shape, dtype=torch.int32, device=self.device)
            static = _Static(device_packed, name, self._graph_max_seqlen(config))
            self._static[config] = static
            log.debug("%s", fields(event="graph.static", config=str(config), attention=name))
        static.packed.copy_(packed, non_blocking=True)
        return static

    def _forward(self, config: Config, static: _Static) -> torch.Tensor:
        ids, pos, seq, cu, starts, lengths = bucket_views(static.packed, config)
        return self._model_and_pool(ids, pos, cu, static.max_seqlen,
                                    BACKEND_NAMES.index(static.attention_name), starts, seq,
                                    lengths)

    def _eager_model_and_pool(self, ids, pos, cu, max_seqlen, backend, pool_starts, seq_index,
                              lengths) -> torch.Tensor:
        """Model forward (attention backend number `backend`) then pooling (and a
        cross-encoder's head): float32 [number of slots, H] (or [number of slots, 1])."""
        hidden = self.model(ids, pos, cu, max_seqlen, routed(backend))
        pooled = pool(hidden, pool_starts, seq_index, lengths, self.pooling, self.max_tokens)
        return pooled if self.head is None else self.head(pooled)

    def _run_unpadded(self, feed: RaggedBatch) -> torch.Tensor:
        t, b = feed.num_tokens, feed.num_seqs
        host = pack_unpadded(feed)
        if b > 1 and feed.uniform_length():
            name = self.chooser.uniform_name_for(b, feed.max_seqlen)
        else:
            name = self.chooser.name_for(b, feed.max_seqlen)
        packed = host.to(self.device, non_blocking=True)
        ids, pos, seq = packed[:t], packed[t:2 * t], packed[2 * t:3 * t]
        cu, lens = packed[3 * t:3 * t + b + 1], packed[3 * t + b + 1:]
        # Uncompiled on purpose: past-grid shapes vary freely, and a recompile (tens of
        # seconds) on a live batch would stall every request behind it.
        return self._eager_model_and_pool(ids, pos, cu, feed.max_seqlen,
                                          BACKEND_NAMES.index(name), cu, seq, lens)


def stepper_for(loaded: Any, settings: GpuSettings = GpuSettings(),
                table: AttentionTable | None = None, float8: bool = False) -> CudaStepper:
    """A CudaStepper for a `loader.LoadedModel` on CUDA (BERT family or Qwen3); `table`
    replaces the packaged attention table (tests, sweeps); `float8`: the layers' products run
    in FP8 from FP8_MIN_TOKENS tokens a batch (fp8_linear.py)."""
    if settings.gelu_epilogue:
        swapped = use_gelu_epilogues(loaded.model, settings.quack_mlp)
        log.info("%s", fields(event="engine.gelu_epilogue", layers=swapped,
                              quack=settings.quack_mlp))
    if resident.RESIDENT_LAYERS:  # takes only layers the GELU epilogue rewrote
        given = resident.use_resident_layers(loaded.model)
        log.info("%s", fields(event="engine.resident_layers", encoders=given,
                              max_tokens=resident.MAX_TOKENS))
    swapped = use_swiglu_products(loaded.model, settings.quack_mlp)
    if swapped:
        log.info("%s", fields(event="engine.swiglu_product", layers=swapped,
                              quack=settings.quack_mlp))
    if float8:
        swapped = use_fp8_products(loaded.model)
        log.info("%s", fields(event="engine.fp8_products", products=swapped,
                              from_tokens=FP8_MIN_TOKENS))
    config = loaded.config
    kv_heads = getattr(config, "num_kv_heads", config.num_heads)
    causal = bool(getattr(config, "causal", False))
    stepper = CudaStepper(loaded.model, pooling=loaded.pooling, max_tokens=loaded.max_tokens,
                          q_heads=config.num_heads, kv_heads=kv_heads, head_dim=config.head_dim,
                          causal=causal, device=loaded.device, vocab_size=config.vocab_size,
                          settings=settings, table=table, head=loaded.head)
    if float8 and settings.graphs:
        # The compiled forward branches on the row count (Dynamo guards on it), so the first
        # wide batch compiles again: in the warmup, before SERVING, not on a live request.
        wide = stepper.cache.grid.config_for(1, FP8_MIN_TOKENS)
        if wide is not None and wide not in stepper.cache.hot_set:
            stepper.cache.hot_set.append(wide)
    return stepper

