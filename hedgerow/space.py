"""The fingerprint of an embedding space: its format, and the probe set it is measured on.

A fingerprint reads `s1-FFFFFFFF-PPPPPPPP`. FFFFFFFF digests the facts that decide a server's
vectors (architecture and config, the weights, tokenizer and templates, pooling, normalisation,
width, compute dtype); PPPPPPPP digests the vectors of the probe set (PROBE_TEXTS, shipped with
Hedgerow and never changed within a format version), each rounded to the side it lies on of
PROBE_PLANES fixed hyperplanes. A bit of that rounding flips with probability angle/pi when a
vector turns by `angle`, so run-to-run noise (measured bitwise zero on CPU; about 1e-6 rad
between two float32 kernels) leaves the digest alone while a real change of the vectors moves
it. Two fingerprints are equal exactly when both parts are: the facts part says whether the
configuration changed, the probe part whether the numbers did.

The server computes both parts (server/space.py); this module only owns the format, so the
operator, the gateway and the CLI can read fingerprints without torch. Plain data.
"""

import hashlib
import json
import re
from importlib import resources
from typing import Any, Mapping

VERSION = "s1"
DIGEST_HEX = 8  # hex digits of each part: 32 bits, plenty to tell a fleet's spaces apart
PROBE_PLANES = 16  # rounding bits per probe vector
PATTERN = re.compile(rf"^{VERSION}-[0-9a-f]{{{DIGEST_HEX}}}-[0-9a-f]{{{DIGEST_HEX}}}$")
PROBE_TEXTS_FILE = "probe_texts.txt"


def probe_texts() -> list[str]:
    """The fixed probe set: one text per line of hedgerow/probe_texts.txt."""
    text = resources.files("hedgerow").joinpath(PROBE_TEXTS_FILE).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line]


def digest(data: bytes) -> str:
    """One part of a fingerprint: the first DIGEST_HEX hex digits of sha256(data)."""
    return hashlib.sha256(data).hexdigest()[:DIGEST_HEX]


def facts_part(facts: Mapping[str, Any]) -> str:
    """The facts part: a digest of `facts` as canonical JSON (sorted keys, no spaces)."""
    return digest(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode())


def compose(facts: Mapping[str, Any], probe_bits: bytes) -> str:
    """The fingerprint of a space with these facts and these rounded probe vectors."""
    return f"{VERSION}-{facts_part(facts)}-{digest(probe_bits)}"


def is_fingerprint(text: Any) -> bool:
    return isinstance(text, str) and PATTERN.match(text) is not None
