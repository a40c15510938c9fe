"""TEI's `/embed_sparse` and the OpenAI side's `/v1/embeddings/sparse` against `hedgerow serve
--model DIR --task sparse`: a random-weight BertModel with BGE-M3's sparse head
(tests/conftest.py `write_lexical_model`).

The reference is BGE-M3's formula on `transformers`' model: `relu(sparse_linear(hidden))` per
token, the largest weight of each token id, the CLS, SEP, PAD and UNK ids and zero weights left
out; answers are `[{index, value}]` per input, ids ascending, within 1e-3.
"""

import httpx
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from tests.clients.conftest import running_stack
from tests.conftest import write_lexical_model

TEXTS = ["Hawthorn hedges shelter wrens, wrens and robins.", "A stone wall.", "ivy"]
UNUSED = {0, 100, 101, 102}  # [PAD], [UNK], [CLS], [SEP] of the packaged tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_lexical_model(tmp_path_factory.mktemp("sparse") / "lexical", seed=2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_dir):
    with running_stack(tmp_path_factory, "--model", str(model_dir), "--task", "sparse") as served:
        yield served


def reference(model_dir, text) -> dict[int, float]:
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()  # the packaged tokenizer.json pads to 128
    ids = tokenizer.encode(text).ids
    model = transformers.BertModel.from_pretrained(model_dir).eval()
    head = torch.nn.Linear(64, 1)
    head.load_state_dict(torch.load(model_dir / "sparse_linear.pt", weights_only=True))
    with torch.inference_mode():
        weights = torch.relu(head(model(input_ids=torch.tensor([ids])).last_hidden_state[0]))
    result: dict[int, float] = {}
    for w, idx in zip(weights[:, 0].tolist(), ids):
        if idx not in UNUSED and w > 0 and w > result.get(idx, 0):
            result[idx] = w
    return result


def test_embed_sparse_matches_bge_m3s_formula(stack, model_dir):
    answer = httpx.post(stack.url + "/embed_sparse", json={"inputs": TEXTS}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-embedding-space"].startswith("s1-")
    vectors = answer.json()
    assert len(vectors) == len(TEXTS)
    kept = 0
    for text, vector in zip(TEXTS, vectors):
        expected = reference(model_dir, text)
        kept += len(expected)
        assert [entry["index"] for entry in vector] == sorted(expected)
        assert [entry["value"] for entry in vector] == pytest.approx(
            [expected[i] for i in sorted(expected)], abs=1e-3)
    assert kept > 5, "the reference keeps tokens: the comparison means something"


def test_a_dense_embedding_call_to_a_sparse_model_names_the_task(stack):
    answer = httpx.post(stack.url + "/v1/embeddings", json={"input": "ivy"}, timeout=30)
    assert answer.status_code == 400
    assert ("model 'lexical' is of task 'sparse' (sparse vectors: call /v1/embeddings/sparse "
            "or /embed_sparse) and "
            "serves no embeddings") in answer.text


def test_openai_sparse_embeddings_are_the_lexical_weights(stack, model_dir):
    answer = httpx.post(stack.url + "/v1/embeddings/sparse", json={"input": TEXTS}, timeout=60)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["embedding_space"] == answer.headers["x-embedding-space"]
    for text, item in zip(TEXTS, body["data"], strict=True):
        expected = reference(model_dir, text)
        assert [entry["index"] for entry in item["embedding"]] == sorted(expected)
        assert [entry["value"] for entry in item["embedding"]] == pytest.approx(
            [expected[i] for i in sorted(expected)], abs=1e-3)
