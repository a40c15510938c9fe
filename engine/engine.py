"""The engine: a loaded model, its attention backend and pooling, behind `step(batch)`.

`Engine.step(batch) -> LazyTensor` launches the forward pass on a ragged batch and returns a
handle to float32 [B, D] pooled (not normalised) embeddings, or, for a cross-encoder (task
`rerank`), float32 [B, 1]: each query-document pair's relevance score (a logit, before any
sigmoid), its document tokens' ids folded as `id + vocab_size` (see `fold_segments`); or, for
lexical weights (task `sparse`), float32 [B, max_tokens]: each token's weight at its position;
or, for SPLADE (task `sparse`, pooling `splade`), float32 [B, vocab_size]: each token id's
weight, zero for most. Everything that depends on the values of `cu_seqlens` (positions,
per-token sequence index) is computed on the host first, so the forward pass itself never syncs.
The engine knows nothing about tokenization, templates, requests or scheduling; `validate`
checks what only it can know (vocabulary, positions).
"""

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from hedgerow.engine import dtype_choice
from hedgerow.engine.attention import Attention, CpuRaggedAttention
from hedgerow.engine.batch import RaggedBatch, check_tokens
from hedgerow.engine.cpu_linear import onednn_available, use_onednn_linears
from hedgerow.engine.lazy import LazyTensor
from hedgerow.engine.loader import LoadedModel, load_model
from hedgerow.engine.pooling import SPLADE, pool
from hedgerow.engine.positions import token_layout
from hedgerow.logs import fields, step

if TYPE_CHECKING:
    from hedgerow.engine.gpu import CudaStepper
    from hedgerow.gpu_settings import GpuSettings

log = logging.getLogger("hedgerow.engine")


@dataclass(frozen=True)
class ModelInfo:
    name: str
    architecture: str  # bert | roberta | xlm-roberta | distilbert | qwen3
    dimensions: int  # width of a step's rows: the embedding width, 1 for a reranker's score,
    # max_tokens for lexical weights (task sparse: row b holds sequence b's token weights),
    # vocab_size for SPLADE (row b is sequence b's weight of every token id)
    max_tokens: int  # per sequence
    vocab_size: int
    pooling: str  # cls | mean | last | tokens (lexical weights) | splade
    normalize: bool  # the model's default
    templates: dict[str, str] = field(default_factory=dict)  # input_type -> prefix
    dtype: str = "float32"
    device: str = "cpu"
    dtype_reason: str = ""  # why `--dtype auto` chose `dtype`; empty when it was asked for
    task: str = "embed"  # embed | rerank (a cross-encoder) | sparse (lexical weights, SPLADE)
    token_types: int = 1  # token types (segments) the model reads; 1: segment 0 only


def fold_segments(input_ids: np.ndarray, token_type_ids: np.ndarray, vocab_size: int
                  ) -> np.ndarray:
    """The ids a cross-encoder reads: int32 [T] `input_ids + token_type_ids * vocab_size`
    (both int32 [T], checked: ids in the vocabulary, types below `info.token_types`)."""
    return input_ids + token_type_ids * np.int32(vocab_size)


class Engine:
    """A model ready to embed ragged batches on one device."""

    def __init__(self, loaded: LoadedModel, attention: Attention,
                 gpu: "CudaStepper | None" = None, dtype: str | None = None) -> None:
        """`dtype`: the name Info reports when it is not the weights' (float8 keeps bf16 ones)."""
        self._model = loaded.model
        self._head = loaded.head
        self._attention = attention
        self._gpu = gpu  # the CUDA step path (graphs, bucketing, overlap); None on CPU
        self.device = loaded.device
        self.config = loaded.config  # the model's math (BertConfig or Qwen3Config)
        self.info = ModelInfo(
            name=loaded.name,
            architecture=loaded.architecture,
            dimensions=(1 if loaded.head is not None else loaded.config.vocab_size
                        if loaded.pooling == SPLADE else loaded.max_tokens
                        if loaded.task == "sparse" else loaded.config.hidden_size),
            max_tokens=loaded.max_tokens,
            vocab_size=loaded.config.vocab_size,
            pooling=loaded.pooling,
            normalize=loaded.normalize,
            templates=dict(loaded.templates),
            dtype=dtype or str(loaded.dtype).removeprefix("torch."),
            device=str(loaded.device),
            task=loaded.task,
            token_types=getattr(loaded.config, "segments", 1),
        )

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", dtype: str = "float32",
             causal: bool | None = None, attention: Attention | None = None,
             gpu_settings: "GpuSettings | None" = None, cpu_linear: str = "onednn",
             task: str | None = None) -> "Engine":
        """Load a model directory (raises ModelLoadError). `attention` defaults to the CPU
        ragged backend; on a CUDA device (and no `attention` given) steps go through the
        CUDA step path of gpu.py, configured by `gpu_settings`. On the CPU, `cpu_linear`
        "onednn" runs dense layers through oneDNN where it works (cpu_linear.py), "torch"
        keeps torch's default kernels. `dtype` "auto" decides by measuring (dtype_choice.py);
        "float8" loads bfloat16 and runs the layers' products of wide batches in FP8 on a GPU
        that has FP8 tensor cores (fp8_linear.py), and is refused elsewhere (ConfigError).
        `task` (embed, rerank, sparse; None: the checkpoint's) must match the checkpoint's."""
        if dtype == "auto":
            return cls._load_auto(path, device, causal=causal, attention=attention,
                                  gpu_settings=gpu_settings, cpu_linear=cpu_linear, task=task)
        float8 = dtype == dtype_choice.FLOAT8
        if float8:
            dtype_choice.check_float8_device(device, attention)
        with step(log, "engine.load", path=str(path), device=device, dtype=dtype):
            loaded = load_model(path, device=device, dtype="bfloat16" if float8 else dtype,
                                causal=causal, task=task)
            if (loaded.device.type == "cpu" and cpu_linear == "onednn"
                    and onednn_available(loaded.dtype)):
                swapped = use_onednn_linears(loaded.model)
                log.info("%s", fields(event="engine.cpu_linear", kernel="onednn",
                                      layers=swapped))
        gpu = None
        if loaded.device.type == "cuda" and attention is None:
            from hedgerow.engine.gpu import stepper_for
            from hedgerow.gpu_settings import GpuSettings
            gpu = stepper_for(loaded, gpu_settings or GpuSettings(), float8=float8)
        engine = cls(loaded, attention or CpuRaggedAttention(), gpu,
                     dtype=dtype if float8 else None)
        log.info("%s", fields(event="engine.ready", model=engine.info.name,
                              architecture=engine.info.architecture,
                              task=engine.info.task, dimensions=engine.info.dimensions,
                              max_tokens=engine.info.max_tokens, pooling=engine.info.pooling))
        return engine

    @classmethod
    def _load_auto(cls, path: str | Path, device: str, **options) -> "Engine":
        """Load in the dtype `auto` resolves to here (see dtype_choice.py)."""
        if str(device).startswith("cuda"):
            choice = dtype_choice.Choice("bfloat16", "a GPU computes bfloat16 natively")
            engine = cls.load(path, device, choice.dtype, **options)
        elif not dtype_choice.cpu_has_native_bfloat16():
            choice = dtype_choice.Choice("float32", "this CPU has no native bfloat16 "
                                                    "(AVX512_BF16 or AMX)")
            engine = cls.load(path, device, choice.dtype, **options)
        else:
            full = cls.load(path, device, "float32", **options)
            if full.info.task == "rerank":
                # The probe compares vectors by cosine, which says nothing of one score.
                choice = dtype_choice.Choice("float32", "a reranker's scores keep float32 on "
                                                        "a CPU (the probe compares vectors)")
                full.info = replace(full.info, dtype_reason=choice.reason)
                dtype_choice.log_choice(choice)
                return full
            half = cls.load(path, device, "bfloat16", **options)
            choice = dtype_choice.compare(
                lambda batch: full.step(batch).synchronize().numpy(),
                lambda batch: half.step(batch).synchronize().numpy(),
                dtype_choice.probe_batch(full.info.vocab_size, full.info.max_tokens))
            engine = half if choice.dtype == "bfloat16" else full
        engine.info = replace(engine.info, dtype_reason=choice.reason)
        dtype_choice.log_choice(choice)
        return engine

    def validate(self, batch: RaggedBatch) -> None:
        """Raise InvalidInputError for a token id outside [0, vocab_size) or a sequence
        longer than `info.max_tokens` (see `batch.check_tokens`). Reads host tensors only."""
        check_tokens(batch.input_ids.numpy(), batch.cu_seqlens.tolist(), batch.max_seqlen,
                     self.info.vocab_size, self.info.max_tokens)

    def step(self, batch: RaggedBatch) -> LazyTensor:
        """Run the forward pass and pooling for `batch` (call `validate` first).

        Returns a LazyTensor of float32 [B, dimensions], pooled, not normalised (a
        reranker's: [B, 1] scores).
        """
        if self._gpu is not None:
            return self._gpu.step(batch)
        rows = batch.num_seqs
        if batch.num_tokens == 1:
            # A one-row matrix product runs as BLAS's matrix-vector kernel, whose summation
            # order differs: the row would not be bit-identical to the same sequence in any
            # other batch. Run it beside a copy of itself and keep the first row.
            batch = RaggedBatch.from_sequences([batch.input_ids.tolist()] * 2)
        layout = token_layout(batch.cu_seqlens)
        device = self.device
        input_ids = batch.input_ids.to(device, non_blocking=True)
        cu_seqlens = batch.cu_seqlens.to(device, non_blocking=True)
        position_ids = layout.position_ids.to(device, non_blocking=True)
        seq_index = layout.seq_index.to(device, non_blocking=True)
        lengths = layout.lengths.to(device, non_blocking=True)
        with torch.inference_mode():
            hidden = self._model(input_ids, position_ids, cu_seqlens, batch.max_seqlen,
                                 self._attention)
            pooled = pool(hidden, cu_seqlens, seq_index, lengths, self.info.pooling,
                          self.info.max_tokens)[:rows]
            if self._head is not None:
                pooled = self._head(pooled)
        if device.type == "cpu":
            return LazyTensor.completed(pooled)
        return LazyTensor.copy_from_device(pooled, torch.cuda.current_stream(device))

    def warmup(self) -> None:
        """Capture the CUDA graphs of the hot set (blocks); nothing to do on CPU."""
        if self._gpu is not None:
            with step(log, "engine.warmup", hot_set=len(self._gpu.cache.hot_set)):
                self._gpu.warmup()

    def warmup_report(self) -> dict:
        """Graph-cache state for /warmup and metrics (see graphs.GraphCache.report); the
        server turns its hot-set counts into the /warmup contract (hedgerow.warmup_report)."""
        if self._gpu is not None:
            return self._gpu.report()
        return {"loaded": True, "configurations_seen": 0, "captured": 0, "hot_set": 0,
                "hot_set_captured": 0, "graph_memory_bytes": 0, "device": str(self.device)}
