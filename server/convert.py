"""Wire messages to arrays and back: the only place that knows the byte layouts.

In: `EmbedRequest.input_ids` int32 little-endian [T] and `cu_seqlens` int32 little-endian [B+1]
become a checked `WireBatch` (numpy arrays) plus the request's options. Out: float32 [B, D]
rows, postprocessed (Matryoshka truncation, L2 normalisation) and cast to the asked dtype,
become the bytes of an EmbedResponse, written straight from the rows (no message object in
between), with the answer's constant tail (the space's fingerprint) appended as bytes written
once at start. Everything is numpy: on a request's few rows a torch call costs more than the
arithmetic. Knows nothing about scheduling or gRPC status codes: problems are raised as
InvalidInputError with a message for the caller.
"""

import struct
from dataclasses import dataclass

import numpy as np

from hedgerow.engine.pooling import postprocess
from hedgerow.errors import InvalidInputError
from hedgerow.wire import embed_pb2

# The element type each wire dtype is written as (bfloat16 travels as its 16-bit pattern).
_WIRE_TYPES = {embed_pb2.FLOAT32: "<f4", embed_pb2.FLOAT16: "<f2", embed_pb2.BFLOAT16: "<u2"}


@dataclass(frozen=True)
class WireBatch:
    """A request's sequences in the ragged layout, checked: a valid layout under the limit."""

    input_ids: np.ndarray        # int32 [T]
    cu_seqlens: tuple[int, ...]  # [B+1]
    lengths: list[int]           # [B]

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.size)

    @property
    def num_seqs(self) -> int:
        return len(self.lengths)

    @property
    def max_seqlen(self) -> int:
        return max(self.lengths)


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
    return np.frombuffer(bytearray(data), dtype="<i4")


def check_dimensions(dimensions: int, width: int) -> None:
    """InvalidInputError when a request's Matryoshka `dimensions` (0 = full) exceed `width`."""
    if dimensions > width:
        raise InvalidInputError(f"dimensions {dimensions} exceeds the model's width of {width}")


def decode_batch(request: embed_pb2.EmbedRequest, max_request_tokens: int) -> WireBatch:
    """The request's token ids as a WireBatch whose layout has been checked.

    Checks what needs no model: non-empty, a valid ragged layout (the same checks and
    messages as `RaggedBatch.from_arrays`), the per-request token limit. The model's own
    checks (`engine.batch.check_tokens`: vocabulary, sequence length) come after. The offsets
    are read as Python ints: on a request's few sequences each numpy call costs more (its
    code is cold between requests) than the arithmetic.
    """
    if not request.input_ids and len(request.cu_seqlens) <= 4:
        raise InvalidInputError("empty request: no sequences to embed")
    input_ids = decode_int32(request.input_ids, "input_ids")
    raw_cu = request.cu_seqlens
    if len(raw_cu) % 4:
        decode_int32(raw_cu, "cu_seqlens")  # raises, naming the field
    cu = struct.unpack(f"<{len(raw_cu) // 4}i", raw_cu)
    if input_ids.size > max_request_tokens:
        raise InvalidInputError(
            f"request carries {input_ids.size} tokens, more than this server's per-request "
            f"limit of {max_request_tokens}; split it into smaller requests")
    if len(cu) < 2:
        raise InvalidInputError("cu_seqlens needs at least two entries (one sequence)")
    lengths = [b - a for a, b in zip(cu[:-1], cu[1:])]
    first, last = cu[0], cu[-1]
    short = next((i for i, n in enumerate(lengths) if n <= 0), None)
    if first != 0:
        raise InvalidInputError(f"cu_seqlens must start at 0, not {first}")
    if short is not None:
        raise InvalidInputError(
            f"cu_seqlens must be strictly increasing: sequence {short} has length "
            f"{lengths[short]}")
    if last != input_ids.size:
        raise InvalidInputError(
            f"cu_seqlens ends at {last} but input_ids holds {input_ids.size} tokens")
    return WireBatch(input_ids=input_ids, cu_seqlens=cu, lengths=lengths)


def decode_options(request: embed_pb2.EmbedRequest, width: int, default_normalize: bool
                   ) -> EmbedOptions:
    """Normalisation, Matryoshka dimensions (1..width, 0 = full) and output dtype."""
    if request.dtype not in _WIRE_TYPES:
        raise InvalidInputError(
            f"dtype {request.dtype} is not one of FLOAT32 (0), FLOAT16 (1), BFLOAT16 (2)")
    check_dimensions(request.dimensions, width)
    normalize = request.normalize if request.HasField("normalize") else default_normalize
    return EmbedOptions(normalize=normalize, dimensions=request.dimensions or None,
                        dtype=request.dtype)


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values -> their bfloat16 bit patterns, uint16, rounded to nearest even as
    torch rounds (NaN stays NaN, infinities and overflow are infinite)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16)
    out = rounded.astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        out[nan] = 0x7FC0  # rounding could carry a NaN's payload into the exponent
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def space_field(fingerprint: str) -> bytes:
    """EmbedResponse's `space` (field 5) as wire bytes: computed once, appended to every answer."""
    data = fingerprint.encode()
    return b"\x2a" + _varint(len(data)) + data if data else b""


def timing_field(queue_us: int, inference_us: int) -> bytes:
    """EmbedResponse's `timing` (field 6, a Timing message) as wire bytes."""
    inner = b""
    if queue_us:
        inner += b"\x08" + _varint(queue_us)                            # 1: queue_us
    if inference_us:
        inner += b"\x10" + _varint(inference_us)                        # 2: inference_us
    return b"\x32" + _varint(len(inner)) + inner if inner else b""


def encode_embeddings(rows: np.ndarray, options: EmbedOptions, prompt_tokens: int,
                      space: bytes = b"", timing: bytes = b"") -> bytes:
    """Pooled rows float32 [B, D] -> the bytes of an EmbedResponse holding little-endian
    [B, d] of options.dtype; `space` is `space_field`'s bytes and `timing` `timing_field`'s,
    appended as they are.

    The fields are written by hand (protobuf's wire format: tag, length, payload) so that the
    embedding bytes are copied once, from the rows into the answer.
    """
    out = postprocess(rows, options.normalize, options.dimensions)
    if options.dtype == embed_pb2.BFLOAT16:
        values = bfloat16_bits(out)
    else:
        values = np.ascontiguousarray(out, dtype=_WIRE_TYPES[options.dtype])
    count, width = out.shape
    shape = _varint(count) + _varint(width)
    head = b"\x0a" + _varint(values.nbytes)                            # 1: embeddings
    tail = b"\x12" + _varint(len(shape)) + shape                       # 2: shape, packed
    if options.dtype:
        tail += b"\x18" + _varint(options.dtype)                       # 3: dtype
    if prompt_tokens:
        tail += b"\x20" + _varint(prompt_tokens)                       # 4: prompt_tokens
    return b"".join((head, memoryview(values).cast("B"), tail, space, timing))  # 5, 6


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
