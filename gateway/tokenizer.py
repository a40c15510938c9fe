"""Text to token ids with Hugging Face `tokenizers`, in batch and off the event loop.

Owns tokenization and templating: a template (the input type's prefix) is prepended to each text,
the batch is encoded by the Rust tokenizer in a thread pool so a large request never stalls the
event loop, and sequences longer than the model's limit are rejected with the limit named (or
truncated, when configured). A cross-encoder's query-document pairs are encoded with the
tokenizer's pair template, token type ids kept, the document side cut to fit; a
Qwen3-Reranker's in its prompt instead (hedgerow/reranker_prompt.py). Padding and the tokenizer
file's own truncation are switched off: the wire is ragged. A request of a few short
texts is tokenized inline, since that takes microseconds and a thread hop costs more. Knows nothing
about servers, HTTP or chunking.
"""

import array
import asyncio
import concurrent.futures
import dataclasses
import itertools
import threading
from pathlib import Path

from tokenizers import Tokenizer

from hedgerow.errors import ModelLoadError
from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.text_pieces import TextPieces
from hedgerow.reranker_prompt import SUFFIX, document_part, query_part
from hedgerow.space import probe_texts

# Requests with at most this many characters in all are tokenized on the event loop: tens of
# microseconds, less than handing them to a thread.
INLINE_CHARS = 2048


@dataclasses.dataclass(frozen=True)
class Sequences:
    """A request's sequences in the ragged layout, in plain Python containers: a request holds
    a few sequences, and on those a numpy call costs more than the work.

    input_ids: int32 [T] (`array('i')`, every sequence back to back); lengths: [B] tokens per
    sequence.
    """

    input_ids: array.array
    lengths: list[int]

    @property
    def total_tokens(self) -> int:
        return len(self.input_ids)

    def starts(self) -> list[int]:
        """Cumulative offsets [B+1], 0 first."""
        return list(itertools.accumulate(self.lengths, initial=0))

    def sequence(self, index: int) -> array.array:
        start = sum(self.lengths[:index])
        return self.input_ids[start:start + self.lengths[index]]

    @classmethod
    def from_lists(cls, sequences: list[list[int]]) -> "Sequences":
        # Ids are below the vocabulary size (tokenizer output, or client ids checked first).
        if len(sequences) == 1:
            return cls(array.array("i", sequences[0]), [len(sequences[0])])
        return cls(array.array("i", itertools.chain.from_iterable(sequences)),
                   [len(s) for s in sequences])


def too_long_message(index: int, length: int, max_tokens: int) -> str:
    return (
        f"input[{index}] has {length} tokens; the model accepts at most {max_tokens} tokens per "
        "input. Shorten it, or run the gateway with --truncate to cut long inputs."
    )


@dataclasses.dataclass(frozen=True)
class Pairs:
    """A rerank request's query-document pairs as the tokenizer's pair encoding wrote them
    ([CLS] q [SEP] d [SEP]; or in Qwen3-Reranker's prompt), in the ragged layout: input_ids and
    type_ids int32 [T] (`array('i')`; type 0 the query's tokens, 1 the document's, where the
    tokenizer has segments), lengths [N], and the documents cut to fit the model (their
    indices)."""

    input_ids: array.array
    type_ids: array.array
    lengths: list[int]
    truncated: frozenset[int]

    @property
    def total_tokens(self) -> int:
        return len(self.input_ids)

    def starts(self) -> list[int]:
        return list(itertools.accumulate(self.lengths, initial=0))


def query_too_long_message(length: int, specials: int, max_tokens: int,
                           specials_are: str = "separators") -> str:
    return (f"query has {length} tokens; the model reads a query and a document together in "
            f"at most {max_tokens} tokens ({specials} of them {specials_are}), so a query may "
            f"have at most {max_tokens - specials - 1} (documents are cut to fit, the query "
            "never is). Shorten the query.")


def pair_too_long_message(index: int, length: int, max_tokens: int) -> str:
    return (f"documents[{index}] makes a pair of {length} tokens with the query; the model "
            f"accepts at most {max_tokens}. Shorten it, or let it be cut (leave truncate unset "
            "or true).")


class TextTokenizer:
    """One model's tokenizer, shared by every request of the gateway."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        path = model_dir / "tokenizer.json"
        try:
            self._json = path.read_text(encoding="utf-8")
            self._plain = self._untruncated(self._json)
        except Exception as error:  # OSError, or the bare Exception tokenizers raises on bad JSON
            raise ModelLoadError(f"{path}: cannot load the tokenizer ({error})") from error
        self._pieces = TextPieces(self._plain, probe_texts())
        self._truncating: dict[int, Tokenizer] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="tokenize"
        )

    @staticmethod
    def _untruncated(text: str) -> Tokenizer:
        tokenizer = Tokenizer.from_str(text)
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return tokenizer

    @property
    def vocab_size(self) -> int:
        return self._plain.get_vocab_size(with_added_tokens=True)

    def _truncating_tokenizer(self, max_tokens: int) -> Tokenizer:
        with self._lock:
            tokenizer = self._truncating.get(max_tokens)
            if tokenizer is None:
                tokenizer = self._untruncated(self._json)
                tokenizer.enable_truncation(max_tokens)
                self._truncating[max_tokens] = tokenizer
            return tokenizer

    def encode_sync(
        self, texts: list[str], template: str, max_tokens: int, truncate: bool
    ) -> Sequences:
        """Tokenize `texts` (with `template` prepended) in this thread; see `encode`."""
        if template:
            texts = [template + text for text in texts]
        # encode_batch_fast even for one text: it skips the offsets, a third of the time on a
        # long text, and releases the GIL, which `encode` holds for the whole text.
        if truncate:
            tokenizer = self._truncating_tokenizer(max_tokens)
            ids = [encoding.ids for encoding in tokenizer.encode_batch_fast(texts)]
        else:  # a long text in pieces, in parallel (gateway/text_pieces.py)
            ids = self._pieces.encode(texts)
        sequences = Sequences.from_lists(ids)
        if not truncate:
            first = next((i for i, n in enumerate(sequences.lengths) if n > max_tokens), None)
            if first is not None:
                raise RequestError(
                    too_long_message(first, sequences.lengths[first], max_tokens),
                    param="input",
                    code="context_length_exceeded",
                )
        return sequences

    async def encode(
        self, texts: list[str], *, template: str, max_tokens: int, truncate: bool
    ) -> Sequences:
        """Tokenize (in the thread pool unless tiny); RequestError for an input over `max_tokens`.

        Returns the ragged int32 ids of every text in input order, special tokens included.
        """
        if sum(len(text) for text in texts) + len(template) * len(texts) <= INLINE_CHARS:
            return self.encode_sync(texts, template, max_tokens, truncate)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, self.encode_sync, texts, template, max_tokens, truncate
        )

    def encode_pairs_sync(self, query: str, documents: list[str], max_tokens: int,
                          truncate: bool) -> Pairs:
        """Each (query, document) pair with the tokenizer's pair template, the document side
        cut to `max_tokens` when `truncate` (else a RequestError names the first pair that is
        too long); a query that leaves no room for a document is a RequestError either way."""
        specials = self._plain.num_special_tokens_to_add(True)
        query_length = len(self._plain.encode(query, add_special_tokens=False).ids)
        if query_length + specials + 1 > max_tokens:
            raise RequestError(query_too_long_message(query_length, specials, max_tokens),
                               param="query", code="context_length_exceeded")
        tokenizer = self._pair_tokenizer(max_tokens) if truncate else self._plain
        encodings = tokenizer.encode_batch_fast([(query, document) for document in documents])
        ids, types, lengths, truncated = array.array("i"), array.array("i"), [], set()
        for index, encoding in enumerate(encodings):
            if len(encoding.ids) > max_tokens:
                raise RequestError(pair_too_long_message(index, len(encoding.ids), max_tokens),
                                   param="documents", code="context_length_exceeded")
            if encoding.overflowing:
                truncated.add(index)
            ids.extend(encoding.ids)
            types.extend(encoding.type_ids)
            lengths.append(len(encoding.ids))
        return Pairs(ids, types, lengths, frozenset(truncated))

    def encode_prompted_pairs_sync(self, query: str, documents: list[str], max_tokens: int,
                                   truncate: bool) -> Pairs:
        """Each pair in Qwen3-Reranker's prompt (hedgerow/reranker_prompt.py), as its model
        card's reference builds it: the part before the document, the document and the
        suffix tokenized apart (no special tokens added) and joined, the document's tokens
        cut from its end to fit `max_tokens` when `truncate` (else a RequestError names the
        first pair that is too long). All tokens are of type 0. A query that leaves no room
        for a document is a RequestError either way."""
        plain = self._plain
        head = plain.encode(query_part(query), add_special_tokens=False).ids
        tail = plain.encode(SUFFIX, add_special_tokens=False).ids
        room = max_tokens - len(head) - len(tail)
        if room < 1:
            query_length = len(plain.encode(query, add_special_tokens=False).ids)
            raise RequestError(
                query_too_long_message(query_length, len(head) + len(tail) - query_length,
                                       max_tokens, "Qwen3-Reranker's prompt"),
                param="query", code="context_length_exceeded")
        encodings = plain.encode_batch_fast([document_part(d) for d in documents],
                                            add_special_tokens=False)
        ids, lengths, truncated = array.array("i"), [], set()
        for index, encoding in enumerate(encodings):
            document = encoding.ids
            if len(document) > room:
                if not truncate:
                    raise RequestError(
                        pair_too_long_message(index, len(head) + len(document) + len(tail),
                                              max_tokens),
                        param="documents", code="context_length_exceeded")
                document = document[:room]
                truncated.add(index)
            ids.extend(head)
            ids.extend(document)
            ids.extend(tail)
            lengths.append(len(head) + len(document) + len(tail))
        return Pairs(ids, array.array("i", [0]) * len(ids), lengths, frozenset(truncated))

    async def encode_pairs(self, query: str, documents: list[str], *, max_tokens: int,
                           truncate: bool, prompted: bool = False) -> Pairs:
        """`encode_pairs_sync` (`encode_prompted_pairs_sync` when `prompted`: a
        Qwen3-Reranker) in the thread pool (inline for a small request)."""
        encode = self.encode_prompted_pairs_sync if prompted else self.encode_pairs_sync
        if len(query) * len(documents) + sum(len(d) for d in documents) <= INLINE_CHARS:
            return encode(query, documents, max_tokens, truncate)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, encode, query, documents, max_tokens,
                                          truncate)

    def _pair_tokenizer(self, max_tokens: int) -> Tokenizer:
        """A tokenizer that cuts a pair's second sequence (the document) to `max_tokens`."""
        key = -max_tokens  # beside the single-text truncating tokenizers of _truncating
        with self._lock:
            tokenizer = self._truncating.get(key)
            if tokenizer is None:
                tokenizer = self._untruncated(self._json)
                tokenizer.enable_truncation(max_tokens, strategy="only_second")
                self._truncating[key] = tokenizer
            return tokenizer

    async def encodings(self, texts: list[str], add_special_tokens: bool) -> list:
        """The tokenizer's full `Encoding` of each text (ids, tokens, character offsets and
        the special-token mask), untruncated, for a caller that shows tokens to a person."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, lambda: self._plain.encode_batch(texts,
                                                         add_special_tokens=add_special_tokens))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
