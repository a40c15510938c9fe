"""Text Embeddings Inference's HTTP API: its request shapes, parsed without I/O, and its answers.

Owns TEI's requests (`/embed`, `/embed_sparse`, `/rerank`, `/tokenize`, `/similarity`, and `POST
/`, where TEI serves embeddings and Hugging Face's `InferenceClient` sends both
`feature_extraction` and `sentence_similarity`) with a specific message for every malformed field,
and TEI's answers: bare JSON arrays of vectors, ranks, tokens and scores, and the `/info` object.
Fields TEI has and Hedgerow cannot honour (`truncation_direction: left`) are refused by name. The
steps of a request are the embedding service's and the reranker's; errors are answered in TEI's
shape by http_errors.py. Knows nothing about HTTP or servers.
"""

import dataclasses
from typing import Any

import numpy as np
import orjson

from hedgerow import __version__
from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.model_card import ModelCard
from hedgerow.gateway.rerank import Reranked, RerankRequest
from hedgerow.gateway.schema import (
    check_text, json_object, kind, optional_bool, optional_int, optional_str, required,
)

DIRECTIONS = ("right", "Right", "left", "Left")


def _optional_flag(body: dict, name: str) -> bool | None:
    """A boolean that may be left out or null (None: the gateway's default applies)."""
    return optional_bool(body, name, None)  # type: ignore[arg-type]


def _right_only(body: dict) -> None:
    direction = body.get("truncation_direction")
    if direction is None or direction in ("right", "Right"):
        return
    if direction in ("left", "Left"):
        raise RequestError("truncation_direction 'left' is not supported here: inputs are "
                           "truncated at their end (leave it out, or send 'right')",
                           param="truncation_direction", code="unsupported_value")
    raise RequestError(f"truncation_direction must be 'right' or 'left'; got "
                       f"{orjson.dumps(direction).decode()[:40]}",
                       param="truncation_direction", code="invalid_value")


@dataclasses.dataclass(frozen=True)
class EmbedRequest:
    """POST /embed (and POST / with text inputs): TEI's EmbedRequest."""

    inputs: Any                 # a string, a list of strings, or token ids
    truncate: bool | None
    normalize: bool
    dimensions: int | None
    prompt_name: str | None

    @classmethod
    def parse(cls, body: dict) -> "EmbedRequest":
        _right_only(body)
        return cls(inputs=required(body, "inputs"), truncate=_optional_flag(body, "truncate"),
                   normalize=optional_bool(body, "normalize", True),
                   dimensions=optional_int(body, "dimensions"),
                   prompt_name=optional_str(body, "prompt_name"))


def rerank_request(body: Any) -> RerankRequest:
    """POST /rerank, TEI's shape (`query`, `texts`, `truncate`, `raw_scores`, `return_text`),
    as the reranker's request: every text ranked, best first. With a cross-encoder the score
    is the sigmoid of its logit, or the logit itself with `raw_scores` (as TEI's); with an
    embedding model it is the cosine similarity and `raw_scores` changes nothing."""
    body = json_object(body)
    _right_only(body)
    return RerankRequest(model=None, query=required(body, "query"),
                         documents=required(body, "texts"), top_n=None,
                         return_documents=optional_bool(body, "return_text", False),
                         truncate=_optional_flag(body, "truncate"), field="texts",
                         raw_scores=optional_bool(body, "raw_scores", False))


@dataclasses.dataclass(frozen=True)
class SimilarityRequest:
    """POST /similarity (and POST / with `inputs.source_sentence`): the cosine similarity of
    each of `sentences` to `source_sentence`."""

    source_sentence: str
    sentences: list[str]
    truncate: bool | None
    prompt_name: str | None

    @classmethod
    def parse(cls, body: dict, max_inputs: int) -> "SimilarityRequest":
        inputs = required(body, "inputs")
        if not isinstance(inputs, dict):
            raise RequestError(f"inputs must be an object {{\"source_sentence\": string, "
                               f"\"sentences\": [string, ...]}}; got {kind(inputs)}",
                               param="inputs", code="invalid_type")
        source = inputs.get("source_sentence")
        if not isinstance(source, str):
            raise RequestError(f"inputs.source_sentence must be a string; got {kind(source)}",
                               param="inputs.source_sentence", code="invalid_type")
        check_text(source, "inputs.source_sentence", "inputs.source_sentence")
        sentences = inputs.get("sentences")
        if not isinstance(sentences, list) or not sentences:
            what = "an empty list" if sentences == [] else kind(sentences)
            raise RequestError(f"inputs.sentences must be a non-empty list of strings; got "
                               f"{what}", param="inputs.sentences",
                               code="empty_input" if sentences == [] else "invalid_type")
        if len(sentences) + 1 > max_inputs:
            raise RequestError(f"inputs.sentences has {len(sentences)} items; at most "
                               f"{max_inputs - 1} are accepted per request (--max-inputs)",
                               param="inputs.sentences", code="too_many_inputs")
        for index, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise RequestError(f"inputs.sentences[{index}] is {kind(sentence)}; it must "
                                   "be a string", param="inputs.sentences", code="invalid_type")
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise RequestError(f"parameters must be an object; got {kind(parameters)}",
                               param="parameters", code="invalid_type")
        _right_only(parameters)
        return cls(source_sentence=source, sentences=list(sentences),
                   truncate=_optional_flag(parameters, "truncate"),
                   prompt_name=optional_str(parameters, "prompt_name"))


def is_similarity(body: dict) -> bool:
    """Whether a body sent to `POST /` asks for similarities (TEI's sentence-similarity task,
    what InferenceClient.sentence_similarity sends) rather than embeddings."""
    return isinstance(body.get("inputs"), dict)


@dataclasses.dataclass(frozen=True)
class TokenizeRequest:
    """POST /tokenize with TEI's `inputs` (a string or a list of strings)."""

    texts: list[str]
    add_special_tokens: bool
    prompt_name: str | None

    @classmethod
    def parse(cls, body: dict, max_inputs: int) -> "TokenizeRequest":
        inputs = required(body, "inputs")
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise RequestError("inputs must be a string or a list of strings",
                               param="inputs", code="invalid_type")
        if not texts:
            raise RequestError("inputs is an empty list; send at least one text",
                               param="inputs", code="empty_input")
        if len(texts) > max_inputs:
            raise RequestError(f"inputs has {len(texts)} items; at most {max_inputs} are "
                               "accepted per request (--max-inputs)", param="inputs",
                               code="too_many_inputs")
        for index, text in enumerate(texts):
            check_text(text, "inputs" if isinstance(inputs, str) else f"inputs[{index}]",
                       "inputs")
        return cls(texts=texts, add_special_tokens=optional_bool(body, "add_special_tokens",
                                                                 True),
                   prompt_name=optional_str(body, "prompt_name"))


def embed_body(embeddings: np.ndarray) -> bytes:
    """[[float, ...], ...]: one vector per input, even for one input (float32 [B, D])."""
    return orjson.dumps(np.ascontiguousarray(embeddings, dtype=np.float32),
                        option=orjson.OPT_SERIALIZE_NUMPY)


def sparse_body(vectors: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """[[{"index", "value"}, ...], ...]: one sparse vector per input (TEI's /embed_sparse),
    token ids ascending."""
    return orjson.dumps([[{"index": int(index), "value": value}
                          for index, value in zip(ids.tolist(), values.astype(np.float32))]
                         for ids, values in vectors], option=orjson.OPT_SERIALIZE_NUMPY)


def similarity_body(embeddings: np.ndarray) -> bytes:
    """[float, ...]: the cosine similarity of rows 1.. to row 0 (float32 [1+N, D])."""
    rows = embeddings.astype(np.float64)
    norms = np.linalg.norm(rows, axis=1)
    norms[norms == 0] = 1.0
    scores = (rows[1:] @ rows[0]) / (norms[1:] * norms[0])
    return orjson.dumps(scores.astype(np.float32), option=orjson.OPT_SERIALIZE_NUMPY)


def rerank_body(result: Reranked, return_text: bool) -> bytes:
    """[{"index", "score", "text"?, "truncated"?}, ...], best first; `truncated: true` marks a
    text a cross-encoder read cut to fit."""
    ranks = []
    for index, score in result.ranked:
        item: dict[str, Any] = {"index": index, "score": np.float32(score)}
        if return_text:
            item["text"] = result.documents[index]
        if index in result.truncated:
            item["truncated"] = True
        ranks.append(item)
    return orjson.dumps(ranks, option=orjson.OPT_SERIALIZE_NUMPY)


def _byte_offsets(text: str) -> list[int]:
    """UTF-8 byte offset of each character position of `text` (TEI's offsets are bytes)."""
    offsets = [0]
    for char in text:
        offsets.append(offsets[-1] + len(char.encode("utf-8")))
    return offsets


def tokens_body(texts: list[str], encodings: list) -> bytes:
    """[[{"id", "text", "special", "start", "stop"}, ...], ...] per text: a special token's
    text is the token and its offsets null; another's text is its slice of the (templated)
    input, its offsets UTF-8 bytes into it."""
    out = []
    for text, encoding in zip(texts, encodings):
        offsets = None if text.isascii() else _byte_offsets(text)
        tokens = []
        for token_id, token, (start, stop), special in zip(
                encoding.ids, encoding.tokens, encoding.offsets,
                encoding.special_tokens_mask):
            if special:
                tokens.append({"id": token_id, "text": token, "special": True, "start": None,
                               "stop": None})
                continue
            tokens.append({"id": token_id, "text": text[start:stop], "special": False,
                           "start": offsets[start] if offsets else start,
                           "stop": offsets[stop] if offsets else stop})
        out.append(tokens)
    return orjson.dumps(out)


def info_body(card: ModelCard, *, pooling: str | None, dtype: str | None,
              max_batch_tokens: int, max_client_batch_size: int, auto_truncate: bool,
              tokenization_workers: int) -> bytes:
    """GET /info in TEI's shape, from what the gateway knows of the served model."""
    return orjson.dumps({
        "model_id": card.name, "model_sha": None, "model_dtype": dtype or "unknown",
        "served_model_name": card.name,
        "model_type": ({"reranker": {}} if card.task == "rerank"
                       else {"embedding": {"pooling": "splade" if card.task == "sparse"
                                           else pooling or "unknown"}}),
        "max_concurrent_requests": None, "max_input_length": card.max_tokens,
        "max_batch_tokens": max_batch_tokens, "max_batch_requests": None,
        "max_client_batch_size": max_client_batch_size, "auto_truncate": auto_truncate,
        "tokenization_workers": tokenization_workers, "version": __version__,
        "sha": None, "docker_label": None,
    })
