"""Whether the engine can still be trusted: which step errors poison it, and the probe batch.

A step error is one of two things. The request's own (bad input that got past validation):
it fails that request only, and the engine serves on. Or the device's: a CUDA error of the
sticky kind (an illegal memory access, an ECC error, a device-side assert, a lost device)
leaves every later call on that context failing, so the engine is failed at once. An error
this module cannot place is tried against the probe: a tiny known batch (`Probe`), stepped
right away; if the probe fails too, the error is the device's.

The probe also catches a failure that raises nothing: its rows are taken once before serving
(`Probe.take_reference`) and each later run (`Probe.check`, every --probe-interval while idle)
must stay within --probe-min-cosine of them, or the engine is failed.

Everything here that steps the engine runs on the engine thread. Knows nothing about
requests, scheduling, gRPC or HTTP.
"""

from typing import Any

import numpy as np
import torch

from hedgerow.engine.batch import RaggedBatch

# Lower-case fragments of the messages of CUDA errors after which the context is unusable
# (cudaErrorIllegalAddress, ...LaunchFailure, ...ECCUncorrectable, ...Assert, ...NoDevice,
# Xid 79 "fallen off the bus"): every later call on it fails, so no probe is needed.
STICKY_DEVICE_ERRORS = (
    "illegal memory access", "illegal address", "illegal instruction", "misaligned address",
    "unspecified launch failure", "launch timed out", "ecc error", "device-side assert",
    "hardware stack error", "invalid program counter", "fallen off the bus", "device lost",
    "gpu is lost", "no cuda-capable device",
)
PROBE_LENGTHS = (8, 3)  # tokens of the probe's two sequences: tiny, and ragged


def device_fault(error: BaseException) -> str | None:
    """Why `error` poisons the device context (a sticky CUDA error), or None when it may be
    the batch's own (then the probe decides). Out-of-memory is never sticky."""
    if isinstance(error, torch.OutOfMemoryError):
        return None
    text = str(error).lower()
    if any(fragment in text for fragment in STICKY_DEVICE_ERRORS):
        return f"sticky device error: {type(error).__name__}: {str(error)[:200]}"
    return None


def probe_batch(vocab_size: int) -> RaggedBatch:
    """The probe's fixed ragged batch: PROBE_LENGTHS sequences of ordinary token ids."""
    low, high = min(1000, vocab_size // 2), min(vocab_size, 30000)
    return RaggedBatch.from_sequences(
        [[low + (7919 * (n * 131 + i)) % (high - low) for i in range(length)]
         for n, length in enumerate(PROBE_LENGTHS)])


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Smallest cosine between rows of float32 [B, D] `a` and `b`; NaN when any row is NaN
    or zero (so no tolerance admits it)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cosines = np.einsum("ij,ij->i", a64, b64) / norms
    return float(np.nan if not np.all(np.isfinite(cosines)) else cosines.min())


class Probe:
    """The known batch, its rows as first measured, and the check of a later run."""

    def __init__(self, vocab_size: int, min_cosine: float) -> None:
        self.batch = probe_batch(vocab_size)
        self.min_cosine = min_cosine
        self.reference: np.ndarray | None = None  # float32 [B, D], set before serving

    def run(self, engine: Any) -> np.ndarray:
        """Step the probe batch and wait for its rows (engine thread only)."""
        return engine.step(self.batch).synchronize().numpy().copy()

    def take_reference(self, engine: Any) -> None:
        self.reference = self.run(engine)

    def check(self, engine: Any) -> str | None:
        """Run the probe: None when it answers as it did before serving, else what is wrong."""
        try:
            rows = self.run(engine)
        except Exception as error:  # whatever the step raised is the answer
            return f"the probe batch failed: {type(error).__name__}: {str(error)[:200]}"
        if self.reference is None:
            return None
        if rows.shape != self.reference.shape:
            return f"the probe batch answered shape {list(rows.shape)}, not " \
                   f"{list(self.reference.shape)}"
        cosine = min_cosine(rows, self.reference)
        if not cosine >= self.min_cosine:
            return (f"the probe batch's embedding drifted from the one taken before serving: "
                    f"cosine {cosine:.6f}, below --probe-min-cosine {self.min_cosine}")
        return None
