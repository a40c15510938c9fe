"""Pooling of ragged hidden states into one vector per sequence, and the postprocessing
(Matryoshka truncation, L2 normalisation) applied to pooled vectors.

`pool` runs on the device without reading anything back to the host: gathers at
`cu_seqlens` for CLS and last-token, a segment sum by the per-token sequence index for mean.
`postprocess` runs on the host in numpy, where the rows already are when a caller wants them
(a torch call on a few rows costs more than the arithmetic). It knows nothing about models or
tokenizers.
"""

import math

import numpy as np
import torch

from hedgerow.errors import InvalidInputError

POOLING_MODES = ("cls", "mean", "last")
TOKENS = "tokens"  # not a pooling: each token's one value, laid out per sequence (sparse)
SPLADE = "splade"  # SPLADE over masked-LM logits: max over tokens of log(1 + relu(logit))


def pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor,
         lengths: torch.Tensor, mode: str, width: int = 0) -> torch.Tensor:
    """Pool hidden [T, H] (any float dtype) into float32 [B, H].

    cu_seqlens: int32 [B+1]; seq_index: int64 [T] (sequence of each token); lengths: int64 [B];
    all on hidden's device. mode: "cls" (first token), "mean" (average of the tokens),
    "last" (last token), or TOKENS: hidden [T, 1] laid out as float32 [B, width], row b
    holding sequence b's values at its positions 0..length-1 and zeros after (positions past
    `width`, which only a padding sequence has, land on its last column); or SPLADE: logits
    hidden [T, V] to float32 [B, V], each sequence's max over its tokens of log(1 + relu(x))
    (an empty sequence's row is zeros).
    """
    if mode == SPLADE:
        # log(1 + relu(x)) never decreases, so its max over a sequence is its value at the max
        # logit: one max over [T, V] (by sequence index, a stride-0 view of it), then the
        # function on [B, V] only. An empty sequence keeps -inf, which relu makes 0.
        top = torch.full((lengths.shape[0], hidden.shape[1]), float("-inf"),
                         dtype=hidden.dtype, device=hidden.device)
        top.scatter_reduce_(0, seq_index.long()[:, None].expand_as(hidden), hidden, "amax")
        return torch.log1p(torch.relu(top.float()))
    if mode == TOKENS:
        tokens = hidden.shape[0]
        index = seq_index.long()
        positions = torch.arange(tokens, device=hidden.device) - cu_seqlens.long()[index]
        out = torch.zeros((lengths.shape[0], width), dtype=torch.float32, device=hidden.device)
        out[index, positions.clamp(0, width - 1)] = hidden[:, 0].float()
        return out
    if mode == "cls":
        return hidden.index_select(0, cu_seqlens[:-1].long()).float()
    if mode == "last":
        return hidden.index_select(0, cu_seqlens[1:].long() - 1).float()
    if mode == "mean":
        sums = torch.zeros((lengths.shape[0], hidden.shape[1]), dtype=torch.float32,
                           device=hidden.device)
        sums.index_add_(0, seq_index, hidden.float())
        return sums / lengths.to(torch.float32)[:, None]
    raise ValueError(f"unknown pooling mode {mode!r} (known: {', '.join(POOLING_MODES)})")


def postprocess(embeddings: np.ndarray, normalize: bool, dimensions: int | None) -> np.ndarray:
    """Truncate float32 [B, D] to its first `dimensions` columns (Matryoshka), then
    L2-normalise each row when `normalize` (a zero row stays zero). Returns float32
    [B, dimensions or D]; `embeddings` itself when there is nothing to do.

    Raises InvalidInputError when `dimensions` is not in 1..D.
    """
    width = embeddings.shape[1]
    if dimensions is not None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int):
            raise InvalidInputError(f"dimensions must be an integer, got {dimensions!r}")
        if not 1 <= dimensions <= width:
            raise InvalidInputError(
                f"dimensions must be between 1 and the model's width {width}, got {dimensions}")
        embeddings = embeddings[:, :dimensions]
    if normalize and len(embeddings) == 1:
        # One row, the common request: one dot product and one multiply. A server runs this
        # cold between requests, where each numpy call costs tens of µs, not its arithmetic.
        row = embeddings[0]
        norm = math.sqrt(float(np.dot(row, row)))
        return np.multiply(embeddings, np.float32(1.0 / max(norm, 1e-12)), dtype=np.float32)
    if normalize:
        norms = np.sqrt(np.einsum("ij,ij->i", embeddings, embeddings))[:, None]
        embeddings = embeddings / np.maximum(norms, np.float32(1e-12))
    return embeddings
