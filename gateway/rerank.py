"""POST /v1/rerank (Cohere/Jina style): rank documents by similarity to a query, over Score.

Owns the rerank request's shape (`RerankRequest`: `query`, `documents` as strings or
`{"text": ...}`, `top_n`, `return_documents`) with a specific message for every malformed case;
the steps of one request (the query's and the documents' templates, tokenizing, the token
limits, cutting the documents into chunks that each travel WITH the query as one Score call);
the exact merge of the per-chunk top-k lists (`merge_ranked`); and the response body. When the
served model is a cross-encoder (task `rerank`), the query and each document are tokenized
as one pair instead (a Qwen3-Reranker's in its prompt) and scored by the server's Rerank, the
same merge ranking the logits and the answer carrying their sigmoid (or the logits themselves,
TEI's `raw_scores`). The routing of chunks is the router's; errors are translated in
http_errors.py. Knows nothing about HTTP or gRPC, and imports no torch: the merge is plain
Python.
"""

import dataclasses
import math
import uuid
from typing import Any, Iterable, Sequence

import numpy as np
import orjson
from hedgerow.gateway.chunking import plan_chunks
from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.schema import (
    check_text, json_object, kind, optional_bool, optional_int, optional_str, required,
)
from hedgerow.gateway.service import EmbeddingService
from hedgerow.gateway.tokenizer import Sequences
from hedgerow.reranker_prompt import PROMPTED_ARCHITECTURES

DOCUMENT_SHAPES = 'a list of strings or of objects {"text": string}'
# Tokenize without the tokenizer's own length check: rerank names the limit in its own words.
_UNLIMITED = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class RerankRequest:
    """POST /v1/rerank. Unknown fields (Cohere's rank_fields, Jina's extras) are ignored;
    `model` may be left out (the served model)."""

    model: str | None
    query: Any
    documents: Any
    top_n: int | None
    return_documents: bool
    truncate: bool | None = None  # TEI's per-request switch; None follows --truncate
    field: str = "documents"      # what the request calls its documents (TEI: texts)
    raw_scores: bool = False      # TEI's: a cross-encoder's logit instead of its sigmoid

    @classmethod
    def parse(cls, body: Any) -> "RerankRequest":
        body = json_object(body)
        return cls(model=optional_str(body, "model"), query=required(body, "query"),
                   documents=required(body, "documents"), top_n=optional_int(body, "top_n"),
                   return_documents=optional_bool(body, "return_documents", False))


@dataclasses.dataclass(frozen=True)
class Reranked:
    ranked: list[tuple[int, float]]  # (document index, relevance score float32), best first
    documents: list[str]             # the request's documents, in request order
    total_tokens: int                # the query's and the documents' tokens, templates included
    space: str                       # fingerprint of the embedding space the scores came from
    truncated: frozenset[int] = frozenset()  # documents cut to fit a cross-encoder's pair


def parse_query(value: Any) -> str:
    if not isinstance(value, str):
        raise RequestError(f"query must be a string; got {kind(value)}", param="query",
                           code="invalid_type")
    check_text(value, "query", "query")
    return value


def parse_documents(value: Any, max_inputs: int, name: str = "documents") -> list[str]:
    """The documents' texts in order, from strings or {"text": string} objects (mixable);
    `name` is the request's field (TEI calls it `texts`)."""
    if not isinstance(value, list):
        raise RequestError(f"{name} must be {DOCUMENT_SHAPES}; got {kind(value)}",
                           param=name, code="invalid_type")
    if not value:
        raise RequestError(f"{name} is an empty list; send at least one document",
                           param=name, code="empty_input")
    if len(value) > max_inputs:
        raise RequestError(
            f"{name} has {len(value)} items; at most {max_inputs} are accepted per request "
            "(--max-inputs)", param=name, code="too_many_inputs")
    texts = []
    for index, item in enumerate(value):
        where = f"{name}[{index}]"
        if isinstance(item, dict):
            if not isinstance(item.get("text"), str):
                raise RequestError(
                    f'{where} is an object without a string "text" field (its "text" is '
                    f'{kind(item.get("text"))}); {name} must be {DOCUMENT_SHAPES}',
                    param=name, code="invalid_type")
            item = item["text"]
            where += ".text"
        elif not isinstance(item, str):
            raise RequestError(f"{where} is {kind(item)}; {name} must be {DOCUMENT_SHAPES}",
                               param=name, code="invalid_type")
        check_text(item, where, name)
        texts.append(item)
    return texts


def check_top_n(top_n: int | None, documents: int) -> int:
    """How many results to return: all when unset, at most the number of documents."""
    if top_n is None:
        return documents
    if top_n <= 0:
        raise RequestError(f"top_n is {top_n}; it must be at least 1 (or left out for all)",
                           param="top_n", code="invalid_value")
    return min(top_n, documents)


def _rank_key(candidate: tuple[int, float]) -> tuple[float, int]:
    index, score = candidate
    # Hedgerow's one order (kernels/topk_reference.py): score descending, NaN as -inf, -0 equal
    # to +0 (Python's -0.0 == 0.0 already), then the lower index.
    return (math.inf if math.isnan(score) else -score, index)


def merge_ranked(parts: Iterable[tuple[Sequence[int], Sequence[float]]], top_n: int
                 ) -> list[tuple[int, float]]:
    """Merge per-chunk top-k lists (GLOBAL indices, scores) into the top `top_n`, best first.

    This equals the top-k of the whole list, ties included, because every part was ranked in
    the same total order (score descending, ties to the lower index) over a contiguous slice of
    the documents, and asked for min(top_n, its size): take any document d of the whole list's
    top-k. Fewer than k documents of the whole list rank above d, so fewer than k of its own
    chunk do (the order between two documents does not depend on the chunk: a score depends
    only on the document and the query, and a lower local index is a lower global index), so d
    is in its chunk's list. The union of the lists thus holds the whole top-k, and sorting the
    union in the same order puts exactly those k first, in their order.
    """
    candidates = [(int(index), float(score))
                  for indices, scores in parts for index, score in zip(indices, scores)]
    candidates.sort(key=_rank_key)
    return candidates[:top_n]


def sigmoid(logit: float) -> float:
    """The relevance probability of a cross-encoder's logit, rounded to float32 (tanh form:
    no overflow at any logit; NaN stays NaN)."""
    return float(np.float32(0.5 * (1.0 + math.tanh(0.5 * logit))))


def rerank_body(result: Reranked, *, model: str, return_documents: bool) -> bytes:
    """The JSON body: {"id", "model", "results": [{"index", "relevance_score", "document"?,
    "truncated"?}], "usage": {"total_tokens"}}. Scores are written as the shortest text that
    reads back as the same float32 (a NaN embedding's score, -inf, is written as null);
    `truncated: true` marks a document a cross-encoder read cut to fit."""
    results = []
    for index, score in result.ranked:
        item: dict[str, Any] = {"index": index, "relevance_score": np.float32(score)}
        if return_documents:
            item["document"] = {"text": result.documents[index]}
        if index in result.truncated:
            item["truncated"] = True
        results.append(item)
    body = {"id": str(uuid.uuid4()), "model": model, "results": results,
            "usage": {"total_tokens": result.total_tokens}}
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def _too_long(where: str, length: int, max_tokens: int, what: str) -> str:
    return (f"{where} has {length} tokens (its template included); the model accepts at most "
            f"{max_tokens} tokens per {what}. Shorten it, or run the gateway with --truncate "
            "to cut long inputs.")


class Reranker:
    """One rerank request's steps, on the embedding service's card, tokenizer and router."""

    def __init__(self, service: EmbeddingService) -> None:
        self._service = service

    async def _tokenize(self, texts: list[str], input_type: str, param: str,
                        truncate: bool | None) -> Sequences:
        service = self._service
        card = service.card
        if truncate is None:
            truncate = service.settings.truncate
        sequences = await service.tokenize(
            texts, card.templates.get(input_type, ""),
            card.max_tokens if truncate else _UNLIMITED, param, truncate)
        first = next((i for i, n in enumerate(sequences.lengths) if n > card.max_tokens), None)
        if first is not None:
            where = "query" if param == "query" else f"{param}[{first}]"
            raise RequestError(_too_long(where, sequences.lengths[first], card.max_tokens,
                                         "query" if param == "query" else "document"),
                               param=param, code="context_length_exceeded")
        return sequences

    async def rerank(self, body: RerankRequest, *, deadline: float) -> Reranked:
        """Rank the body's documents against its query; `deadline` is a time.monotonic() value.
        A cross-encoder (task rerank) scores each pair; an embedding model ranks by cosine."""
        service = self._service
        settings = service.settings
        service.check_model(body.model)
        query = parse_query(body.query)
        documents = parse_documents(body.documents, settings.max_inputs, body.field)
        top_n = check_top_n(body.top_n, len(documents))
        if service.card.task == "rerank":
            return await self._cross_encode(body, query, documents, top_n, deadline)
        service.check_task("embed", "reranking")  # sparse vectors have no cosine to rank by
        query_ids = await self._tokenize([query], "query", "query", body.truncate)
        document_ids = await self._tokenize(documents, "document", body.field, body.truncate)
        total = query_ids.total_tokens + document_ids.total_tokens
        if total > settings.max_request_tokens:
            raise RequestError(
                f"the request has {total} tokens (query and documents); at most "
                f"{settings.max_request_tokens} are accepted per request (--max-request-tokens)",
                param=body.field, code="too_many_tokens")
        # Each chunk carries the query too, so the documents get the budget less the query.
        chunks = plan_chunks(document_ids.lengths,
                             max(1, service.chunk_budget() - query_ids.total_tokens))
        parts, space = await service.router.score(query_ids.input_ids, document_ids, chunks,
                                                  top_n=top_n, deadline=deadline)
        ranked = merge_ranked(((indices.tolist(), scores.tolist()) for indices, scores in parts),
                              top_n)
        service.metrics.tokens.inc(total + query_ids.total_tokens * (len(chunks) - 1))
        service.metrics.inputs.inc(len(documents) + len(chunks))
        return Reranked(ranked=ranked, documents=documents, total_tokens=total, space=space)

    async def _cross_encode(self, body: RerankRequest, query: str, documents: list[str],
                            top_n: int, deadline: float) -> Reranked:
        """A cross-encoder's ranking: every (query, document) pair tokenized with the pair
        template, or a Qwen3-Reranker's prompt (documents cut to the model's limit unless the
        request says truncate false), chunked on the token budget, scored by Rerank calls,
        merged in the one order; scores are the sigmoid of the logits unless `raw_scores` (the
        order is the logits')."""
        service = self._service
        settings = service.settings
        card = service.card
        pairs = await service.tokenizer.encode_pairs(
            query, documents, max_tokens=card.max_tokens, truncate=body.truncate is not False,
            prompted=card.architecture in PROMPTED_ARCHITECTURES)
        if pairs.total_tokens > settings.max_request_tokens:
            raise RequestError(
                f"the request has {pairs.total_tokens} tokens (the query once per document); "
                f"at most {settings.max_request_tokens} are accepted per request "
                "(--max-request-tokens)", param=body.field, code="too_many_tokens")
        chunks = plan_chunks(pairs.lengths, service.chunk_budget())
        parts, space = await service.router.rerank(pairs, chunks, top_n=top_n,
                                                   deadline=deadline)
        ranked = merge_ranked(((indices.tolist(), scores.tolist()) for indices, scores in parts),
                              top_n)
        if not body.raw_scores:
            ranked = [(index, sigmoid(score)) for index, score in ranked]
        service.metrics.tokens.inc(pairs.total_tokens)
        service.metrics.inputs.inc(len(documents))
        return Reranked(ranked=ranked, documents=documents, total_tokens=pairs.total_tokens,
                        space=space, truncated=pairs.truncated)
