"""A long text tokenized in pieces on the tokenizer's own threads, with the whole text's ids.

`tokenizers` encodes one text on one thread, about 1 µs a token: a 607-token text alone took
0.65 ms on the 2-core development machine, nearly half of the 1.45 ms the gateway added. So a
text of more than 2 × PIECE_CHARS characters is cut into pieces of at least PIECE_CHARS (at most
MAX_PIECES), each cut at a single space between two ASCII letters or digits: a boundary that
BERT's whitespace split, SentencePiece's metaspace and byte-level BPE's regex all keep, and
where the common normalizers work character by character. `encode_batch_fast` runs the pieces
in parallel (releasing the GIL), and their ids are joined and given the special tokens as the
whole text's would be (`Encoding.merge`, then the tokenizer's `post_process`).

Whether a piece starts at its cut's space ("keep": byte-level BPE gives the space to the next
word) or after it ("drop") is chosen at load by a check: every cut of every probe text, and the
probe texts joined and cut into MAX_PIECES, must give the whole text's ids. A tokenizer that
passes neither way is never cut; nor is one with an added token that holds such a space, nor
any where the tokenizer's threads cannot run side by side (`parallel()`). What the check cannot
see is a normalizer rule that rewrites a phrase across a space and that no probe text
contains; the tokenizers of the common embedding models have none.
"""

import os
import re

from tokenizers import Encoding, Tokenizer

PIECE_CHARS = 512
MAX_PIECES = 8
MODES = ("keep", "drop")
# A single space between ASCII letters or digits.
_CUT = re.compile(r"(?<=[A-Za-z0-9]) (?=[A-Za-z0-9])")
# What `tokenizers` reads as TOKENIZERS_PARALLELISM off.
PARALLELISM_OFF = ("", "off", "false", "f", "no", "n", "0")


def parallel() -> bool:
    """Whether the tokenizer's threads can run pieces side by side: this process may use more
    than one CPU, and TOKENIZERS_PARALLELISM does not turn them off. On one thread the pieces
    cost about a fifth more than the whole text."""
    setting = os.environ.get("TOKENIZERS_PARALLELISM")
    return ((setting is None or setting.lower() not in PARALLELISM_OFF)
            and len(os.sched_getaffinity(0)) > 1)


def pieces(text: str, mode: str, count: int) -> list[str]:
    """`text` cut at up to `count` - 1 spaces (the first cut point at or after each of its
    `count` equal shares), the space starting the next piece ("keep") or left out ("drop")."""
    starts, ends = [0], []
    for share in range(1, count):
        found = _CUT.search(text, max(share * len(text) // count, starts[-1] + 1))
        if found is None:
            break
        ends.append(found.start())
        starts.append(found.start() if mode == "keep" else found.end())
    ends.append(len(text))
    return [text[a:b] for a, b in zip(starts, ends)]


def piece_count(text: str) -> int:
    """How many pieces `text` is cut into: 1 (whole) up to 2 × PIECE_CHARS characters."""
    return 1 if len(text) <= 2 * PIECE_CHARS else min(MAX_PIECES, len(text) // PIECE_CHARS)


class TextPieces:
    """`encode` gives each text's ids with special tokens, long ones tokenized in pieces where
    the load-time check passed (`mode`; None: every text whole)."""

    def __init__(self, tokenizer: Tokenizer, probes: list[str]) -> None:
        self._tokenizer = tokenizer
        # An added token a cut could fall inside ("New York") is matched whole or not at all.
        spanning = any(_CUT.search(token.content)
                       for token in tokenizer.get_added_tokens_decoder().values())
        self.mode = None if spanning or not parallel() else next(
            (mode for mode in MODES if self._same_ids(probes, mode)), None)

    def encode(self, texts: list[str]) -> list[list[int]]:
        # MAX_PIECES texts or more keep the tokenizer's threads busy as they are.
        cut = ([pieces(text, self.mode, piece_count(text)) for text in texts]
               if self.mode and len(texts) < MAX_PIECES else [])
        if all(len(parts) == 1 for parts in cut):
            return [encoding.ids for encoding in self._tokenizer.encode_batch_fast(texts)]
        return self._joined(cut)

    def _joined(self, texts: list[list[str]], threaded: bool = True) -> list[list[int]]:
        """Each text's ids from its pieces (on the tokenizer's threads, or on this one)."""
        cut = [part for parts in texts for part in parts]
        encodings = (self._tokenizer.encode_batch_fast(cut, add_special_tokens=False) if threaded
                     else [self._tokenizer.encode(part, add_special_tokens=False) for part in cut])
        ids, start = [], 0
        for parts in texts:
            run = encodings[start:start + len(parts)]
            start += len(parts)
            joined = run[0] if len(run) == 1 else Encoding.merge(run, growing_offsets=False)
            ids.append(self._tokenizer.post_process(joined).ids)
        return ids

    def _same_ids(self, probes: list[str], mode: str) -> bool:
        """Whether cutting in `mode` gives the whole text's ids: each probe whole (a short text
        beside a long one goes through the same join), cut at each of its cut points in turn,
        and all probes joined, cut into MAX_PIECES. On one thread: the gateway's parent process
        runs this before it forks its workers, and `tokenizers` turns its threads off in a
        child forked after they ran."""
        joined = " ".join(probes)
        cases = [(joined, pieces(joined, mode, MAX_PIECES))]
        for probe in probes:
            cases.append((probe, [probe]))
            for found in _CUT.finditer(probe):
                at = found.start() if mode == "keep" else found.end()
                cases.append((probe, [probe[:found.start()], probe[at:]]))
        cut = self._joined([parts for _, parts in cases], threaded=False)
        return all(self._tokenizer.encode(text).ids == ids for (text, _), ids in zip(cases, cut))
