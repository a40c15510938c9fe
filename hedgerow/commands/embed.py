"""`hedgerow embed TEXT...`: embed texts with a model directory in this process, print JSON.

With no TEXT arguments the texts are read from standard input, one per line (a line's ending,
`\n` or `\r\n`, is not part of its text; an empty line is an error naming it). Owns the
command's settings, reading the texts, batching on a token budget in input order, and the JSON
output. Tokenization with the model directory's `tokenizer.json` (templates applied, truncation
off: a text past the model's limit is an error) is hedgerow/tokenizer_file.py's, the math the
engine's; this module knows nothing about servers or gateways.

Output: {"model": NAME, "dimensions": D, "data": [{"index": i, "embedding": [D floats]}, ...]}
"""

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from hedgerow import logs, settings
from hedgerow.errors import HedgerowError, InvalidInputError, ModelLoadError
from hedgerow.settings import setting
from hedgerow.tokenizer_file import check_texts, encode_texts, load_tokenizer

HELP = ("Embed TEXT arguments, or the lines of standard input when none are given, with a "
        "Hugging Face model directory (default: the packaged all-MiniLM-L6-v2) and print the "
        "embeddings as JSON.")

log = logging.getLogger("hedgerow.embed")

NO_TEXTS = "no texts given: pass TEXT arguments, or pipe texts in, one per line"


@dataclass(frozen=True)
class EmbedSettings:
    model: Path | None = setting(
        None,
        "Hugging Face model directory (config.json, safetensors, tokenizer.json). Unset uses "
        "the packaged all-MiniLM-L6-v2.",
        unit="path",
    )
    device: str = setting("cpu", "Where the engine runs: `cpu`, `cuda` or `cuda:N`.")
    dtype: str = setting(
        "float32",
        "Compute dtype. float32 is exact; bfloat16 halves weight memory and, on a CPU with "
        "native bfloat16, runs faster; auto picks as `hedgerow server` does (a probe at load, "
        "which costs a second load of the model).",
        choices=("float32", "bfloat16", "auto"),
    )
    normalize: bool | None = setting(
        None,
        "L2-normalise each embedding. Unset follows the model (sentence-transformers "
        "Normalize module; normalised when the directory does not say).",
    )
    dimensions: int | None = setting(
        None,
        "Keep only the first N dimensions (Matryoshka), before normalising. Unset keeps all.",
        unit="dimensions", minimum=1,
    )
    input_type: str | None = setting(
        None,
        "Apply the model's prompt template for this kind of input (the `prompts` of "
        "config_sentence_transformers.json; a model with no template for it gets none); unset "
        "applies none.",
        choices=("query", "document"),
    )
    max_batch_tokens: int = setting(
        8192,
        "Token budget of one forward pass; texts are packed in order up to it. Larger "
        "batches use more memory (activations grow with tokens) for a little more speed.",
        unit="tokens", minimum=1,
    )
    log_level: str = setting("info", "Log verbosity (on stderr; stdout carries only the JSON).",
                             choices=logs.LOG_LEVELS)
    log_format: str = logs.format_setting()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, EmbedSettings)
    parser.add_argument("texts", nargs="*", metavar="TEXT",
                        help="texts to embed; none reads one text per line from stdin")


def read_lines(stream) -> list[str]:
    """One text per line of `stream`, without its line ending; InvalidInputError for an
    empty line (naming it), for no lines, or for a stream that is a terminal (nothing was
    piped in)."""
    if stream.isatty():
        raise InvalidInputError(NO_TEXTS)
    texts = []
    for number, line in enumerate(stream, start=1):
        text = line.removesuffix("\n").removesuffix("\r")
        if not text:
            raise InvalidInputError(f"line {number} of standard input is empty; give one text "
                                    "per line")
        texts.append(text)
    if not texts:
        raise InvalidInputError(NO_TEXTS)
    return texts


def batches(sequences: list[list[int]], max_batch_tokens: int) -> list[list[list[int]]]:
    """Cut sequences in order into runs of at most `max_batch_tokens` tokens (a longer
    sequence runs alone)."""
    out: list[list[list[int]]] = [[]]
    used = 0
    for seq in sequences:
        if out[-1] and used + len(seq) > max_batch_tokens:
            out.append([])
            used = 0
        out[-1].append(seq)
        used += len(seq)
    return out


def run(args: argparse.Namespace) -> int:
    config: EmbedSettings = settings.load(EmbedSettings, args)
    logs.configure(config.log_level, config.log_format)
    texts: list[str] = list(args.texts) or read_lines(sys.stdin)
    check_texts(texts)  # before loading anything: a bad call fails in milliseconds

    import numpy as np
    import torch

    from hedgerow.defaults import default_model_path
    from hedgerow.engine.batch import RaggedBatch
    from hedgerow.engine.engine import Engine
    from hedgerow.engine.pooling import postprocess
    from hedgerow.progress import bar

    directory = config.model if config.model is not None else default_model_path()
    # task "embed": a cross-encoder is refused at load, naming its task (it embeds nothing)
    engine = Engine.load(directory, device=config.device, dtype=config.dtype, task="embed")
    info = engine.info
    if config.dimensions is not None and config.dimensions > info.dimensions:
        raise InvalidInputError(f"dimensions {config.dimensions} (--dimensions or "
                                f"HEDGEROW_DIMENSIONS) is larger than the model's "
                                f"{info.dimensions}")
    tokenizer = load_tokenizer(Path(directory))
    prefix = info.templates.get(config.input_type, "") if config.input_type else ""
    sequences = encode_texts(tokenizer, texts, prefix, info.max_tokens, info.vocab_size)
    normalize = info.normalize if config.normalize is None else config.normalize

    rows = []
    tokens = sum(len(s) for s in sequences)
    with (logs.step(log, "embed", texts=len(texts), tokens=tokens),
          bar(tokens, "embedding", unit="token") as progress):
        for chunk in batches(sequences, config.max_batch_tokens):
            batch = RaggedBatch.from_sequences(chunk)
            engine.validate(batch)
            rows.append(engine.step(batch).synchronize())
            progress.update(batch.num_tokens)
    embeddings = postprocess(torch.cat(rows).numpy(), normalize, config.dimensions)
    broken = np.flatnonzero(~np.isfinite(embeddings).all(axis=1))
    if len(broken):
        raise ModelLoadError(
            f"the model produced NaN or infinite values (first for text {int(broken[0])}): its "
            f"weights are broken, or overflow in {config.dtype}")
    write_output({
        "model": info.name,
        "dimensions": embeddings.shape[1],
        "data": [{"index": i, "embedding": row} for i, row in enumerate(embeddings.tolist())],
    })
    return 0


def write_output(document: dict) -> None:
    """JSON to stdout; a reader that went away is no error, a failed write is one line."""
    try:
        json.dump(document, sys.stdout, allow_nan=False)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as error:
        raise HedgerowError(f"cannot write the output: {error.strerror}") from None
