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
