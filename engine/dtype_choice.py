"""What `--dtype auto` resolves to, decided when the model loads.

On CUDA: bfloat16 (the GPU gate in the docs is a divergence under 0.1%; every supported GPU
computes bfloat16 natively). On the CPU: bfloat16 only where the CPU computes it natively
(AVX512_BF16 or AMX), a probe shows it faster than float32 on this machine, and its vectors
stay in the space of float32's (the smallest cosine over the probe set at least MIN_COSINE);
float32 everywhere else. The probe embeds a fixed set of sequences with both loaded engines,
interleaving timed runs. It knows nothing about servers; `Engine.load` calls `choose`. It
also says where `--dtype float8` (never chosen by auto) can run: `check_float8_device`.
"""

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from hedgerow.engine.batch import RaggedBatch
from hedgerow.errors import ConfigError
from hedgerow.logs import fields

log = logging.getLogger("hedgerow.engine")

# float32 against itself is 1.0; measured bfloat16 on all-MiniLM-L6-v2: 0.99993 on real text.
# 0.9999 keeps a nearest-neighbour ranking intact where float32's neighbours differ by more
# than 1e-4 in cosine, and rejects a model whose activations overflow or lose their scale.
MIN_COSINE = 0.9999
# bfloat16 must beat float32 by this factor to be worth its rounding.
MIN_SPEEDUP = 1.1
PROBE_LENGTHS = (9, 32, 128, 61)
PROBE_ROUNDS = 7
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


FLOAT8 = "float8"
FP8_CAPABILITY = (8, 9)  # FP8 tensor cores: Ada and Hopper onwards
# The row count a batch needs for float8's products to run in FP8 (engine/fp8_linear.py): FP8
# measured faster from 2,048 rows and slower at 512 and below on an H200 (docs/benchmarks.md).
FP8_MIN_TOKENS = 2048


def check_float8_device(device: str, attention: object = None) -> None:
    """ConfigError unless `--dtype float8` can run here: a CUDA GPU with FP8 tensor cores,
    through the CUDA step path (no `attention` backend given instead)."""
    import torch

    from hedgerow.engine.loader import checked_device

    if not str(device).startswith("cuda") or attention is not None:
        raise ConfigError(f"dtype float8 runs on a CUDA GPU's FP8 tensor cores through the "
                          f"CUDA step path, not on {device}")
    capability = torch.cuda.get_device_capability(checked_device(device))  # ModelLoadError
    if capability < FP8_CAPABILITY:
        raise ConfigError(f"dtype float8 needs a GPU of compute capability 8.9 or newer (FP8 "
                          f"tensor cores); {device} is {capability[0]}.{capability[1]}")


@dataclass(frozen=True)
class Choice:
    dtype: str
    reason: str


def cpu_has_native_bfloat16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """True when the CPU's flags list native bfloat16 arithmetic (Linux; False elsewhere)."""
    try:
        flags = cpuinfo.read_text().split()
    except OSError:
        return False
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def probe_batch(vocab_size: int, max_tokens: int) -> RaggedBatch:
    """A fixed ragged batch of PROBE_LENGTHS sequences of ordinary (not special) token ids."""
    low, high = min(1000, vocab_size // 2), min(vocab_size, 30000)
    sequences = []
    for number, length in enumerate(PROBE_LENGTHS):
        length = min(length, max_tokens)
        sequences.append([low + (7919 * (number * 131 + i)) % (high - low) for i in range(length)])
    return RaggedBatch.from_sequences(sequences)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Smallest cosine similarity between rows of float32 [B, D] `a` and `b`."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    dots = np.einsum("ij,ij->i", a64, b64)
    norms = np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    return float(np.min(np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)))


def compare(run32: Callable[[RaggedBatch], np.ndarray],
            run16: Callable[[RaggedBatch], np.ndarray], batch: RaggedBatch) -> Choice:
    """Time both (interleaved, after two warm-up runs each; the fastest run of each counts,
    as a busy machine only ever adds time) and hold bfloat16's rows against float32's; the
    Choice says which to keep and why, with the numbers."""
    reference, candidate = run32(batch), run16(batch)
    run32(batch), run16(batch)
    cosine = min_cosine(reference, candidate)
    if not np.isfinite(candidate).all() or not cosine >= MIN_COSINE:
        return Choice("float32", f"bfloat16's smallest cosine to float32 on the probe set is "
                                 f"{cosine:.6f}, below {MIN_COSINE}")
    times32, times16 = [], []
    for _ in range(PROBE_ROUNDS):
        for run, times in ((run32, times32), (run16, times16)):
            began = time.perf_counter()
            run(batch)
            times.append(time.perf_counter() - began)
    speedup = min(times32) / min(times16)
    numbers = f"probe {speedup:.2f}x float32's speed, smallest cosine {cosine:.6f}"
    if speedup < MIN_SPEEDUP:
        return Choice("float32", f"bfloat16 is not faster here ({numbers})")
    return Choice("bfloat16", numbers)


def log_choice(choice: Choice) -> None:
    log.info("%s", fields(event="engine.dtype_auto", dtype=choice.dtype, reason=choice.reason))
