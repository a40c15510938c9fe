"""The golden set of an embedding space: texts, and the vectors (or fingerprint) that define it.

Owns the golden set's format, one JSON document under the key `golden-set.json` of a
ConfigMap (which `hedgerow guard record` writes and `spec.guard` names):

    {"format": "hedgerow.dev/golden-set/v1", "model": NAME, "fingerprint": "s1-...",
     "dimensions": D, "input_type": null | "query" | "document",
     "recorded_with": {"dtype": ..., "device": ..., "hedgerow": VERSION},
     "texts": [TEXT, ...], "vectors": [BASE64, ...]}

Each vector is the base64 of little-endian float32 [D], the model's full width, normalised;
`vectors` may be left out, and then the fingerprint alone defines the space. Also owns the
default minimum cosine, the measure a server's vectors are held to (`min_cosine`), and the
parsing of such a document, bare or inside a ConfigMap manifest, with a message naming what is
wrong. Plain Python: the operator, the server and the CLI all read it.
"""

import base64
import dataclasses
import hashlib
import json
import math
import struct
from typing import Any, Sequence

from hedgerow import space

FORMAT = "hedgerow.dev/golden-set/v1"
CONFIG_MAP_KEY = "golden-set.json"
# The project's own correctness bar (DESIGN.md: cosine >= 0.999 per vector against the reference
# implementation; bfloat16 on a GPU diverges by less than 0.1%): a replica in bfloat16 joins a
# golden set recorded in float32, a broken or different model does not.
DEFAULT_MIN_COSINE = 0.999
MAX_TEXTS = 256
MAX_TEXT_CHARS = 8192
# A ConfigMap holds at most 1 MiB in all; the rest is left for its metadata.
MAX_DOCUMENT_BYTES = 1000 * 1024
INPUT_TYPES = ("query", "document")


class GoldenSetError(ValueError):
    """A golden set that does not follow the format; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class GoldenSet:
    model: str
    fingerprint: str
    dimensions: int
    texts: tuple[str, ...]
    # [len(texts)][dimensions]; None: the fingerprint alone defines the space
    vectors: tuple[tuple[float, ...], ...] | None
    input_type: str | None = None  # the template applied to every text (None: none)
    recorded_with: dict[str, str] = dataclasses.field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The JSON document (the value of the ConfigMap's key)."""
        out: dict[str, Any] = {
            "format": FORMAT, "model": self.model, "fingerprint": self.fingerprint,
            "dimensions": self.dimensions, "input_type": self.input_type,
            "recorded_with": dict(self.recorded_with), "texts": list(self.texts)}
        if self.vectors is not None:
            out["vectors"] = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode("ascii")
                              for v in self.vectors]
        return out

    def to_json(self) -> str:
        text = json.dumps(self.document(), ensure_ascii=False, indent=1)
        size = len(text.encode("utf-8"))
        if size > MAX_DOCUMENT_BYTES:
            raise GoldenSetError(
                f"the golden set is {size} bytes, more than a ConfigMap holds "
                f"({MAX_DOCUMENT_BYTES}); use fewer or shorter texts, or record the fingerprint "
                "alone")
        return text

    def config_map(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """A ConfigMap manifest holding the golden set under CONFIG_MAP_KEY."""
        metadata: dict[str, Any] = {"name": name, "labels": {
            "app.kubernetes.io/name": "hedgerow", "app.kubernetes.io/component": "golden-set"}}
        if namespace:
            metadata["namespace"] = namespace
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                "data": {CONFIG_MAP_KEY: self.to_json()}}


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors, in float64; 0.0 when either is zero. Identical vectors
    give exactly 1.0 (sqrt(x*x) == x in binary floating point)."""
    dot = math.fsum(x * y for x, y in zip(a, b))
    squares = math.fsum(x * x for x in a) * math.fsum(y * y for y in b)
    return dot / math.sqrt(squares) if squares > 0 else 0.0


def min_cosine(got: Sequence[Sequence[float]], golden: Sequence[Sequence[float]]) -> float:
    """The smallest cosine between row i of `got` and row i of `golden` (same shape)."""
    return min(cosine(a, b) for a, b in zip(got, golden, strict=True))


def content_digest(raw: str | bytes) -> str:
    """A short digest of a golden set's text (the operator's pod annotation)."""
    data = raw.encode() if isinstance(raw, str) else raw
    return hashlib.sha256(data).hexdigest()[:16]


def parse(raw: str | bytes, source: str = "the golden set") -> GoldenSet:
    """The golden set in `raw`: the JSON document itself, or a ConfigMap manifest (JSON, as
    `hedgerow guard record` writes it or `kubectl get configmap -o json` prints it) holding it
    under CONFIG_MAP_KEY. GoldenSetError names `source` and what is wrong."""
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise GoldenSetError(f"{source} is not JSON: {error}") from None
    if isinstance(data, dict) and data.get("kind") == "ConfigMap":
        inner = (data.get("data") or {}).get(CONFIG_MAP_KEY)
        if not isinstance(inner, str):
            raise GoldenSetError(f"{source} is a ConfigMap without the key {CONFIG_MAP_KEY!r}")
        return parse(inner, source)
    return from_document(data, source)


def from_document(data: Any, source: str = "the golden set") -> GoldenSet:
    """The GoldenSet a parsed JSON document describes; GoldenSetError names what is wrong."""
    def fail(what: str) -> GoldenSetError:
        return GoldenSetError(f"{source}: {what}")

    if not isinstance(data, dict):
        raise fail("must be a JSON object")
    if data.get("format") != FORMAT:
        raise fail(f"format must be {FORMAT!r}, got {data.get('format')!r}")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise fail("model must be a non-empty string")
    fingerprint = data.get("fingerprint")
    if not space.is_fingerprint(fingerprint):
        raise fail(f"fingerprint must look like {space.VERSION}-xxxxxxxx-xxxxxxxx, got "
                   f"{fingerprint!r}")
    dimensions = data.get("dimensions")
    if type(dimensions) is not int or dimensions < 1:
        raise fail(f"dimensions must be a positive integer, got {dimensions!r}")
    input_type = data.get("input_type")
    if input_type is not None and input_type not in INPUT_TYPES:
        raise fail(f"input_type must be null, 'query' or 'document', got {input_type!r}")
    recorded = data.get("recorded_with") or {}
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise fail("recorded_with must be an object of strings")
    texts = data.get("texts")
    if not isinstance(texts, list) or not texts:
        raise fail("texts must be a non-empty list of strings")
    if len(texts) > MAX_TEXTS:
        raise fail(f"holds {len(texts)} texts, at most {MAX_TEXTS}")
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise fail(f"texts[{index}] must be a non-empty string")
        if len(text) > MAX_TEXT_CHARS:
            raise fail(f"texts[{index}] has {len(text)} characters, at most {MAX_TEXT_CHARS}")
    vectors = None
    if data.get("vectors") is not None:
        vectors = _vectors(data["vectors"], len(texts), dimensions, fail)
    return GoldenSet(model=model, fingerprint=fingerprint, dimensions=dimensions,
                     texts=tuple(texts), vectors=vectors, input_type=input_type,
                     recorded_with=dict(recorded))


def _vectors(raw: Any, count: int, dimensions: int, fail) -> tuple[tuple[float, ...], ...]:
    if not isinstance(raw, list) or len(raw) != count:
        shown = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise fail(f"vectors must be a list of one vector per text ({count}), got {shown}")
    out = []
    for index, encoded in enumerate(raw):
        try:
            data = base64.b64decode(encoded, validate=True)
        except (TypeError, ValueError):
            raise fail(f"vectors[{index}] is not base64") from None
        if len(data) != 4 * dimensions:
            raise fail(f"vectors[{index}] holds {len(data)} bytes; {dimensions} float32 "
                       f"dimensions are {4 * dimensions}")
        vector = struct.unpack(f"<{dimensions}f", data)
        if not all(math.isfinite(x) for x in vector) or not any(vector):
            raise fail(f"vectors[{index}] must be finite and not all zero")
        out.append(vector)
    return tuple(out)
