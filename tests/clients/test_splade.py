"""SPLADE served by `hedgerow serve --model DIR` (no --task: a BertForMaskedLM is detected as
task sparse), through the real gateway and server processes: TEI's `/embed_sparse` with httpx
and OpenAI's side, `/v1/embeddings/sparse`, with the openai client's own request method (it has
no sparse call; its `post` is how an OpenAI app reaches a route beside the API's). A random-
weight checkpoint of the real vocabulary (tests/conftest.py `write_splade_model`).

The reference: `transformers`' BertForMaskedLM on each text and SpladePooling's formula (tests/
engine/test_splade.py), answered as `{index, value}` lists of the non-zero entries, ids
ascending, within 1e-3. A dense call to the sparse model and a sparse call to a dense one (the
packaged all-MiniLM-L6-v2) are 400s naming the model's task (422 on TEI's routes), and so is a
rerank call to the sparse model (refused by the gateway, before it tokenizes).
"""

import httpx
import numpy as np
import openai
import pytest
from openai import OpenAI

from tests.clients.conftest import running_stack
from tests.conftest import write_splade_model
from tests.engine.test_splade import reference, token_ids

TEXTS = ["Hawthorn hedges shelter wrens, wrens and robins.", "A stone wall.", "ivy"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_splade_model(tmp_path_factory.mktemp("splade") / "splade", seed=5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_dir):
    with running_stack(tmp_path_factory, "--model", str(model_dir)) as served:
        yield served


@pytest.fixture(scope="module")
def expected(model_dir):
    """Per text, the reference's non-zero entries as [(index, value), ...]."""
    rows = reference(model_dir, token_ids(model_dir, TEXTS))
    return [[(int(i), float(row[i])) for i in np.flatnonzero(row > 0)] for row in rows]


def assert_entries(vector, want):
    assert [entry["index"] for entry in vector] == [index for index, _ in want]
    assert [entry["value"] for entry in vector] == pytest.approx(
        [value for _, value in want], abs=1e-3)


def test_tei_embed_sparse_matches_transformers(stack, expected):
    answer = httpx.post(stack.url + "/embed_sparse", json={"inputs": TEXTS}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-embedding-space"].startswith("s1-")
    vectors = answer.json()
    assert len(vectors) == len(TEXTS)
    for vector, want in zip(vectors, expected):
        assert_entries(vector, want)
    # The test can fail: each text has some non-zero entries, far from the whole vocabulary.
    assert all(50 < len(want) < 30522 // 4 for want in expected)


def test_openai_sparse_embeddings_match_transformers(stack, expected):
    client = OpenAI(base_url=stack.url + "/v1", api_key="unused")
    body = client.post("/embeddings/sparse", body={"input": TEXTS, "model": "splade"},
                       cast_to=object)
    assert (body["object"], body["model"]) == ("list", "splade")
    assert body["embedding_space"].startswith("s1-")
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > len(TEXTS)
    assert [item["index"] for item in body["data"]] == list(range(len(TEXTS)))
    assert {item["object"] for item in body["data"]} == {"sparse_embedding"}
    for item, want in zip(body["data"], expected):
        assert_entries(item["embedding"], want)
    # One text, and the same answer as TEI's route gives.
    one = httpx.post(stack.url + "/v1/embeddings/sparse", json={"input": TEXTS[2]},
                     timeout=60).json()
    assert_entries(one["data"][0]["embedding"], expected[2])


def test_openai_sparse_refuses_what_it_cannot_answer(stack):
    client = OpenAI(base_url=stack.url + "/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError) as refused:  # a dense call to a sparse model
        client.embeddings.create(input="ivy", model="splade")
    assert ("model 'splade' is of task 'sparse' (sparse vectors: call /v1/embeddings/sparse "
            "or /embed_sparse) and serves no embeddings") in refused.value.message
    base64 = httpx.post(stack.url + "/v1/embeddings/sparse",
                        json={"input": "ivy", "encoding_format": "base64"}, timeout=30)
    assert base64.status_code == 400
    assert base64.json()["error"]["param"] == "encoding_format"
    rerank = httpx.post(stack.url + "/v1/rerank", json={"query": "ivy", "documents": ["a"]},
                        timeout=30)
    assert rerank.status_code == 400, rerank.text
    assert rerank.json()["error"]["code"] == "wrong_task"
    assert "is of task 'sparse'" in rerank.json()["error"]["message"]
    assert "serves no reranking" in rerank.json()["error"]["message"]
    tei = httpx.post(stack.url + "/rerank", json={"query": "ivy", "texts": ["a"]}, timeout=30)
    assert tei.status_code == 422 and "serves no reranking" in tei.text, tei.text
    other = httpx.post(stack.url + "/v1/embeddings/sparse",
                       json={"input": "ivy", "model": "text-embedding-3-small-typo"}, timeout=30)
    assert other.status_code == 404, other.text


def test_a_sparse_call_to_a_dense_model_names_its_task(tmp_path_factory):
    with running_stack(tmp_path_factory) as dense:
        answer = httpx.post(dense.url + "/v1/embeddings/sparse", json={"input": "ivy"},
                            timeout=30)
        tei = httpx.post(dense.url + "/embed_sparse", json={"inputs": "ivy"}, timeout=30)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "wrong_task" and error["param"] == "model"
    assert ("is of task 'embed' (an embedding model: call /v1/embeddings, /v2/embed or "
            "/embed) and serves no sparse vectors") in error["message"]
    assert tei.status_code == 422 and "serves no sparse vectors" in tei.text  # TEI's invalid
