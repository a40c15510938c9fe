"""The golden set's format: what `hedgerow guard record` writes reads back the same, bare or in
its ConfigMap, and every malformed one is refused with a message that names what is wrong."""

import base64
import json
import struct

import pytest

from hedgerow import golden_set
from hedgerow.golden_set import GoldenSet, GoldenSetError

FINGERPRINT = "s1-0a0a0a0a-1b1b1b1b"


def _golden(vectors=((0.5, -0.75), (1.0, 0.0))) -> GoldenSet:  # float32-exact
    return GoldenSet(model="m", fingerprint=FINGERPRINT, dimensions=2, texts=("a", "b"),
                     vectors=vectors, input_type="query", recorded_with={"dtype": "float32"})


def test_a_golden_set_reads_back_the_same_bare_or_in_its_config_map():
    golden = _golden()
    assert golden_set.parse(golden.to_json()) == golden
    manifest = golden.config_map("minilm-golden", "embeddings")
    assert manifest["metadata"] == {"name": "minilm-golden", "namespace": "embeddings",
                                    "labels": {"app.kubernetes.io/name": "hedgerow",
                                               "app.kubernetes.io/component": "golden-set"}}
    assert golden_set.parse(json.dumps(manifest)) == golden
    fingerprint_only = _golden(vectors=None)
    assert "vectors" not in fingerprint_only.document()
    assert golden_set.parse(fingerprint_only.to_json()) == fingerprint_only


def test_min_cosine_is_the_worst_row():
    assert golden_set.min_cosine([[1.0, 0.0], [0.0, 2.0]], [[1.0, 0.0], [0.0, 1.0]]) == 1.0
    assert golden_set.min_cosine([[1.0, 0.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]) == \
        pytest.approx(2 ** -0.5)
    assert golden_set.cosine([0.0, 0.0], [1.0, 0.0]) == 0.0


def _document(**changes):
    document = _golden().document()
    document.update(changes)
    return json.dumps(document)


def _vector(*values) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


@pytest.mark.parametrize("raw, message", [
    ("{", "is not JSON"),
    ("[]", "must be a JSON object"),
    (json.dumps({"kind": "ConfigMap", "data": {"other": "{}"}}),
     "is a ConfigMap without the key 'golden-set.json'"),
    (_document(format="v0"), "format must be 'hedgerow.dev/golden-set/v1', got 'v0'"),
    (_document(model=""), "model must be a non-empty string"),
    (_document(fingerprint="abc"), "fingerprint must look like s1-xxxxxxxx-xxxxxxxx"),
    (_document(dimensions=0), "dimensions must be a positive integer, got 0"),
    (_document(dimensions=True), "dimensions must be a positive integer, got True"),
    (_document(input_type="passage"), "input_type must be null, 'query' or 'document'"),
    (_document(recorded_with={"dtype": 32}), "recorded_with must be an object of strings"),
    (_document(texts=[]), "texts must be a non-empty list of strings"),
    (_document(texts=["a", " "]), "texts[1] must be a non-empty string"),
    (_document(texts=["a"] * 257, vectors=None), "holds 257 texts, at most 256"),
    (_document(texts=["a", "b" * 8193]), "texts[1] has 8193 characters, at most 8192"),
    (_document(vectors=[_vector(1, 0)]), "vectors must be a list of one vector per text (2), "
                                         "got 1"),
    (_document(vectors="x"), "vectors must be a list of one vector per text (2), got str"),
    (_document(vectors=[_vector(1, 0), "***"]), "vectors[1] is not base64"),
    (_document(vectors=[_vector(1, 0), _vector(1, 0, 0)]),
     "vectors[1] holds 12 bytes; 2 float32 dimensions are 8"),
    (_document(vectors=[_vector(1, 0), _vector(0, 0)]),
     "vectors[1] must be finite and not all zero"),
    (_document(vectors=[_vector(float("nan"), 0), _vector(1, 0)]),
     "vectors[0] must be finite and not all zero"),
])
def test_a_malformed_golden_set_is_refused_naming_what_is_wrong(raw, message):
    with pytest.raises(GoldenSetError) as caught:
        golden_set.parse(raw, "ConfigMap 'g' key 'golden-set.json'")
    assert str(caught.value).startswith("ConfigMap 'g' key 'golden-set.json'")
    assert message in str(caught.value)


def test_a_golden_set_too_large_for_a_config_map_says_what_to_do():
    texts = tuple(f"{i} " + "x" * 8000 for i in range(200))
    golden = GoldenSet(model="m", fingerprint=FINGERPRINT, dimensions=2, texts=texts,
                       vectors=None)
    with pytest.raises(GoldenSetError, match="more than a ConfigMap holds"):
        golden.to_json()


PAIRS = (("q1", "d1"), ("q1", "d2"), ("q2", "d3"))


def _rerank(scores=(2.5, -1.0, 0.25)) -> GoldenSet:
    return GoldenSet(model="ce", fingerprint=FINGERPRINT, dimensions=None, texts=(),
                     vectors=None, task="rerank", pairs=PAIRS, scores=scores,
                     recorded_with={"dtype": "float32"})


def _sparse(vectors=({3: 0.5, 17: 1.25}, {4: 0.125})) -> GoldenSet:
    return GoldenSet(model="m3", fingerprint=FINGERPRINT, dimensions=None, texts=("a", "b"),
                     vectors=None, task="sparse", sparse_vectors=vectors)


def test_a_rerankers_and_a_sparse_models_golden_sets_read_back_the_same():
    for golden in (_rerank(), _rerank(scores=None), _sparse(), _sparse(vectors=None)):
        assert golden_set.parse(golden.to_json()) == golden
        assert golden_set.parse(json.dumps(golden.config_map("g"))) == golden
    document = _rerank().document()
    assert document["task"] == "rerank" and document["pairs"][1] == ["q1", "d2"]
    assert {"texts", "vectors", "dimensions", "input_type"}.isdisjoint(document)
    assert _sparse().document()["sparse_vectors"][0] == {"indices": [3, 17],
                                                         "values": [0.5, 1.25]}
    assert (_rerank().size, _sparse().size) == (3, 2)
    assert (_rerank().measured, _rerank(scores=None).measured) == (True, False)


def test_a_golden_set_written_before_tasks_reads_as_an_embedding_models():
    document = _golden().document()
    del document["task"]
    assert golden_set.parse(json.dumps(document)) == _golden()


def test_sparse_cosine_runs_over_the_union_of_the_indices():
    assert golden_set.sparse_cosine({1: 2.0, 5: 1.0}, {5: 2.0, 1: 4.0}) == pytest.approx(1.0)
    # an index one side lacks is a zero there: {1: 1} against {1: 1, 2: 1} is 45 degrees
    assert golden_set.sparse_cosine({1: 1.0}, {1: 1.0, 2: 1.0}) == pytest.approx(2 ** -0.5)
    assert golden_set.sparse_cosine({1: 1.0}, {2: 1.0}) == 0.0
    assert golden_set.sparse_cosine({}, {2: 1.0}) == 0.0
    assert golden_set.min_sparse_cosine([{1: 1.0}, {1: 1.0}], [{1: 3.0}, {2: 1.0}]) == 0.0


def test_score_drift_is_the_largest_difference_and_the_widest_gap_ranked_the_other_way():
    recorded = (2.5, -1.0, 0.25)
    assert golden_set.score_drift(recorded, recorded, PAIRS) == (0.0, 0.0)
    delta, flipped = golden_set.score_drift((2.49, -0.9, 0.3), recorded, PAIRS)
    assert delta == pytest.approx(0.1) and flipped == 0.0
    # q1's two documents swap: the gap they were recorded apart is reported
    delta, flipped = golden_set.score_drift((-1.0, 2.5, 0.25), recorded, PAIRS)
    assert delta == pytest.approx(3.5) and flipped == pytest.approx(3.5)
    # an order across two queries is no order: q2's pair may pass q1's
    assert golden_set.score_drift((2.5, -1.0, 9.0), recorded, PAIRS)[1] == 0.0


def _rerank_document(**changes):
    document = _rerank().document()
    document.update(changes)
    return json.dumps(document)


def _sparse_document(**changes):
    document = _sparse().document()
    document.update(changes)
    return json.dumps(document)


@pytest.mark.parametrize("raw, message", [
    (_document(task="classify"), "task must be one of embed, rerank, sparse, got 'classify'"),
    (_rerank_document(dimensions=1), "dimensions is for task embed"),
    (_rerank_document(input_type="query"), "input_type must be null for task rerank"),
    (_rerank_document(texts=["a"]), "holds pairs and scores, not texts"),
    (_rerank_document(pairs=[]), "pairs must be a non-empty list of [query, document]"),
    (_rerank_document(pairs=[["q", "d"], ["q"]], scores=[1.0, 2.0]),
     "pairs[1] must be [query, document]"),
    (_rerank_document(pairs=[["q", " "]], scores=[1.0]),
     "pairs[0][1] (the document) must be a non-empty string"),
    (_rerank_document(pairs=[["q", "d"]] * 257, scores=None), "holds 257 pairs, at most 256"),
    (_rerank_document(scores=[1.0]), "scores must be a list of one score per pair (3), got 1"),
    (_rerank_document(scores=[1.0, None, 2.0]), "scores[1] must be a finite number"),
    (_rerank_document(scores=[1.0, True, 2.0]), "scores[1] must be a finite number"),
    (_document(pairs=[["q", "d"]]), "pairs belongs to a golden set of task rerank"),
    (_document(sparse_vectors=[]), "sparse_vectors does not belong to a golden set of task "
                                   "embed"),
    (_sparse_document(vectors=[]), "vectors does not belong to a golden set of task sparse"),
    (_sparse_document(dimensions=2), "dimensions is for task embed"),
    (_sparse_document(sparse_vectors=[{"indices": [1], "values": [1.0]}]),
     "sparse_vectors must be a list of one vector per text (2), got 1"),
    (_sparse_document(sparse_vectors=[{"indices": [1], "values": [1.0]}, [1]]),
     "sparse_vectors[1] must be an object of indices and values"),
    (_sparse_document(sparse_vectors=[{"indices": [1, 2], "values": [1.0]}, {}]),
     "sparse_vectors[0] must hold lists indices and values of one length"),
    (_sparse_document(sparse_vectors=[{"indices": [2, 1], "values": [1.0, 1.0]},
                                      {"indices": [], "values": []}]),
     "sparse_vectors[0].indices must be token ids (integers >= 0), ascending"),
    (_sparse_document(sparse_vectors=[{"indices": [1], "values": [0.0]},
                                      {"indices": [], "values": []}]),
     "sparse_vectors[0].values must be finite numbers above 0"),
])
def test_a_malformed_rerank_or_sparse_golden_set_is_refused_naming_what_is_wrong(raw, message):
    with pytest.raises(GoldenSetError) as caught:
        golden_set.parse(raw, "ConfigMap 'g' key 'golden-set.json'")
    assert message in str(caught.value)
