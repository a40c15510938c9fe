"""What /openapi.json documents: each public route's request and answer, with examples.

These pydantic models are the schema only: the routes parse their bodies with orjson and
validate by hand (gateway/schema.py, cohere.py, tei.py, rerank.py), which gives every way a
body can be wrong its own message and measured faster than FastAPI's body parsing.
tests/gateway/test_openapi.py holds the two in step: every documented example is sent to the
running app and must be answered 200, and every route of the app must be in the document.
Unknown fields are ignored by the routes, so every request model allows extra fields.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

VERSION = "0.1.0"
DESCRIPTION = ("Text embeddings and reranking, in the OpenAI, Cohere (v2) and Text Embeddings "
               "Inference APIs, in front of Hedgerow's GPU servers. Every answer carrying "
               "vectors or scores names their embedding space in the `x-embedding-space` "
               "header.")

Texts = str | list[str]
TokenIds = list[int] | list[list[int]]


def _request(*examples: dict) -> ConfigDict:
    return ConfigDict(extra="allow", json_schema_extra={"examples": list(examples)})


def body(model: type[BaseModel]) -> dict:
    """FastAPI's `openapi_extra` documenting `model` (one of REQUESTS) as the JSON body."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def request_schemas() -> dict:
    """The schemas of REQUESTS (and what they use), for the document's components."""
    _, schema = models_json_schema([(model, "validation") for model in REQUESTS],
                                   ref_template="#/components/schemas/{model}")
    return schema["$defs"]


# --- OpenAI ---------------------------------------------------------------------------------

class EmbeddingsRequest(BaseModel):
    model_config = _request({"input": "a hedge of hawthorn and blackthorn"},
                            {"input": ["what do hedgerows shelter?", "wrens and hedgehogs"],
                             "input_type": "query", "dimensions": 128})
    input: Texts | TokenIds = Field(description="One text or a list; token ids of the served "
                                    "model's tokenizer when the gateway accepts them "
                                    "(--accept-token-ids).")
    model: str | None = Field(None, description="The served model's name; left out: it.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, description="Keep the first N dimensions "
                                   "(Matryoshka), renormalised.")
    input_type: Literal["query", "document"] | None = Field(
        None, description="Which of the model's templates applies.")


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(description="Floats, or base64 of float32 "
                                         "little-endian")


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: Usage
    embedding_space: str


class SparseEmbeddingsRequest(BaseModel):
    # No example: only a gateway whose model is served with task sparse answers one.
    model_config = ConfigDict(extra="allow")
    input: Texts | TokenIds = Field(description="As /v1/embeddings' input.")
    model: str | None = Field(None, description="The served model's name; left out: it.")
    encoding_format: Literal["float"] = Field(
        "float", description="Sparse vectors come as {index, value} lists only.")
    input_type: Literal["query", "document"] | None = Field(
        None, description="Which of the model's templates applies.")


class SparseValue(BaseModel):
    """One entry of a sparse vector (also TEI's /embed_sparse answer's)."""
    index: int = Field(description="A token id of the served model's vocabulary.")
    value: float = Field(description="Its weight (> 0): lexical (BGE-M3) or SPLADE's.")


class SparseEmbedding(BaseModel):
    object: Literal["sparse_embedding"]
    index: int = Field(description="The input's position in the request.")
    embedding: list[SparseValue] = Field(description="The non-zero entries, token ids "
                                         "ascending.")


class SparseEmbeddingsResponse(BaseModel):
    object: Literal["list"]
    data: list[SparseEmbedding]
    model: str
    usage: Usage
    embedding_space: str = Field(description="The fingerprint of the vectors' space, which "
                                 "names their index space (the model's vocabulary).")


class RerankRequest(BaseModel):
    model_config = _request({"query": "what do hedgerows shelter?",
                             "documents": ["wrens and hedgehogs", "a motorway verge"],
                             "top_n": 1, "return_documents": True})
    query: str
    documents: list[str] | list[dict[str, Any]] = Field(
        description="Texts, or objects with a `text` field.")
    model: str | None = None
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False


class RerankResult(BaseModel):
    index: int
    relevance_score: float | None
    document: dict[str, str] | None = None
    truncated: bool | None = Field(None, description="True when a cross-encoder read the "
                                   "document cut to fit the model; left out otherwise.")


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: dict[str, int]


class TokenizeRequest(BaseModel):
    model_config = _request({"input": ["a hedge of hawthorn"]},
                            {"inputs": "a hedge of hawthorn", "add_special_tokens": True})
    input: Texts | None = Field(None, description="OpenAI-style: answers ids per input.")
    inputs: Texts | None = Field(None, description="TEI-style: answers TEI's token list.")
    model: str | None = None
    input_type: Literal["query", "document"] | None = None


class Model(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    dimensions: int
    max_tokens: int


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[Model]


# /v1/models/{model}: the route reads the name from the raw path (%2F is a slash).
MODEL_PARAMETER = {"parameters": [{"name": "model", "in": "path", "required": True,
                                   "schema": {"type": "string"},
                                   "description": "The model's name, e.g. org%2Fname"}]}


# --- Cohere v2 ------------------------------------------------------------------------------

class CohereEmbedRequest(BaseModel):
    model_config = _request({"texts": ["a hedge of hawthorn"], "input_type": "search_document",
                             "embedding_types": ["float"]})
    texts: list[str]
    model: str | None = None
    input_type: Literal["search_query", "search_document", "classification",
                        "clustering"] | None = None
    embedding_types: list[Literal["float", "base64"]] | None = None
    output_dimension: int | None = Field(None, ge=1)
    truncate: Literal["NONE", "END"] | None = None


class CohereRerankRequest(BaseModel):
    model_config = _request({"query": "what do hedgerows shelter?",
                             "documents": ["wrens and hedgehogs", "a motorway verge"],
                             "top_n": 1})
    query: str
    documents: list[str]
    model: str | None = None
    top_n: int | None = Field(None, ge=1)


# --- Text Embeddings Inference --------------------------------------------------------------

class TeiEmbedRequest(BaseModel):
    model_config = _request({"inputs": "a hedge of hawthorn"},
                            {"inputs": ["a hedge of hawthorn", "blackthorn"],
                             "normalize": True})
    inputs: Texts | TokenIds
    truncate: bool | None = None
    truncation_direction: Literal["right", "Right"] | None = None
    normalize: bool = True
    dimensions: int | None = Field(None, ge=1)
    prompt_name: str | None = None


class SimilarityInputs(BaseModel):
    source_sentence: str
    sentences: list[str]


class TeiSimilarityRequest(BaseModel):
    model_config = _request({"inputs": {"source_sentence": "a hedge of hawthorn",
                                        "sentences": ["blackthorn", "a motorway verge"]}})
    inputs: SimilarityInputs
    parameters: dict[str, Any] | None = None


class TeiRootRequest(BaseModel):
    """POST /: TEI's default route, embeddings or (with `inputs.source_sentence`) similarity."""

    model_config = _request({"inputs": "a hedge of hawthorn"},
                            {"inputs": {"source_sentence": "a hedge of hawthorn",
                                        "sentences": ["blackthorn"]}})
    inputs: Texts | TokenIds | SimilarityInputs
    parameters: dict[str, Any] | None = None


class TeiRerankRequest(BaseModel):
    model_config = _request({"query": "what do hedgerows shelter?",
                             "texts": ["wrens and hedgehogs", "a motorway verge"],
                             "return_text": True})
    query: str
    texts: list[str]
    truncate: bool | None = None
    raw_scores: bool = Field(False, description="A cross-encoder's logit instead of its "
                             "sigmoid; no effect with an embedding model (cosine).")
    return_text: bool = False


class TeiSparseRequest(BaseModel):
    # No example: only a gateway whose model is served with task sparse answers one.
    model_config = ConfigDict(extra="allow")
    inputs: Texts | TokenIds
    truncate: bool | None = None
    truncation_direction: Literal["right", "Right"] | None = None
    prompt_name: str | None = None


class TeiRank(BaseModel):
    index: int
    score: float | None
    text: str | None = None
    truncated: bool | None = Field(None, description="True when a cross-encoder read the "
                                   "text cut to fit the model; left out otherwise.")


# --- Operations -----------------------------------------------------------------------------

class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    ready_replicas: list[str] | None = Field(None, description="Left out without a key, when "
                                             "API keys are set")
    known_replicas: list[str] | None = None


# The error shapes, by API.
class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    error: OpenAIErrorDetail


class TeiError(BaseModel):
    error: str
    error_type: str


class CohereError(BaseModel):
    message: str


# The request bodies documented through `body` (their components come from request_schemas).
REQUESTS = (EmbeddingsRequest, SparseEmbeddingsRequest, RerankRequest, TokenizeRequest,
            CohereEmbedRequest, CohereRerankRequest, TeiEmbedRequest, TeiSimilarityRequest,
            TeiRootRequest, TeiRerankRequest, TeiSparseRequest)


def errors(model: type[BaseModel], invalid: int = 400) -> dict:
    """FastAPI's `responses` for the 4xx and 5xx answers of a route whose errors are `model`
    (`invalid`: the status of malformed input, 422 in TEI's API)."""
    return {status: {"model": model, "description": description} for status, description in (
        (invalid, "Malformed or out-of-range input"), (401, "Missing or wrong API key"),
        (413, "Body too large"), (429, "Too busy to finish in time; retry after Retry-After"),
        (503, "No embedding server ready; retry after Retry-After"))}
