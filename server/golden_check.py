"""The server's side of the guard: read its golden set, embed the texts, measure the cosine.

`read_golden_set` reads `--golden-set` once at start (a bad file stops the server before it
loads the model, with the reason). `check` embeds the golden texts as a request would arrive
(the golden set's input type's template, then the model's tokenizer) through the engine and
reports the smallest cosine to the recorded vectors, or, when the texts cannot be embedded by
this model (no tokenizer, a text too long, another width), that problem: a golden set that
does not fit the model is a space that does not match, not a reason to stop. Whether the
result matches is the operator's judgement (hedgerow/warmup_report.py's `space_verdict`, with
the EmbeddingService's minimum). Knows nothing about gRPC or Kubernetes.
"""

from pathlib import Path
from typing import Any

from hedgerow import golden_set
from hedgerow.errors import ConfigError, InvalidInputError
from hedgerow.golden_set import GoldenSet
from hedgerow.server import space
from hedgerow.tokenizer_file import TOKENIZER_FILE, encode_texts
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


def check(engine: Any, text_tokenizer: Any, golden: GoldenSet) -> GoldenCheck:
    """Embed `golden`'s texts with `engine` (blocks; steps the engine) and measure them."""
    info = engine.info

    def problem(text: str) -> GoldenCheck:
        return GoldenCheck(fingerprint=golden.fingerprint, texts=len(golden.texts), problem=text)

    if golden.dimensions != info.dimensions:
        return problem(f"its vectors have {golden.dimensions} dimensions, this model "
                       f"{info.dimensions}")
    if text_tokenizer is None:
        return problem(f"the model directory has no {TOKENIZER_FILE} to tokenize its texts")
    prefix = info.templates.get(golden.input_type, "") if golden.input_type else ""
    try:
        sequences = encode_texts(text_tokenizer, golden.texts, prefix, info.max_tokens,
                                 info.vocab_size)
    except InvalidInputError as error:
        return problem(str(error))
    if golden.vectors is None:
        return GoldenCheck(fingerprint=golden.fingerprint, texts=len(golden.texts))
    vectors = space.embed_sequences(engine, sequences)
    return GoldenCheck(fingerprint=golden.fingerprint, texts=len(golden.texts),
                       min_cosine=golden_set.min_cosine(vectors.tolist(), golden.vectors))

