"""Wire messages to tensors and back: the only place that knows the byte layouts.

In: `EmbedRequest.input_ids` int32 little-endian [T] and `cu_seqlens` int32 little-endian
[B+1] become a validated `RaggedBatch` plus the request's options. Out: float32 [B, D] rows,
postprocessed (Matryoshka truncation, L2 normalisation) and cast to the asked dtype, become
packed little-endian bytes with their shape. Knows nothing about scheduling or gRPC status
codes: problems are raised as InvalidInputError with a message for the caller.
"""

from dataclasses import dataclass

import numpy as np
import torch

from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.pooling import postprocess
from hedgerow.errors import InvalidInputError
from hedgerow.wire import embed_pb2

# Little-endian numpy views used to write the bytes (bfloat16 travels as its 16-bit pattern).
_WIRE_VIEWS = {
    embed_pb2.FLOAT32: (torch.float32, "<f4"),
    embed_pb2.FLOAT16: (torch.float16, "<f2"),
    embed_pb2.BFLOAT16: (torch.int16, "<i2"),
}


@dataclass(frozen=True)
class EmbedOptions:
    normalize: bool
    dimensions: int | None   # None: the model's full width
    dtype: int               # an embed_pb2.DType value


def decode_int32(data: bytes, name: str) -> np.ndarray:
    """Packed little-endian int32 bytes -> int32 numpy [n] (a writable copy the caller owns)."""
    if len(data) % 4:
        raise InvalidInputError(
            f"{name} must be packed little-endian int32 (a multiple of 4 bytes), got "
            f"{len(data)} bytes")
    return np.frombuffer(data, dtype="<i4").astype(np.int32)


def check_dimensions(dimensions: int, width: int) -> None:
    """InvalidInputError when a request's Matryoshka `dimensions` (0 = full) exceed `width`."""
    if dimensions > width:
        raise InvalidInputError(f"dimensions {dimensions} exceeds the model's width of {width}")


def decode_batch(request: embed_pb2.EmbedRequest, max_request_tokens: int) -> RaggedBatch:
    """The request's token ids as a RaggedBatch whose layout has been checked.

    Checks what needs no model: non-empty, a valid ragged layout (the same checks and
    messages as `RaggedBatch.from_arrays`, done in numpy: a few µs instead of tens), the
    per-request token limit. The engine's own `validate` (vocabulary, sequence length) comes
    after. The tensors share memory with numpy arrays this function made.
    """
    if not request.input_ids and len(request.cu_seqlens) <= 4:
        raise InvalidInputError("empty request: no sequences to embed")
    input_ids = decode_int32(request.input_ids, "input_ids")
    cu_seqlens = decode_int32(request.cu_seqlens, "cu_seqlens")
    if input_ids.size > max_request_tokens:
        raise InvalidInputError(
            f"request carries {input_ids.size} tokens, more than this server's per-request "
            f"limit of {max_request_tokens}; split it into smaller requests")
    if cu_seqlens.size < 2:
        raise InvalidInputError("cu_seqlens needs at least two entries (one sequence)")
    if cu_seqlens.size <= 64:  # few sequences (most requests): Python ints beat numpy calls
        cu = cu_seqlens.tolist()
        lengths = [b - a for a, b in zip(cu[:-1], cu[1:])]
        first, last, longest = cu[0], cu[-1], max(lengths)
        short = next((i for i, n in enumerate(lengths) if n <= 0), None)
    else:
        diffs = np.diff(cu_seqlens.astype(np.int64))  # int32 differences could wrap around
        lengths = diffs.tolist()
        first, last, longest = int(cu_seqlens[0]), int(cu_seqlens[-1]), int(diffs.max())
        short = int((diffs <= 0).argmax()) if bool((diffs <= 0).any()) else None
    if first != 0:
        raise InvalidInputError(f"cu_seqlens must start at 0, not {first}")
    if short is not None:
        raise InvalidInputError(
            f"cu_seqlens must be strictly increasing: sequence {short} has length "
            f"{lengths[short]}")
    if last != input_ids.size:
        raise InvalidInputError(
            f"cu_seqlens ends at {last} but input_ids holds {input_ids.size} tokens")
    return RaggedBatch(input_ids=torch.from_numpy(input_ids),
                       cu_seqlens=torch.from_numpy(cu_seqlens), max_seqlen=longest)


def decode_options(request: embed_pb2.EmbedRequest, width: int, default_normalize: bool
                   ) -> EmbedOptions:
    """Normalisation, Matryoshka dimensions (1..width, 0 = full) and output dtype."""
    if request.dtype not in _WIRE_VIEWS:
        raise InvalidInputError(
            f"dtype {request.dtype} is not one of FLOAT32 (0), FLOAT16 (1), BFLOAT16 (2)")
    check_dimensions(request.dimensions, width)
    normalize = request.normalize if request.HasField("normalize") else default_normalize
    return EmbedOptions(normalize=normalize, dimensions=request.dimensions or None,
                        dtype=request.dtype)


def encode_embeddings(rows: torch.Tensor, options: EmbedOptions, prompt_tokens: int
                      ) -> embed_pb2.EmbedResponse:
    """Pooled rows float32 [B, D] -> EmbedResponse with little-endian [B, d] of options.dtype."""
    out = postprocess(rows, options.normalize, options.dimensions)
    cast, view = _WIRE_VIEWS[options.dtype]
    if cast is torch.int16:
        array = out.to(torch.bfloat16).contiguous().view(torch.int16).numpy()
    elif out.dtype is cast:
        array = out.numpy()  # float32 rows: no cast; tobytes() below is the one copy
    else:
        array = out.to(cast).numpy()
    return embed_pb2.EmbedResponse(
        embeddings=array.astype(view, copy=False).tobytes(),  # C order, whatever the strides
        shape=list(out.shape),
        dtype=options.dtype,
        prompt_tokens=prompt_tokens,
    )


def decode_embeddings(response: embed_pb2.EmbedResponse) -> np.ndarray:
    """EmbedResponse -> float32 numpy [B, d] (for clients and tests)."""
    if response.dtype == embed_pb2.BFLOAT16:
        bits = np.frombuffer(response.embeddings, dtype="<u2").astype(np.uint32) << 16
        array = bits.view(np.float32)
    elif response.dtype == embed_pb2.FLOAT16:
        array = np.frombuffer(response.embeddings, dtype="<f2").astype(np.float32)
    else:
        array = np.frombuffer(response.embeddings, dtype="<f4").astype(np.float32)
    return array.reshape(tuple(response.shape))
