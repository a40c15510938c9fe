"""Cosine scoring for the Score path: a query embedding against candidate embeddings, then top-k
(and the same top-k for a cross-encoder's scores, `scores_topk`).

Owns the score (cosine similarity, i.e. the dot product of L2-normalised vectors) and the call
into kernels.topk, which ranks in Hedgerow's one total order (score descending, ties to the lower
index). It knows nothing about tokens, requests or how candidates were chunked.

A candidate's score must not depend on which other candidates share its call: the gateway splits
large lists across replicas and merges their top-k lists, which equals the unchunked answer only
if every candidate scores the same bits either way. So the three sums (q.q, d.d, q.d) are taken
in float64, where each product of two float32 values is exact, in a fixed pairwise order
(elementwise adds only, no library reduction whose order varies with the shape or device), and
rounded once to float32. The result is the same on CPU and CUDA, for any number of candidates,
and identical documents score identically.
"""

from __future__ import annotations

import torch

from hedgerow.errors import InvalidInputError
from hedgerow.kernels.topk import topk


def _fixed_order_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum float64 [..., D] over the last axis in a fixed pairwise order -> float64 [...]."""
    width = x.shape[-1]
    padded = 1 << max(0, width - 1).bit_length()
    if padded != width:
        x = torch.nn.functional.pad(x, (0, padded - width))
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def cosine_scores(query: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of one query with each candidate.

    query: [D] float (any float dtype); docs: [N, D] float on the same device.
    Returns float32 [N]. A zero vector (query or candidate) scores 0; a non-finite embedding
    gives NaN, which the top-k ranks last (as -inf).
    """
    if query.dim() != 1 or docs.dim() != 2 or docs.shape[1] != query.shape[0]:
        raise InvalidInputError(
            f"query must be [D] and documents [N, D] with the same D; got query "
            f"{tuple(query.shape)} and documents {tuple(docs.shape)}"
        )
    if query.shape[0] == 0:
        raise InvalidInputError("embeddings must have at least one dimension")
    q = query.to(torch.float64)
    d = docs.to(device=query.device, dtype=torch.float64)
    dot = _fixed_order_sum(d * q)
    norms = torch.sqrt(_fixed_order_sum(d * d)) * torch.sqrt(_fixed_order_sum(q * q))
    cosine = torch.where(norms > 0, dot / torch.where(norms > 0, norms, 1.0), 0.0)
    return cosine.to(torch.float32)


def cosine_topk(query: torch.Tensor, docs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k candidates most similar to the query, best first.

    query: [D] float; docs: [N, D] float on the same device; k >= 1 (a k above N returns all N).
    Returns (indices int64 [min(k, N)], scores float32 [min(k, N)]) on the query's device:
    indices into docs, ranked by cosine descending with ties to the lower index (NaN last).
    Raises InvalidInputError for an empty candidate list, k < 1 or mismatched shapes.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInputError(f"top_n must be a positive integer, got {k!r}")
    if docs.dim() == 2 and docs.shape[0] == 0:
        raise InvalidInputError("the document list is empty")
    return scores_topk(cosine_scores(query, docs), k)


def scores_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best of float32 `scores` [N] (N >= 1, k >= 1; a k above N returns all N), in
    Hedgerow's one order: (indices int64 [min(k, N)], scores float32 [min(k, N)]) on the
    scores' device. A cross-encoder's pair scores rank through here as cosines do."""
    indices, values = topk(scores[None, :], min(k, scores.shape[0]))
    return indices[0], values[0]
