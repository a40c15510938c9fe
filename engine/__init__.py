"""The engine: model math on ragged batches, weight loading, attention, pooling, LazyTensor.

The engine knows nothing about tokenization, gRPC, HTTP or scheduling: it takes token ids in
the ragged layout (`input_ids [T]`, `cu_seqlens [B+1]`, `max_seqlen`) and returns pooled
embeddings through a LazyTensor.
"""
