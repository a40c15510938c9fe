from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLOAT32: _ClassVar[DType]
    FLOAT16: _ClassVar[DType]
    BFLOAT16: _ClassVar[DType]
FLOAT32: DType
FLOAT16: DType
BFLOAT16: DType

class EmbedRequest(_message.Message):
    __slots__ = ("input_ids", "cu_seqlens", "normalize", "dimensions", "dtype")
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    CU_SEQLENS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    input_ids: bytes
    cu_seqlens: bytes
    normalize: bool
    dimensions: int
    dtype: DType
    def __init__(self, input_ids: _Optional[bytes] = ..., cu_seqlens: _Optional[bytes] = ..., normalize: _Optional[bool] = ..., dimensions: _Optional[int] = ..., dtype: _Optional[_Union[DType, str]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "shape", "dtype", "prompt_tokens", "space", "timing")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    embeddings: bytes
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: DType
    prompt_tokens: int
    space: str
    timing: Timing
    def __init__(self, embeddings: _Optional[bytes] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[DType, str]] = ..., prompt_tokens: _Optional[int] = ..., space: _Optional[str] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("queue_us", "inference_us")
    QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_US_FIELD_NUMBER: _ClassVar[int]
    queue_us: int
    inference_us: int
    def __init__(self, queue_us: _Optional[int] = ..., inference_us: _Optional[int] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("model", "architecture", "dimensions", "max_tokens", "max_request_tokens", "pooling", "normalize", "templates", "version", "vocab_size", "max_inflight_tokens", "dtype", "dtype_reason", "space", "task", "token_types")
    class TemplatesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    POOLING_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_INFLIGHT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_REASON_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TOKEN_TYPES_FIELD_NUMBER: _ClassVar[int]
    model: str
    architecture: str
    dimensions: int
    max_tokens: int
    max_request_tokens: int
    pooling: str
    normalize: bool
    templates: _containers.ScalarMap[str, str]
    version: str
    vocab_size: int
    max_inflight_tokens: int
    dtype: str
    dtype_reason: str
    space: str
    task: str
    token_types: int
    def __init__(self, model: _Optional[str] = ..., architecture: _Optional[str] = ..., dimensions: _Optional[int] = ..., max_tokens: _Optional[int] = ..., max_request_tokens: _Optional[int] = ..., pooling: _Optional[str] = ..., normalize: _Optional[bool] = ..., templates: _Optional[_Mapping[str, str]] = ..., version: _Optional[str] = ..., vocab_size: _Optional[int] = ..., max_inflight_tokens: _Optional[int] = ..., dtype: _Optional[str] = ..., dtype_reason: _Optional[str] = ..., space: _Optional[str] = ..., task: _Optional[str] = ..., token_types: _Optional[int] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("input_ids", "cu_seqlens", "top_n", "dimensions")
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    CU_SEQLENS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    input_ids: bytes
    cu_seqlens: bytes
    top_n: int
    dimensions: int
    def __init__(self, input_ids: _Optional[bytes] = ..., cu_seqlens: _Optional[bytes] = ..., top_n: _Optional[int] = ..., dimensions: _Optional[int] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("input_ids", "cu_seqlens", "token_type_ids", "top_n")
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    CU_SEQLENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_TYPE_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    input_ids: bytes
    cu_seqlens: bytes
    token_type_ids: bytes
    top_n: int
    def __init__(self, input_ids: _Optional[bytes] = ..., cu_seqlens: _Optional[bytes] = ..., token_type_ids: _Optional[bytes] = ..., top_n: _Optional[int] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("indices", "scores", "prompt_tokens", "space", "timing")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    prompt_tokens: int
    space: str
    timing: Timing
    def __init__(self, indices: _Optional[_Iterable[int]] = ..., scores: _Optional[_Iterable[float]] = ..., prompt_tokens: _Optional[int] = ..., space: _Optional[str] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ...) -> None: ...

class SparseEmbedResponse(_message.Message):
    __slots__ = ("counts", "indices", "values", "prompt_tokens", "space", "timing")
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    INDICES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACE_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    indices: bytes
    values: bytes
    prompt_tokens: int
    space: str
    timing: Timing
    def __init__(self, counts: _Optional[_Iterable[int]] = ..., indices: _Optional[bytes] = ..., values: _Optional[bytes] = ..., prompt_tokens: _Optional[int] = ..., space: _Optional[str] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ...) -> None: ...
