"""The Rerank RPC's request: query-document pairs in, for a cross-encoder (task `rerank`).

In: `RerankRequest.input_ids` int32 little-endian [T], `cu_seqlens` [N+1] (one pair per
sequence, as the tokenizer's pair encoding wrote it) and `token_type_ids` int32 [T] (empty: all
segment 0) become a `RerankQuery`: a WireBatch checked as Embed's is (layout, per-request
token limit), each token's segment checked against the model's `token_types`, and `top_n`.
`folded` is what the engine reads: the ids with the segments folded in
(`engine.fold_segments`). Out: the engine's rows float32 [N, 1], one score per pair (a logit),
ranked by `engine.scoring.scores_topk` (score descending, ties to the lower pair index, through
kernels.topk) and encoded as a ScoreResponse by server/score.py's `encode_scores`.

Knows nothing about scheduling, threads or gRPC status codes: problems are raised as
InvalidInputError with a message for the caller.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from hedgerow.engine.engine import fold_segments
from hedgerow.engine.scoring import scores_topk
from hedgerow.errors import InvalidInputError
from hedgerow.server.convert import WireBatch, decode_batch, decode_int32
from hedgerow.wire import embed_pb2


@dataclass(frozen=True)
class RerankQuery:
    batch: WireBatch               # one pair per sequence, the ids as the tokenizer wrote them
    token_type_ids: np.ndarray     # int32 [T]: each token's segment
    top_n: int                     # >= 1; above N means all N

    def folded(self, vocab_size: int, token_types: int) -> WireBatch:
        """The batch as the engine reads it: segments folded into the ids when the model
        reads more than one (call after the vocabulary check)."""
        if token_types <= 1:
            return self.batch
        return dataclasses.replace(
            self.batch, input_ids=fold_segments(self.batch.input_ids, self.token_type_ids,
                                                vocab_size))


def decode_rerank(request: embed_pb2.RerankRequest, max_request_tokens: int,
                  token_types: int) -> RerankQuery:
    """The request as a RerankQuery; InvalidInputError for anything Embed rejects, top_n 0,
    token_type_ids of another length than input_ids, or a segment the model does not read
    (at or past `token_types`). The engine's vocabulary and length checks come after."""
    if not request.input_ids and len(request.cu_seqlens) <= 4:
        raise InvalidInputError("empty request: no query-document pairs to score")
    batch = decode_batch(request, max_request_tokens)
    if request.top_n < 1:
        raise InvalidInputError("top_n must be at least 1, got 0")
    if request.token_type_ids:
        types = decode_int32(request.token_type_ids, "token_type_ids")
        if types.size != batch.num_tokens:
            raise InvalidInputError(f"token_type_ids holds {types.size} entries for "
                                    f"{batch.num_tokens} tokens; send one per token")
        bad = np.flatnonzero((types < 0) | (types >= token_types))
        if bad.size:
            raise InvalidInputError(
                f"token_type_ids[{int(bad[0])}] is {int(types[bad[0]])}; this model reads "
                f"token types 0..{token_types - 1}")
    else:
        types = np.zeros(batch.num_tokens, dtype=np.int32)
    return RerankQuery(batch=batch, token_type_ids=types, top_n=request.top_n)


def rank_pairs(rows: np.ndarray, top_n: int, device: str | torch.device
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank the pairs by their scores, `rows` float32 [N, 1] (host), on `device`.

    Returns (indices int64 [min(top_n, N)], scores float32 [min(top_n, N)]) on the host, best
    first. Runs on the engine thread, where the device may be used. A pair's score depends on
    that pair only, so per-chunk lists merge exactly (the gateway's merge_ranked)."""
    indices, scores = scores_topk(torch.from_numpy(rows[:, 0].copy()).to(device), top_n)
    return indices.cpu(), scores.cpu()
