"""The engine: model math on ragged batches, weight loading, attention, pooling, LazyTensor.

The engine knows nothing about tokenization, gRPC, HTTP or scheduling: it takes token ids in
the ragged layout (`input_ids [T]`, `cu_seqlens [B+1]`, `max_seqlen`) and returns pooled
embeddings through a LazyTensor.
"""

import importlib

_EXPORTS = {
    "Engine": "hedgerow.engine.engine",
    "ModelInfo": "hedgerow.engine.engine",
    "RaggedBatch": "hedgerow.engine.batch",
    "LazyTensor": "hedgerow.engine.lazy",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> object:
    # Imported on first use, so `import hedgerow.engine.batch` does not load the models.
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'hedgerow.engine' has no attribute {name!r}")
