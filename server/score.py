"""The Score RPC's request and response: a query and its documents in, the best documents out.

In: `ScoreRequest.input_ids` int32 little-endian [T] and `cu_seqlens` int32 little-endian [N+2]
(sequence 0 the query, sequences 1..N the documents) become a `ScoreQuery`: a WireBatch checked
as Embed's is (layout, per-request token limit), `top_n` and `dimensions`. Out: the engine's
pooled rows float32 [N+1, D] are cut to `dimensions` (Matryoshka, before the cosine, which
normalises by itself) and ranked by `engine.scoring.cosine_topk` (query row 0 against rows
1..N, score descending, ties to the lower document index; top-k through kernels.topk: the Triton
kernel on CUDA, the reference on CPU), then encoded as a ScoreResponse.

Knows nothing about scheduling, threads or gRPC status codes: problems are raised as
InvalidInputError with a message for the caller.
"""

from dataclasses import dataclass

import numpy as np
import torch

from hedgerow.engine.pooling import postprocess
from hedgerow.engine.scoring import cosine_topk
from hedgerow.errors import InvalidInputError
from hedgerow.server.convert import WireBatch, check_dimensions, decode_batch
from hedgerow.wire import embed_pb2


@dataclass(frozen=True)
class ScoreQuery:
    batch: WireBatch         # sequence 0 the query, 1..N the documents
    top_n: int               # >= 1; above N means all N
    dimensions: int | None   # None: the model's full width

    @property
    def documents(self) -> int:
        return self.batch.num_seqs - 1


def decode_score(request: embed_pb2.ScoreRequest, max_request_tokens: int, width: int
                 ) -> ScoreQuery:
    """The request as a ScoreQuery; InvalidInputError for anything Embed rejects, no documents,
    top_n 0, or dimensions past the model's `width`. The engine's `validate` comes after."""
    if not request.input_ids and len(request.cu_seqlens) <= 4:
        raise InvalidInputError("empty request: no query and no documents to score")
    batch = decode_batch(request, max_request_tokens)
    if batch.num_seqs < 2:
        raise InvalidInputError(
            "no documents: the request holds only the query (sequence 0); send the documents "
            "as sequences 1..N")
    if request.top_n < 1:
        raise InvalidInputError("top_n must be at least 1, got 0")
    check_dimensions(request.dimensions, width)
    return ScoreQuery(batch=batch, top_n=request.top_n, dimensions=request.dimensions or None)


def rank(rows: np.ndarray, query: ScoreQuery, device: str | torch.device
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank the documents of pooled `rows` float32 [N+1, D] (host) on `device`.

    Returns (indices int64 [min(top_n, N)], scores float32 [min(top_n, N)]) on the host: document
    indices 0..N-1 best first and their cosine with the query. Runs on the engine thread, where
    the device may be used. A document's score depends only on its row and the query's, never
    on the other documents (see engine/scoring.py).
    """
    cut = torch.from_numpy(postprocess(rows, False, query.dimensions)).to(device)
    indices, scores = cosine_topk(cut[0], cut[1:], query.top_n)
    return indices.cpu(), scores.cpu()


def encode_scores(indices: torch.Tensor, scores: torch.Tensor, prompt_tokens: int,
                  space: str = "", queue_us: int = 0, inference_us: int = 0
                  ) -> embed_pb2.ScoreResponse:
    """(indices int64 [k], scores float32 [k]) -> ScoreResponse, order kept, with the
    fingerprint of the space the scores were computed in and where the request's time went."""
    return embed_pb2.ScoreResponse(
        indices=indices.tolist(), scores=scores.tolist(), prompt_tokens=prompt_tokens,
        space=space, timing=embed_pb2.Timing(queue_us=queue_us, inference_us=inference_us))
