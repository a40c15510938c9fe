"""Cohere's v2 routes: /v2/embed and /v2/rerank in Cohere's shapes, errors as {"message"}.

The servers are the in-test stand-ins (conftest.py), whose rows name their tokens: equal rows
mean equal token ids reached the server.
"""

import base64

import numpy as np
import pytest

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture
def client(gateway_factory):
    return gateway_factory()


def openai_rows(client, texts, **extra):
    answer = client.post("/v1/embeddings", json={"input": texts, **extra})
    assert answer.status_code == 200, answer.text
    return [item["embedding"] for item in answer.json()["data"]]


def test_embed_gives_float_and_base64_of_the_same_vectors(client):
    texts = ["Hedgerows shelter birds.", "Hawthorn flowers in May."]
    answer = client.post("/v2/embed", json={"model": MODEL, "texts": texts,
                                            "input_type": "search_document",
                                            "embedding_types": ["float", "base64"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["texts"] == texts and body["response_type"] == "embeddings_by_type"
    assert body["meta"]["billed_units"]["input_tokens"] > 0
    floats = body["embeddings"]["float"]
    decoded = [np.frombuffer(base64.b64decode(b), "<f4").tolist()
               for b in body["embeddings"]["base64"]]
    assert floats == decoded == openai_rows(client, texts)


def test_search_query_takes_the_query_template(client):
    # The stand-in's Info gives the query template "query: ".
    answer = client.post("/v2/embed", json={"texts": ["hedge"], "input_type": "search_query"})
    assert answer.json()["embeddings"]["float"] == openai_rows(client, ["hedge"],
                                                               input_type="query")
    plain = client.post("/v2/embed", json={"texts": ["hedge"], "input_type": "clustering"})
    assert plain.json()["embeddings"]["float"] == openai_rows(client, ["hedge"])


def test_output_dimension_keeps_the_first_dimensions(gateway_factory):
    client = gateway_factory(allow_truncated_dimensions=True)
    answer = client.post("/v2/embed", json={"texts": ["hedge"], "output_dimension": 8})
    assert len(answer.json()["embeddings"]["float"][0]) == 8


def test_output_dimension_of_a_model_without_matryoshka_is_refused(client):
    answer = client.post("/v2/embed", json={"texts": ["hedge"], "output_dimension": 8})
    assert answer.status_code == 400
    assert "--allow-truncated-dimensions" in answer.json()["message"]


@pytest.mark.parametrize("body, status, says", [
    ({"texts": "one string"}, 400, "texts must be a list of strings"),
    ({"texts": []}, 400, "texts is an empty list"),
    ({"texts": ["x"], "embedding_types": ["int8"]}, 400, "'int8' is not supported"),
    ({"texts": ["x"], "embedding_types": ["floats"]}, 400, "not one of float, base64"),
    ({"texts": ["x"], "input_type": "search"}, 400, "input_type 'search'"),
    ({"texts": ["x"], "truncate": "START"}, 400, "START is not supported"),
    ({"images": ["data:image/png;base64,AA=="]}, 400, "images is not supported"),
    ({"texts": ["x"], "model": "command-r"}, 404, "not served here"),
    ({"texts": ["word " * 600], "truncate": "NONE"}, 400, "at most 512 tokens"),
])
def test_bad_embed_requests_answer_in_cohere_shape(client, body, status, says):
    answer = client.post("/v2/embed", json=body)
    assert answer.status_code == status, answer.text
    assert list(answer.json()) == ["message"] and says in answer.json()["message"]


def test_truncate_end_cuts_a_long_text(client):
    answer = client.post("/v2/embed", json={"texts": ["word " * 600], "truncate": "END"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["meta"]["tokens"]["input_tokens"] == 512  # the stand-in's limit


def test_rerank_ranks_like_v1_in_cohere_v2_shape(client):
    body = {"model": MODEL, "query": "birds in hedges",
            "documents": ["stock markets", "birds nest in hedges", "hedge birds"], "top_n": 2}
    v2 = client.post("/v2/rerank", json=body)
    assert v2.status_code == 200, v2.text
    v1 = client.post("/v1/rerank", json=body).json()["results"]
    assert v2.json()["results"] == [{"index": r["index"], "relevance_score": r["relevance_score"]}
                                    for r in v1]
    assert v2.json()["meta"]["api_version"] == {"version": "2"}
    bad = client.post("/v2/rerank", json={"query": "q", "documents": []})
    assert bad.status_code == 400 and "documents is an empty list" in bad.json()["message"]
