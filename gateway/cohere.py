"""Cohere's v2 API: `/v2/embed` and `/v2/rerank` requests parsed without I/O, and their answers.

Owns Cohere's request shapes (`texts`, `input_type`, `embedding_types`, `output_dimension`,
`truncate` for embed; `query`, `documents`, `top_n` for rerank) with a specific message for
every malformed or unsupported field, how they map onto Hedgerow's (`search_query` is the
query template, `search_document` the document one; `float` and `base64` are the embedding
types there are; `truncate: END` cuts long inputs, `NONE` refuses them), and the answers in
Cohere's shape (`embeddings` by type, `results` best first, `meta` with billed tokens). The
steps of a request are the embedding service's and the reranker's; errors are answered in
Cohere's shape by http_errors.py. Knows nothing about HTTP or servers.
"""

import base64
import dataclasses
import uuid
from typing import Any

import numpy as np
import orjson

from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.rerank import Reranked, RerankRequest
from hedgerow.gateway.schema import json_object, kind, optional_int, optional_str, required

# Cohere's input types, and the template each takes here (None: no template).
INPUT_TYPES = {"search_query": "query", "search_document": "document",
               "classification": None, "clustering": None}
EMBEDDING_TYPES = ("float", "base64")
COHERE_ONLY_TYPES = ("int8", "uint8", "binary", "ubinary")
TRUNCATE = {"NONE": False, "END": True}


@dataclasses.dataclass(frozen=True)
class EmbedRequest:
    """POST /v2/embed with `texts` (images and `inputs` content lists are refused)."""

    model: str | None
    texts: Any
    template_name: str | None     # "query", "document" or None
    embedding_types: tuple[str, ...]
    dimensions: int | None
    truncate: bool | None

    @classmethod
    def parse(cls, body: Any) -> "EmbedRequest":
        body = json_object(body)
        for unsupported in ("images", "inputs"):
            if body.get(unsupported) is not None:
                raise RequestError(f"{unsupported} is not supported here: this model embeds "
                                   "text; send `texts`", param=unsupported,
                                   code="unsupported_value")
        input_type = optional_str(body, "input_type")
        if input_type is not None and input_type not in INPUT_TYPES:
            raise RequestError(f"input_type {input_type!r} is not one of "
                               f"{', '.join(INPUT_TYPES)}", param="input_type",
                               code="invalid_value")
        truncate = optional_str(body, "truncate")
        if truncate is not None and truncate not in TRUNCATE:
            hint = (" (START is not supported here: inputs are cut at their end)"
                    if truncate == "START" else "")
            raise RequestError(f"truncate {truncate!r} is not NONE or END{hint}",
                               param="truncate", code="invalid_value")
        return cls(model=optional_str(body, "model"), texts=required(body, "texts"),
                   template_name=INPUT_TYPES.get(input_type) if input_type else None,
                   embedding_types=_embedding_types(body.get("embedding_types")),
                   dimensions=optional_int(body, "output_dimension"),
                   truncate=None if truncate is None else TRUNCATE[truncate])


def _embedding_types(value: Any) -> tuple[str, ...]:
    if value is None:
        return ("float",)
    if not isinstance(value, list) or not value:
        raise RequestError(f"embedding_types must be a non-empty list of "
                           f"{' or '.join(EMBEDDING_TYPES)}; got {kind(value)}",
                           param="embedding_types", code="invalid_type")
    for item in value:
        if item in COHERE_ONLY_TYPES:
            raise RequestError(f"embedding_types {item!r} is not supported here; ask for "
                               "'float' or 'base64' (float32 bytes)", param="embedding_types",
                               code="unsupported_value")
        if item not in EMBEDDING_TYPES:
            raise RequestError(f"embedding_types holds {orjson.dumps(item).decode()[:40]}, "
                               f"which is not one of {', '.join(EMBEDDING_TYPES)}",
                               param="embedding_types", code="invalid_value")
    return tuple(dict.fromkeys(value))


def check_texts(texts: Any) -> None:
    """`texts` must be a list of strings (a bare string is Cohere's v1 habit, not v2's)."""
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise RequestError(f"texts must be a list of strings; got {kind(texts)}",
                           param="texts", code="invalid_type")


def rerank_request(body: Any) -> RerankRequest:
    """POST /v2/rerank as the reranker's request (Cohere v2: `documents` are strings, v1's
    `{"text": ...}` objects are accepted too; `max_tokens_per_doc` and `priority` are
    ignored)."""
    body = json_object(body)
    return RerankRequest(model=optional_str(body, "model"), query=required(body, "query"),
                         documents=required(body, "documents"),
                         top_n=optional_int(body, "top_n"), return_documents=False)


def _meta(tokens: int, warnings: list[str] | None = None) -> dict:
    meta: dict[str, Any] = {"api_version": {"version": "2"},
                            "billed_units": {"input_tokens": tokens},
                            "tokens": {"input_tokens": tokens}}
    if warnings:
        meta["warnings"] = warnings
    return meta


def embed_body(embeddings: np.ndarray, texts: list[str], types: tuple[str, ...],
               tokens: int) -> bytes:
    """{"id", "embeddings": {type: [...]}, "texts", "meta", "response_type"}; base64 is the
    little-endian float32 bytes of each vector."""
    rows = np.ascontiguousarray(embeddings, dtype="<f4")
    by_type: dict[str, Any] = {}
    if "float" in types:
        by_type["float"] = rows
    if "base64" in types:
        by_type["base64"] = [base64.b64encode(row.tobytes()).decode("ascii") for row in rows]
    return orjson.dumps({"id": str(uuid.uuid4()), "embeddings": by_type, "texts": texts,
                         "meta": _meta(tokens), "response_type": "embeddings_by_type"},
                        option=orjson.OPT_SERIALIZE_NUMPY)


def rerank_body(result: Reranked) -> bytes:
    """{"id", "results": [{"index", "relevance_score"}], "meta"}, best first. With a
    cross-encoder the score is Cohere's [0, 1] relevance (the sigmoid of its logit), and
    `meta.warnings` names the documents cut to fit the model; with an embedding model it is
    the embeddings' cosine similarity (between -1 and 1)."""
    results = [{"index": index, "relevance_score": np.float32(score)}
               for index, score in result.ranked]
    warnings = [f"documents[{index}] was truncated to fit the model's pair length"
                for index in sorted(result.truncated)]
    return orjson.dumps({"id": str(uuid.uuid4()), "results": results,
                         "meta": _meta(result.total_tokens, warnings)},
                        option=orjson.OPT_SERIALIZE_NUMPY)
