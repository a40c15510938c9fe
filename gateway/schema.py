"""The OpenAI embeddings API's request and response shapes, parsed and built without I/O.

Owns what a valid request looks like (`EmbeddingsRequest`, `SparseEmbeddingsRequest`,
`TokenizeRequest`, and the field readers other request shapes share), turning the polymorphic
`input` field into either texts or token-id sequences with a specific message for every
malformed case, and encoding responses (float lists or base64 of little-endian float32, as
OpenAI does; sparse vectors as `{index, value}` lists). Knows nothing about servers, tokenizers
or HTTP status codes: problems are raised as RequestError. Unknown fields are ignored, as
OpenAI's clients add their own; `model` may be left out (the served model).
"""

import base64
import dataclasses
import json
from typing import Any

import numpy as np
import orjson

from hedgerow.gateway.errors import RequestError

INPUT_SHAPES = "a string, a list of strings, a list of token ids or a list of token-id lists"
INPUT_TYPES = ("query", "document")
_MISSING = object()


def json_object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise RequestError("request body: must be a JSON object", code="invalid_value")
    return body


def _problem(name: str, what: str, value: Any = _MISSING, code: str = "invalid_value"
             ) -> RequestError:
    message = f"{name}: {what}"
    if value is not _MISSING:
        message += f" (got {json.dumps(value, default=str)[:60]})"
    return RequestError(message, param=name, code=code)


def required(body: dict, name: str) -> Any:
    value = body.get(name, _MISSING)
    if value is _MISSING:
        raise _problem(name, "field required", code="missing_field")
    return value


def optional_str(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise _problem(name, "must be a valid string", value)
    return value


def optional_int(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is not None and (type(value) is not int):  # bool is an int and is no count
        raise _problem(name, "must be a valid integer", value)
    return value


def optional_bool(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _problem(name, "must be a valid boolean", value)
    return value


def optional_choice(body: dict, name: str, choices: tuple[str, ...]) -> str | None:
    value = body.get(name)
    if value is not None and value not in choices:
        options = " or ".join(f"'{choice}'" for choice in choices)
        raise _problem(name, f"must be {options}", value)
    return value


@dataclasses.dataclass(frozen=True)
class EmbeddingsRequest:
    """POST /v1/embeddings."""

    input: Any
    model: str | None
    encoding_format: str       # float | base64
    dimensions: int | None
    input_type: str | None     # query | document

    @classmethod
    def parse(cls, body: Any) -> "EmbeddingsRequest":
        body = json_object(body)
        return cls(input=required(body, "input"), model=optional_str(body, "model"),
                   encoding_format=optional_choice(body, "encoding_format",
                                                   ("float", "base64")) or "float",
                   dimensions=optional_int(body, "dimensions"),
                   input_type=optional_choice(body, "input_type", INPUT_TYPES))


@dataclasses.dataclass(frozen=True)
class SparseEmbeddingsRequest:
    """POST /v1/embeddings/sparse: /v1/embeddings' fields that apply to sparse vectors."""

    input: Any
    model: str | None
    input_type: str | None     # query | document

    @classmethod
    def parse(cls, body: Any) -> "SparseEmbeddingsRequest":
        body = json_object(body)
        # Only float: a sparse vector is answered as {index, value} entries, never base64.
        optional_choice(body, "encoding_format", ("float",))
        return cls(input=required(body, "input"), model=optional_str(body, "model"),
                   input_type=optional_choice(body, "input_type", INPUT_TYPES))


@dataclasses.dataclass(frozen=True)
class TokenizeRequest:
    """POST /tokenize: the same input forms and templates as /v1/embeddings."""

    input: Any
    model: str | None
    input_type: str | None

    @classmethod
    def parse(cls, body: Any) -> "TokenizeRequest":
        body = json_object(body)
        return cls(input=required(body, "input"), model=optional_str(body, "model"),
                   input_type=optional_choice(body, "input_type", INPUT_TYPES))


@dataclasses.dataclass(frozen=True)
class Inputs:
    """A request's inputs: exactly one of `texts` or `token_ids` is set, in input order."""

    texts: list[str] | None = None
    token_ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.token_ids or ())


def _is_token(value: Any) -> bool:
    return type(value) is int  # bool is an int subclass and is not a token id


def check_text(text: str, where: str, param: str = "input") -> None:
    """A text must be non-empty and encodable as UTF-8; `where` names it in the message. A
    text of only whitespace is embedded as the tokenizer encodes it, as OpenAI's API does (a
    byte-level BPE tokenizer gives it real tokens; one that gives none is refused later)."""
    if not text:
        raise RequestError(f"{where} is an empty string; it must have text",
                           param=param, code="empty_input")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError(f"{where} is not valid Unicode (it holds a lone surrogate)",
                               param=param, code="invalid_text") from None


def _check_tokens(tokens: list, where: str, name: str = "input") -> None:
    if not tokens:
        raise RequestError(f"{where} is an empty token list", param=name, code="empty_input")
    for position, token in enumerate(tokens):
        if not _is_token(token):
            raise RequestError(
                f"{where}[{position}] is {json.dumps(token)[:40]}; token ids are integers",
                param=name, code="invalid_type")


def parse_inputs(value: Any, max_inputs: int, name: str = "input") -> Inputs:
    """Normalize OpenAI's `input` (or another API's field of the same forms, `name`) into
    texts or token-id lists, rejecting malformed forms."""
    if isinstance(value, str):
        check_text(value, name, name)
        return Inputs(texts=[value])
    if not isinstance(value, list):
        raise RequestError(f"{name} must be {INPUT_SHAPES}; got {kind(value)}",
                           param=name, code="invalid_type")
    if not value:
        raise RequestError(f"{name} is an empty list; send at least one input",
                           param=name, code="empty_input")
    first = value[0]
    if _is_token(first):  # one sequence of token ids
        _check_tokens(value, name, name)
        return Inputs(token_ids=[value])
    if len(value) > max_inputs:
        raise RequestError(
            f"{name} has {len(value)} items; at most {max_inputs} are accepted per request "
            "(--max-inputs)", param=name, code="too_many_inputs")
    if isinstance(first, str):
        for index, text in enumerate(value):
            if not isinstance(text, str):
                raise _mixed(index, text, "a string", name)
            check_text(text, f"{name}[{index}]", name)
        return Inputs(texts=list(value))
    if isinstance(first, list):
        for index, tokens in enumerate(value):
            if not isinstance(tokens, list):
                raise _mixed(index, tokens, "a list of token ids", name)
            _check_tokens(tokens, f"{name}[{index}]", name)
        return Inputs(token_ids=list(value))
    raise RequestError(f"{name} must be {INPUT_SHAPES}; {name}[0] is {kind(first)}",
                       param=name, code="invalid_type")


def kind(value: Any) -> str:
    """How a JSON value is named in a message: "a string", "null", ..."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _mixed(index: int, value: Any, expected: str, name: str) -> RequestError:
    return RequestError(
        f"{name}[{index}] is {kind(value)} but {name}[0] makes every item {expected}; "
        f"{name} must be {INPUT_SHAPES}", param=name, code="invalid_type")


def check_token_range(token_ids: list[list[int]], vocab_size: int) -> None:
    """Every id must be in [0, vocab_size); name the first one that is not."""
    for index, tokens in enumerate(token_ids):
        low, high = min(tokens), max(tokens)
        if low < 0 or high >= vocab_size:
            position = next(i for i, t in enumerate(tokens) if t < 0 or t >= vocab_size)
            raise RequestError(
                f"input[{index}][{position}] is token id {tokens[position]}, outside the "
                f"model's vocabulary [0, {vocab_size})", param="input", code="invalid_token_id")


def embeddings_body(
    embeddings: np.ndarray, *, model: str, prompt_tokens: int, encoding_format: str,
    space: str = ""
) -> bytes:
    """The JSON body of an embeddings response; `embeddings` is float32 [B, D] in input order.

    Floats are written in the shortest text that reads back as the same float32; base64 is the
    little-endian float32 bytes of each row, as OpenAI encodes it. `space` (the fingerprint of
    the vectors' embedding space) is the field `embedding_space`, which OpenAI's clients ignore.
    """
    rows = np.ascontiguousarray(embeddings, dtype="<f4")
    if encoding_format == "base64":
        values: Any = [base64.b64encode(row.tobytes()).decode("ascii") for row in rows]
    else:
        values = list(rows)
    body = {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(values)],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        "embedding_space": space,
    }
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def sparse_embeddings_body(vectors: list[tuple[np.ndarray, np.ndarray]], *, model: str,
                           prompt_tokens: int, space: str) -> bytes:
    """The JSON body of a sparse embeddings response: /v1/embeddings' shape with each
    `embedding` the input's non-zero entries `[{"index": token id, "value": weight}, ...]`,
    ids ascending (per input: uint32 ids [k], float32 weights [k])."""
    data = [{"object": "sparse_embedding", "index": i,
             "embedding": [{"index": index, "value": value}
                           for index, value in zip(ids.tolist(), values.astype(np.float32))]}
            for i, (ids, values) in enumerate(vectors)]
    body = {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            "embedding_space": space}
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def tokenize_body(sequences: list[list[int]], *, model: str) -> bytes:
    """The JSON body of a /tokenize response: ids and count per input, and the total."""
    data = [{"index": i, "tokens": ids, "count": len(ids)} for i, ids in enumerate(sequences)]
    total = sum(item["count"] for item in data)
    body = {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": total, "total_tokens": total}}
    return orjson.dumps(body)
