"""This server's embedding space: the facts that decide its vectors, the probe set embedded and
rounded, and the fingerprint they make (its format is hedgerow/space.py's).

The facts: architecture and the model's config as the engine reads it, a digest of the weight
files and of tokenizer.json, the templates, pooling, the normalisation default, the width, the
longest sequence and the compute dtype; for sparse vectors (task sparse) their index space, the
tokenizer's vocabulary (the token ids are the indices); for a directory `hedgerow fetch-model`
fetched, also the repository and commit it came from (hedgerow/model_source.py). The probe:
hedgerow's fixed probe texts tokenized with the directory's tokenizer.json (a directory without
one, as the benchmarks' random-weight models may be, is probed with fixed token ids instead),
embedded through the engine in fixed batches, normalised, each vector rounded to the sides of
PROBE_PLANES fixed hyperplanes. Under `--dtype float8` each batch is widened with filler to
FP8_MIN_TOKENS tokens, so the probe and the golden set measure the FP8 path that wide batches
take (bulk traffic), not the bf16 one of a short batch.
`measure` runs once, on the engine thread (it steps the engine), before the server serves;
the weights' digest is started before the engine loads (`start_weights_digest`) and overlaps it.
`embed_sequences` is also how the golden set and `hedgerow guard record` embed their texts,
`score_pairs` how they score a cross-encoder's pairs and `sparse_vectors` how they weigh a
sparse model's texts, so an answer is computed the same way everywhere (the same rows, folding
and lexical weights as the Rerank and EmbedSparse calls). Knows nothing about gRPC or requests.
"""

import dataclasses
import hashlib
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hedgerow import model_source, space
from hedgerow.engine.batch import RaggedBatch
from hedgerow.engine.checkpoint import weight_files
from hedgerow.engine.dtype_choice import FLOAT8, FP8_MIN_TOKENS, probe_batch
from hedgerow.engine.engine import fold_segments
from hedgerow.engine.pooling import postprocess
from hedgerow.errors import InvalidInputError, ModelLoadError
from hedgerow.server import sparse
from hedgerow.tokenizer_file import TOKENIZER_FILE, encode_texts, load_tokenizer

STEP_TOKENS = 2048  # token budget of one step while probing (a fixed cut: the same batches)
_CHUNK_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Space:
    fingerprint: str
    facts: dict[str, Any]  # what the fingerprint's first part digests (shown on /warmup)


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def weights_digest(directory: Path) -> str:
    """sha256 over the weight files' names and digests (about a second per GB read)."""
    listing = "\n".join(f"{path.name} {file_digest(path)}" for path in weight_files(directory))
    return hashlib.sha256(listing.encode()).hexdigest()


def start_weights_digest(directory: Path) -> Future[str]:
    """`weights_digest(directory)`, computed on a thread of its own from now on.

    Started before the engine loads, it overlaps the load (reading and hashing release the
    GIL) instead of reading every weight file a second time after it. A daemon thread: a load
    that fails does not wait for the hashing to finish before the process exits.
    """
    future: Future[str] = Future()

    def run() -> None:
        try:
            future.set_result(weights_digest(directory))
        except BaseException as error:  # handed to whoever asks for the result
            future.set_exception(error)

    threading.Thread(target=run, name="hedgerow-weights-digest", daemon=True).start()
    return future


def tokenizer(directory: Path):
    """The directory's tokenizer, or None when it has no tokenizer.json."""
    if not (directory / TOKENIZER_FILE).is_file():
        return None
    return load_tokenizer(directory)


def facts(engine: Any, directory: Path, weights: str) -> dict[str, Any]:
    """What decides this engine's vectors, as JSON-ready values; `weights` is the directory's
    `weights_digest`."""
    info = engine.info
    tokenizer_path = directory / TOKENIZER_FILE
    known = {
        "architecture": info.architecture,
        "config": dataclasses.asdict(engine.config),
        "weights": weights,
        "tokenizer": file_digest(tokenizer_path) if tokenizer_path.is_file() else None,
        "templates": dict(sorted(info.templates.items())),
        "pooling": info.pooling,
        "normalize": info.normalize,
        "dimensions": info.dimensions,
        "max_tokens": info.max_tokens,
        "dtype": info.dtype,
    }
    if info.task == "sparse":  # the indices are token ids, named by the tokenizer's digest
        known["index_space"] = {"kind": "vocabulary", "size": info.vocab_size}
    source = model_source.read(directory)  # a directory `hedgerow fetch-model` fetched
    if source is not None:
        known["source"] = source.label  # another revision is another space
    return known


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 of uint64 `x`: fixed pseudo-random bits that no library upgrade changes."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def plane_signs(count: int, width: int) -> np.ndarray:
    """`count` fixed hyperplane normals of ±1 entries, float64 [count, width]."""
    bits = _splitmix64(np.arange(count * width, dtype=np.uint64)) >> np.uint64(63)
    return np.where(bits.reshape(count, width) == 1, 1.0, -1.0)


def round_to_planes(vectors: np.ndarray) -> bytes:
    """Each row of float [N, D] rounded to the sides of the PROBE_PLANES hyperplanes it lies
    on: N * PROBE_PLANES bits, packed. A bit flips with probability angle/pi when its vector
    turns by `angle`, so noise far below the vectors' own differences leaves them alone."""
    planes = plane_signs(space.PROBE_PLANES, vectors.shape[1])
    return np.packbits(vectors.astype(np.float64) @ planes.T > 0).tobytes()


def _batches(sequences: Sequence[Sequence[int]]) -> list[list[Sequence[int]]]:
    """`sequences` in order, cut into batches of at most STEP_TOKENS tokens (a longer sequence
    alone): fixed cuts, so the same texts always run in the same batches."""
    batches, batch, used = [], [], 0
    for sequence in sequences:
        if batch and used + len(sequence) > STEP_TOKENS:
            batches.append(batch)
            batch, used = [], 0
        batch.append(sequence)
        used += len(sequence)
    return batches + [batch] if batch else batches


def _rows(engine: Any, batch: Sequence[Sequence[int]], validate: bool = True) -> np.ndarray:
    ragged = RaggedBatch.from_sequences(batch)
    if validate:
        engine.validate(ragged)
    if engine.info.dtype == FLOAT8:  # the FP8 path of wide batches, bulk traffic's
        ragged = RaggedBatch.from_sequences(_widened(batch, engine.info.max_tokens))
    rows = engine.step(ragged).synchronize().numpy()[:len(batch)]
    return np.asarray(rows, np.float32)


def _widened(batch: Sequence[Sequence[int]], longest: int) -> list[Sequence[int]]:
    """`batch`, then filler sequences (its own ids cycled, at most `longest` tokens each) up to
    FP8_MIN_TOKENS tokens. FP8 quantizes every row on its own, so the filler moves no real row."""
    ids = [token for sequence in batch for token in sequence]
    used, filler = len(ids), []
    while used < FP8_MIN_TOKENS:
        length = min(longest, FP8_MIN_TOKENS - used)
        filler.append((ids * (length // len(ids) + 1))[:length])
        used += length
    return [*batch, *filler]


def embed_sequences(engine: Any, sequences: Sequence[Sequence[int]]) -> np.ndarray:
    """Token-id sequences -> their normalised vectors, float32 [N, D], in order, embedded in
    batches cut at STEP_TOKENS (a longer sequence runs alone). Steps the engine: run it on the
    thread that owns the device."""
    rows = [_rows(engine, batch) for batch in _batches(sequences)]
    return postprocess(np.concatenate(rows), True, None)


def score_pairs(engine: Any, sequences: Sequence[Sequence[int]],
                token_types: Sequence[Sequence[int]]) -> np.ndarray:
    """A cross-encoder's (task rerank) raw score of each pair, float32 [N], from its token ids
    and token type ids (tokenizer_file.encode_pairs: ids already checked against the model),
    the segments folded into the ids as the Rerank call folds them. Steps the engine."""
    info = engine.info
    if info.token_types > 1:
        sequences = [fold_segments(np.asarray(ids, np.int32), np.asarray(types, np.int32),
                                   info.vocab_size).tolist()
                     for ids, types in zip(sequences, token_types)]
    # folded ids lie past the vocabulary by design: encode_pairs checked the unfolded ones
    rows = [_rows(engine, batch, validate=False) for batch in _batches(sequences)]
    return np.concatenate(rows)[:, 0]


def sparse_vectors(engine: Any, sequences: Sequence[Sequence[int]],
                   excluded: frozenset[int]) -> list[dict[int, float]]:
    """A sparse model's (task sparse) vector of each sequence, {token id: weight} with ids
    ascending, as EmbedSparse answers them (server/sparse.py: SPLADE's non-zero vocabulary
    entries, or the largest lexical weight of each id, the ids in `excluded` and zero weights
    left out). Steps the engine."""
    out = []
    for batch in _batches(sequences):
        rows = _rows(engine, batch)
        cu = np.cumsum([0, *map(len, batch)])
        ids = np.concatenate([np.asarray(s, np.int32) for s in batch])
        for indices, values in sparse.sparse_vectors(engine.info.pooling, ids, cu.tolist(),
                                                     rows, excluded):
            out.append(dict(zip(indices.tolist(), values.tolist())))
    return out


def probe_sequences(engine: Any, text_tokenizer: Any) -> list[list[int]]:
    """The probe set's token ids: the probe texts (cut to the model's longest sequence), or,
    without a tokenizer, fixed ordinary token ids."""
    info = engine.info
    if text_tokenizer is None:
        batch = probe_batch(info.vocab_size, info.max_tokens)
        ids, cu = batch.input_ids.tolist(), batch.cu_seqlens.tolist()
        return [ids[a:b] for a, b in zip(cu[:-1], cu[1:])]
    try:
        encoded = encode_texts(text_tokenizer, space.probe_texts(), "", 1 << 30, info.vocab_size)
    except InvalidInputError as error:
        raise ModelLoadError(f"the probe texts cannot be tokenized for this model: {error}"
                             ) from None
    return [ids[:info.max_tokens] for ids in encoded]


def measure(engine: Any, directory: Path, text_tokenizer: Any,
            weights: Future[str]) -> Space:
    """The space of `engine`, loaded from `directory`, whose `start_weights_digest` is
    `weights` (blocks; steps the engine, then waits for the digest)."""
    vectors = embed_sequences(engine, probe_sequences(engine, text_tokenizer))
    known = facts(engine, directory, weights.result())
    return Space(fingerprint=space.compose(known, round_to_planes(vectors)), facts=known)
