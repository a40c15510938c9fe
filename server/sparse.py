"""The EmbedSparse RPC's answer: BGE-M3's lexical weights or SPLADE's, as sparse vectors.

Lexical weights (pooling `tokens`): in, the engine's rows float32 [B, max_tokens] (row b holds
sequence b's token weights, `relu(sparse_linear(hidden))`, at positions 0..length-1) and the
request's token ids. Out: per sequence, the largest weight of each token id it holds, leaving
out the tokenizer's special tokens (BGE-M3's reference drops its CLS, EOS, PAD and UNK ids) and
zero weights, ids ascending: the sparse vector `{index: value}` that BGE-M3's
`_process_token_weights` computes. SPLADE (pooling `splade`): the rows are float32
[B, vocab_size] already, each token id's weight; out, the non-zero entries of each row, ids
ascending (every vocabulary entry counts, special tokens' too, as SpladePooling keeps them).
Either is encoded as a SparseEmbedResponse (counts, then packed indices and values). Plain
numpy on the host; knows nothing about scheduling or gRPC status codes.
"""

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from hedgerow.engine.pooling import SPLADE
from hedgerow.errors import ModelLoadError
from hedgerow.wire import embed_pb2


def special_ids(directory: Path) -> frozenset[int]:
    """The ids of the special tokens in `directory`'s tokenizer.json (`added_tokens` marked
    special), which carry no lexical weight; none without a tokenizer.json."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        return frozenset()
    try:
        added = json.loads(path.read_text(encoding="utf-8")).get("added_tokens") or []
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"cannot read {path}: {error}") from None
    return frozenset(int(token["id"]) for token in added
                     if isinstance(token, dict) and token.get("special"))


def lexical_weights(input_ids: np.ndarray, cu_seqlens: Sequence[int], rows: np.ndarray,
                    excluded: frozenset[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sequence (ids uint32 [k] ascending, weights float32 [k]): the largest weight of each
    id, for ids not in `excluded` and weights above 0. `input_ids` int32 [T], `cu_seqlens`
    [B+1], `rows` float32 [B, W] (W >= the longest sequence)."""
    out = []
    for b, (start, stop) in enumerate(zip(cu_seqlens[:-1], cu_seqlens[1:])):
        ids = input_ids[start:stop]
        weights = rows[b, :stop - start]
        keep = weights > 0
        if excluded:
            keep &= ~np.isin(ids, list(excluded))
        ids, weights = ids[keep], weights[keep]
        order = np.argsort(ids, kind="stable")
        ids, weights = ids[order], weights[order]
        unique, first = np.unique(ids, return_index=True)
        maxima = np.maximum.reduceat(weights, first) if unique.size else weights[:0]
        out.append((unique.astype(np.uint32), maxima.astype(np.float32)))
    return out


def vocabulary_weights(rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row of float32 [B, V] (ids uint32 [k] ascending, weights float32 [k]): its entries
    above 0."""
    out = []
    for row in rows:
        ids = np.flatnonzero(row > 0)
        out.append((ids.astype(np.uint32), row[ids].astype(np.float32)))
    return out


def sparse_vectors(pooling: str, input_ids: np.ndarray, cu_seqlens: Sequence[int],
                   rows: np.ndarray, excluded: frozenset[int]
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The engine's rows as sparse vectors, by the model's pooling: SPLADE's rows are already
    per vocabulary id (`vocabulary_weights`), lexical weights per token (`lexical_weights`,
    leaving out `excluded`)."""
    if pooling == SPLADE:
        return vocabulary_weights(rows)
    return lexical_weights(input_ids, cu_seqlens, rows, excluded)


def encode_sparse(vectors: list[tuple[np.ndarray, np.ndarray]], prompt_tokens: int,
                  space: str, queue_us: int = 0, inference_us: int = 0
                  ) -> embed_pb2.SparseEmbedResponse:
    """Per-sequence (ids, weights) -> SparseEmbedResponse: `counts` [B], then every sequence's
    indices (uint32 LE) and values (float32 LE) back to back, and where the time went."""
    return embed_pb2.SparseEmbedResponse(
        counts=[ids.size for ids, _ in vectors],
        indices=b"".join(ids.astype("<u4").tobytes() for ids, _ in vectors),
        values=b"".join(values.astype("<f4").tobytes() for _, values in vectors),
        prompt_tokens=prompt_tokens, space=space,
        timing=embed_pb2.Timing(queue_us=queue_us, inference_us=inference_us))
