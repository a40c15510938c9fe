"""The server's side of the guard: read its golden set, run it through the engine, measure.

`read_golden_set` reads `--golden-set` once at start (a bad file stops the server before it
loads the model, with the reason). `check` runs the golden set as requests would arrive, by
the model's task: an embedding model embeds its texts (the golden set's input type's template,
then the model's tokenizer) and reports the smallest cosine to the recorded vectors; a
cross-encoder scores its query-document pairs (the tokenizer's pair template) and reports how
far the scores moved from the recorded ones and whether each query kept its order
(golden_set.score_drift); a sparse model weighs its texts and reports the smallest cosine of
the sparse vectors over the union of their indices. A golden set that does not fit the model
(recorded for another task, no tokenizer, a text too long, another width) is reported as
that problem: a space that does not match, not a reason to stop. Whether the result matches is
the operator's judgement (hedgerow/warmup_report.py's `space_verdict`, with the
EmbeddingService's minimum cosine and largest score difference). Knows nothing about gRPC or
Kubernetes.
"""

from pathlib import Path
from typing import Any

from hedgerow import golden_set
from hedgerow.errors import ConfigError, InvalidInputError
from hedgerow.golden_set import GoldenSet
from hedgerow.server import space
from hedgerow.server.sparse import special_ids
from hedgerow.tokenizer_file import TOKENIZER_FILE, encode_pairs, encode_texts
from hedgerow.warmup_report import GoldenCheck

def read_golden_set(path: Path) -> GoldenSet:
    """The golden set in `path` (the bare document or its ConfigMap); ConfigError naming it."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"--golden-set {path}: cannot read it: {error.strerror}") from None
    try:
        return golden_set.parse(raw, f"--golden-set {path}")
    except golden_set.GoldenSetError as error:
        raise ConfigError(str(error)) from None


def task_problem(golden: GoldenSet, model: str, task: str) -> str | None:
    """Why `golden` cannot be checked against model `model` of task `task`, or None."""
    if golden.task == task:
        return None
    return (f"it was recorded for task {golden.task} ({golden_set.HOLDS[golden.task]}); model "
            f"{model} serves task {task}: record the golden set from this model (hedgerow guard "
            "record)")


def check(engine: Any, text_tokenizer: Any, golden: GoldenSet, directory: Path) -> GoldenCheck:
    """Run `golden` through `engine`, loaded from `directory` (blocks; steps the engine), and
    measure the answers against it."""
    info = engine.info

    def result(**measured: Any) -> GoldenCheck:
        return GoldenCheck(fingerprint=golden.fingerprint, texts=golden.size, task=golden.task,
                           **measured)

    mismatch = task_problem(golden, info.name, info.task)
    if mismatch:
        return result(problem=mismatch)
    if golden.task == "embed" and golden.dimensions != info.dimensions:
        return result(problem=f"its vectors have {golden.dimensions} dimensions, this model "
                              f"{info.dimensions}")
    if text_tokenizer is None:
        return result(problem=f"the model directory has no {TOKENIZER_FILE} to tokenize its "
                              "texts")
    try:
        if golden.task == "rerank":
            ids, types = encode_pairs(text_tokenizer, golden.pairs, info.max_tokens,
                                      info.vocab_size)
        else:
            prefix = info.templates.get(golden.input_type, "") if golden.input_type else ""
            ids = encode_texts(text_tokenizer, golden.texts, prefix, info.max_tokens,
                               info.vocab_size)
    except InvalidInputError as error:
        return result(problem=str(error))
    if not golden.measured:
        return result()
    if golden.task == "rerank":
        scores = space.score_pairs(engine, ids, types).tolist()
        delta, flipped = golden_set.score_drift(scores, golden.scores, golden.pairs)
        return result(max_score_delta=delta, max_flipped_gap=flipped)
    if golden.task == "sparse":
        weights = space.sparse_vectors(engine, ids, special_ids(directory))
        return result(min_cosine=golden_set.min_sparse_cosine(weights, golden.sparse_vectors))
    vectors = space.embed_sequences(engine, ids)
    return result(min_cosine=golden_set.min_cosine(vectors.tolist(), golden.vectors))
