"""The golden set of a model's space: texts or query-document pairs, and the vectors, scores
(or fingerprint) that define it.

Owns the golden set's format, one JSON document under the key `golden-set.json` of a
ConfigMap (which `hedgerow guard record` writes and `spec.guard` names). For an embedding
model (`task` "embed", or no `task`: every document written before rerankers had a golden set
reads as one):

    {"format": "hedgerow.dev/golden-set/v1", "task": "embed", "model": NAME,
     "fingerprint": "s1-...", "dimensions": D, "input_type": null | "query" | "document",
     "recorded_with": {"dtype": ..., "device": ..., "hedgerow": VERSION},
     "texts": [TEXT, ...], "vectors": [BASE64, ...]}

Each vector is the base64 of little-endian float32 [D], the model's full width, normalised.
For a cross-encoder (`task` "rerank") `pairs` and `scores` replace texts and vectors, and there
is no `dimensions` nor `input_type`: `"pairs": [[QUERY, DOCUMENT], ...]`, `"scores": [S, ...]`,
each the pair's raw score (the model's logit, as TEI's /rerank answers with `raw_scores`); the
pairs of one query make its group, whose order the guard also holds. For lexical weights
(`task` "sparse") `texts` stay and `"sparse_vectors": [{"indices": [ID, ...], "values": [W,
...]}, ...]` replace `vectors` (token ids ascending, weights above 0), with no `dimensions`.
`vectors`, `scores` or `sparse_vectors` may be left out, and then the fingerprint alone defines
the space. Also owns the defaults a server is held to (minimum cosine, largest score
difference), the measures (`min_cosine`, `min_sparse_cosine`, `score_drift`), and the parsing
of such a document, bare or inside a ConfigMap manifest, with a message naming what is wrong.
Plain Python: the operator, the server and the CLI all read it.
"""

import base64
import dataclasses
import hashlib
import json
import math
import struct
from typing import Any, Mapping, Sequence

from hedgerow import model_files, space

FORMAT = "hedgerow.dev/golden-set/v1"
CONFIG_MAP_KEY = "golden-set.json"
# The project's own correctness bar (DESIGN.md: cosine >= 0.999 per vector against the reference
# implementation; bfloat16 on a GPU diverges by less than 0.1%): a replica in bfloat16 joins a
# golden set recorded in float32, a broken or different model does not.
DEFAULT_MIN_COSINE = 0.999
# A cross-encoder's scores are logits, unbounded, so they are held to an absolute difference:
# 0.1 moves a sigmoid relevance by at most 0.025; a float32 replica stays within 1e-3 (the
# engine's own bar), bfloat16 of the test cross-encoder on CPU moved 0.044 at most
# (docs/operator.md), and another model or a broken head differs by whole units. The same
# number says how close two recorded scores of one query may be for noise to swap them.
DEFAULT_MAX_SCORE_DELTA = 0.1
TASKS = model_files.TASKS
# What a golden set of each task holds, for the message when it meets a model of another.
HOLDS = {"embed": "texts and their vectors", "rerank": "query-document pairs and their scores",
         "sparse": "texts and their sparse vectors"}
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
    dimensions: int | None  # the embedding width (task embed); None for rerank and sparse
    texts: tuple[str, ...]  # () for task rerank, whose `pairs` hold the texts
    # [len(texts)][dimensions]; None: the fingerprint alone defines the space
    vectors: tuple[tuple[float, ...], ...] | None
    input_type: str | None = None  # the template applied to every text (None: none)
    recorded_with: dict[str, str] = dataclasses.field(default_factory=dict)
    task: str = "embed"  # embed | rerank | sparse: the model's task, what the set holds
    pairs: tuple[tuple[str, str], ...] = ()  # task rerank: (query, document) per pair
    scores: tuple[float, ...] | None = None  # task rerank: each pair's raw score; None: none
    # task sparse: each text's {token id: weight}; None: the fingerprint alone
    sparse_vectors: tuple[dict[int, float], ...] | None = None

    @property
    def size(self) -> int:
        """How many texts (or pairs) the set holds."""
        return len(self.pairs) if self.task == "rerank" else len(self.texts)

    @property
    def measured(self) -> bool:
        """Whether it holds what a server's answers are measured against (else: the
        fingerprint alone)."""
        return {"embed": self.vectors, "rerank": self.scores,
                "sparse": self.sparse_vectors}[self.task] is not None

    def document(self) -> dict[str, Any]:
        """The JSON document (the value of the ConfigMap's key)."""
        out: dict[str, Any] = {"format": FORMAT, "task": self.task, "model": self.model,
                               "fingerprint": self.fingerprint}
        if self.task == "embed":
            out["dimensions"] = self.dimensions
        if self.task != "rerank":
            out["input_type"] = self.input_type
        out["recorded_with"] = dict(self.recorded_with)
        if self.task == "rerank":
            out["pairs"] = [list(pair) for pair in self.pairs]
            if self.scores is not None:
                out["scores"] = list(self.scores)
            return out
        out["texts"] = list(self.texts)
        if self.vectors is not None:
            out["vectors"] = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode("ascii")
                              for v in self.vectors]
        if self.sparse_vectors is not None:
            out["sparse_vectors"] = [{"indices": sorted(v), "values": [v[i] for i in sorted(v)]}
                                     for v in self.sparse_vectors]
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


def sparse_cosine(a: Mapping[int, float], b: Mapping[int, float]) -> float:
    """Cosine of two sparse vectors ({index: value}) over the union of their indices (an index
    one of them lacks is 0 there), in float64; 0.0 when either is empty or zero."""
    union = sorted(a.keys() | b.keys())
    return cosine([a.get(i, 0.0) for i in union], [b.get(i, 0.0) for i in union])


def min_sparse_cosine(got: Sequence[Mapping[int, float]],
                      golden: Sequence[Mapping[int, float]]) -> float:
    """The smallest `sparse_cosine` between vector i of `got` and vector i of `golden`."""
    return min(sparse_cosine(a, b) for a, b in zip(got, golden, strict=True))


def score_drift(got: Sequence[float], golden: Sequence[float],
                pairs: Sequence[tuple[str, str]]) -> tuple[float, float]:
    """How far scores `got` moved from the recorded `golden` (one per pair of `pairs`):
    (the largest |got - golden|, the largest recorded gap between two documents of one query
    that `got` ranks the other way round; 0.0 when every query keeps its order)."""
    delta = max(abs(a - b) for a, b in zip(got, golden, strict=True))
    groups: dict[str, list[int]] = {}
    for index, (query, _) in enumerate(pairs):
        groups.setdefault(query, []).append(index)
    flipped = 0.0
    for members in groups.values():
        for i in members:
            for j in members:
                if golden[i] > golden[j] and got[i] < got[j]:
                    flipped = max(flipped, golden[i] - golden[j])
    return delta, flipped


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
    task = data.get("task", "embed")  # absent: a golden set written before there were others
    if task not in TASKS:
        raise fail(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise fail("model must be a non-empty string")
    fingerprint = data.get("fingerprint")
    if not space.is_fingerprint(fingerprint):
        raise fail(f"fingerprint must look like {space.VERSION}-xxxxxxxx-xxxxxxxx, got "
                   f"{fingerprint!r}")
    dimensions = data.get("dimensions")
    if task == "embed" and (type(dimensions) is not int or dimensions < 1):
        raise fail(f"dimensions must be a positive integer, got {dimensions!r}")
    if task != "embed" and dimensions is not None:
        raise fail(f"dimensions is for task embed; a golden set of task {task} has none")
    input_type = data.get("input_type")
    if input_type is not None and input_type not in INPUT_TYPES:
        raise fail(f"input_type must be null, 'query' or 'document', got {input_type!r}")
    if task == "rerank" and input_type is not None:
        raise fail("input_type must be null for task rerank (a pair has no input type)")
    recorded = data.get("recorded_with") or {}
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise fail("recorded_with must be an object of strings")
    common = dict(model=model, fingerprint=fingerprint, input_type=input_type,
                  recorded_with=dict(recorded), task=task)
    if task == "rerank":
        for key in ("texts", "vectors", "sparse_vectors"):
            if data.get(key) is not None:
                raise fail(f"a golden set of task rerank holds pairs and scores, not {key}")
        pairs = _pairs(data.get("pairs"), fail)
        scores = None
        if data.get("scores") is not None:
            scores = _scores(data["scores"], len(pairs), fail)
        return GoldenSet(dimensions=None, texts=(), vectors=None, pairs=pairs, scores=scores,
                         **common)
    for key in ("pairs", "scores"):
        if data.get(key) is not None:
            raise fail(f"{key} belongs to a golden set of task rerank; this one is of task "
                       f"{task}")
    wrong = "sparse_vectors" if task == "embed" else "vectors"
    if data.get(wrong) is not None:
        raise fail(f"{wrong} does not belong to a golden set of task {task}")
    texts = data.get("texts")
    if not isinstance(texts, list) or not texts:
        raise fail("texts must be a non-empty list of strings")
    if len(texts) > MAX_TEXTS:
        raise fail(f"holds {len(texts)} texts, at most {MAX_TEXTS}")
    for index, text in enumerate(texts):
        _check_text(text, f"texts[{index}]", fail)
    vectors = sparse = None
    if data.get("vectors") is not None:
        vectors = _vectors(data["vectors"], len(texts), dimensions, fail)
    if data.get("sparse_vectors") is not None:
        sparse = _sparse_vectors(data["sparse_vectors"], len(texts), fail)
    return GoldenSet(dimensions=dimensions, texts=tuple(texts), vectors=vectors,
                     sparse_vectors=sparse, **common)


def _check_text(text: Any, where: str, fail) -> None:
    if not isinstance(text, str) or not text.strip():
        raise fail(f"{where} must be a non-empty string")
    if len(text) > MAX_TEXT_CHARS:
        raise fail(f"{where} has {len(text)} characters, at most {MAX_TEXT_CHARS}")


def _pairs(raw: Any, fail) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list) or not raw:
        raise fail("pairs must be a non-empty list of [query, document]")
    if len(raw) > MAX_TEXTS:
        raise fail(f"holds {len(raw)} pairs, at most {MAX_TEXTS}")
    for index, pair in enumerate(raw):
        if not isinstance(pair, list) or len(pair) != 2:
            raise fail(f"pairs[{index}] must be [query, document]")
        _check_text(pair[0], f"pairs[{index}][0] (the query)", fail)
        _check_text(pair[1], f"pairs[{index}][1] (the document)", fail)
    return tuple((query, document) for query, document in raw)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _scores(raw: Any, count: int, fail) -> tuple[float, ...]:
    if not isinstance(raw, list) or len(raw) != count:
        shown = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise fail(f"scores must be a list of one score per pair ({count}), got {shown}")
    for index, score in enumerate(raw):
        if not _number(score):
            raise fail(f"scores[{index}] must be a finite number, got {score!r}")
    return tuple(float(score) for score in raw)


def _sparse_vectors(raw: Any, count: int, fail) -> tuple[dict[int, float], ...]:
    if not isinstance(raw, list) or len(raw) != count:
        shown = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise fail(f"sparse_vectors must be a list of one vector per text ({count}), got "
                   f"{shown}")
    out = []
    for index, vector in enumerate(raw):
        where = f"sparse_vectors[{index}]"
        if not isinstance(vector, dict):
            raise fail(f"{where} must be an object of indices and values")
        indices, values = vector.get("indices"), vector.get("values")
        if not isinstance(indices, list) or not isinstance(values, list) or \
                len(indices) != len(values):
            raise fail(f"{where} must hold lists indices and values of one length")
        if not all(type(i) is int and i >= 0 for i in indices) or \
                any(a >= b for a, b in zip(indices, indices[1:])):
            raise fail(f"{where}.indices must be token ids (integers >= 0), ascending")
        if not all(_number(v) and v > 0 for v in values):
            raise fail(f"{where}.values must be finite numbers above 0")
        out.append(dict(zip(indices, (float(v) for v in values))))
    return tuple(out)


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
