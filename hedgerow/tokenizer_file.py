"""A model directory's `tokenizer.json`, turning texts into token ids outside the gateway.

Owns loading the tokenizer (truncation and padding off, as the gateway has them) and encoding
texts with a template prefix, with a specific message for an empty text, one past the model's
limit, or an id the model does not know, and query-document pairs with the tokenizer's pair
template, as the gateway's rerank routes encode them (token type ids kept, nothing cut). One
reader for `hedgerow embed`, the server's probe and golden sets, and `hedgerow guard record`,
so a text becomes the same ids in each. The
`tokenizers` package is imported when a tokenizer is loaded. Knows nothing about models.
"""

from pathlib import Path
from typing import Sequence

from hedgerow.errors import InvalidInputError, ModelLoadError

TOKENIZER_FILE = "tokenizer.json"


def load_tokenizer(directory: Path):
    """The directory's tokenizer.json with truncation and padding off."""
    from tokenizers import Tokenizer

    path = directory / TOKENIZER_FILE
    if not path.is_file():
        raise ModelLoadError(f"no {TOKENIZER_FILE} in {directory}")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception for a malformed file
        raise ModelLoadError(f"cannot read {path}: {error}") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def check_texts(texts: Sequence[str]) -> None:
    """InvalidInputError for an empty list or an empty (or blank) text."""
    if not texts:
        raise InvalidInputError("no texts given")
    for i, text in enumerate(texts):
        if not text:  # whitespace alone is embedded as the tokenizer encodes it, as the API does
            raise InvalidInputError(f"text {i} is empty")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # undecodable argv bytes arrive as lone surrogates
            raise InvalidInputError(f"text {i} is not valid UTF-8") from None


def encode_texts(tokenizer, texts: Sequence[str], prefix: str, max_tokens: int,
                 vocab_size: int) -> list[list[int]]:
    """Token ids of `prefix + text` for each text; InvalidInputError for an empty text, one
    longer than `max_tokens`, or a token id outside [0, vocab_size)."""
    check_texts(texts)
    encodings = tokenizer.encode_batch([prefix + text for text in texts])
    ids = [encoding.ids for encoding in encodings]
    for i, seq in enumerate(ids):
        if not seq:
            raise InvalidInputError(f"text {i} tokenizes to no tokens")
        if len(seq) > max_tokens:
            raise InvalidInputError(
                f"text {i} has {len(seq)} tokens; the model accepts at most {max_tokens} tokens "
                f"per text")
        outside = [t for t in seq if not 0 <= t < vocab_size]
        if outside:
            raise InvalidInputError(
                f"text {i} has token id {outside[0]}, outside the model's vocabulary "
                f"[0, {vocab_size}): tokenizer.json does not match the model")
    return ids


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]], max_tokens: int, vocab_size: int
                 ) -> tuple[list[list[int]], list[list[int]]]:
    """(token ids, token type ids) of each (query, document) pair with the tokenizer's pair
    template ([CLS] q [SEP] d [SEP]; types 0 the query's, 1 the document's where the tokenizer
    has segments); InvalidInputError for an empty text, a pair longer than `max_tokens` (golden
    pairs are never cut: a cut pair is another pair) or an id outside [0, vocab_size)."""
    if not pairs:
        raise InvalidInputError("no pairs given")
    for i, (query, document) in enumerate(pairs):
        if not query or not document:
            empty = "query" if not query else "document"
            raise InvalidInputError(f"pair {i} has an empty {empty}")
    encodings = tokenizer.encode_batch([tuple(pair) for pair in pairs])
    ids, types = [], []
    for i, encoding in enumerate(encodings):
        if len(encoding.ids) > max_tokens:
            raise InvalidInputError(
                f"pair {i} has {len(encoding.ids)} tokens; the model reads a query and a "
                f"document together in at most {max_tokens}")
        outside = [t for t in encoding.ids if not 0 <= t < vocab_size]
        if outside:
            raise InvalidInputError(
                f"pair {i} has token id {outside[0]}, outside the model's vocabulary "
                f"[0, {vocab_size}): tokenizer.json does not match the model")
        ids.append(list(encoding.ids))
        types.append(list(encoding.type_ids))
    return ids, types
