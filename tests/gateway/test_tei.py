"""Text Embeddings Inference's routes in TEI's shapes and error format.

The servers are the in-test stand-ins (conftest.py), whose rows name their tokens.
"""

import numpy as np
import pytest


@pytest.fixture
def client(gateway_factory):
    return gateway_factory()


def openai_rows(client, texts, **extra):
    answer = client.post("/v1/embeddings", json={"input": texts, **extra})
    return [item["embedding"] for item in answer.json()["data"]]


def assert_tei_error(answer, status, error_type, says):
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error", "error_type"}
    assert answer.json()["error_type"] == error_type and says in answer.json()["error"]


@pytest.mark.parametrize("path", ["/embed", "/"])
def test_embed_answers_a_list_of_vectors_even_for_one_text(gateway_factory, path):
    client = gateway_factory(allow_truncated_dimensions=True)
    one = client.post(path, json={"inputs": "hedge"})
    assert one.status_code == 200, one.text
    assert one.json() == openai_rows(client, ["hedge"])
    many = client.post(path, json={"inputs": ["hedge", "row"], "prompt_name": "query",
                                   "dimensions": 4, "truncate": True, "normalize": True})
    assert many.json() == [row[:4] for row in openai_rows(client, ["hedge", "row"],
                                                          input_type="query")]


@pytest.mark.parametrize("path", ["/similarity", "/"])
def test_similarity_is_the_cosine_to_the_source_sentence(client, path):
    sentences = ["hedge row", "stock market"]
    answer = client.post(path, json={"inputs": {"source_sentence": "hedge",
                                                "sentences": sentences}, "parameters": {}})
    assert answer.status_code == 200, answer.text
    rows = np.array(openai_rows(client, ["hedge", *sentences]), dtype=np.float64)
    cosines = rows[1:] @ rows[0] / np.linalg.norm(rows[1:], axis=1) / np.linalg.norm(rows[0])
    assert answer.json() == pytest.approx(cosines.tolist(), rel=1e-6)


def test_rerank_ranks_every_text_best_first(client):
    texts = ["stock markets", "birds nest in hedges", "hedge birds"]
    answer = client.post("/rerank", json={"query": "birds in hedges", "texts": texts,
                                          "return_text": True, "raw_scores": False})
    assert answer.status_code == 200, answer.text
    v1 = client.post("/v1/rerank", json={"query": "birds in hedges",
                                         "documents": texts}).json()["results"]
    assert answer.json() == [{"index": r["index"], "score": r["relevance_score"],
                              "text": texts[r["index"]]} for r in v1]


def test_tokenize_with_inputs_gives_tei_tokens_with_byte_offsets(client):
    answer = client.post("/tokenize", json={"inputs": ["héd ge"]})
    assert answer.status_code == 200, answer.text
    tokens = answer.json()[0]
    assert tokens[0] == {"id": 101, "text": "[CLS]", "special": True, "start": None,
                         "stop": None}
    assert tokens[-1]["special"] and tokens[-1]["text"] == "[SEP]"
    words = [t for t in tokens if not t["special"]]
    raw = "héd ge".encode()
    assert all(raw[t["start"]:t["stop"]].decode() == t["text"] for t in words)
    assert words[-1]["text"] == "ge" and words[-1]["stop"] == len(raw)  # bytes, not chars
    bare = client.post("/tokenize", json={"inputs": "ge", "add_special_tokens": False})
    assert [t["special"] for t in bare.json()[0]] == [False]
    assert client.post("/tokenize", json={"input": "ge"}).json()["data"][0]["count"] == 3


def test_info_and_health(client, gateway_factory):
    info = client.get("/info").json()
    assert info["model_id"] == "all-MiniLM-L6-v2"
    assert info["max_input_length"] == 512 and info["model_type"] == {
        "embedding": {"pooling": "mean"}}
    assert client.get("/health").status_code == 200
    assert client.get("/").status_code == 200
    lonely = gateway_factory(servers=["127.0.0.1:1"], ready=0)
    assert_tei_error(lonely.get("/health"), 503, "Unhealthy", "no embedding server")


@pytest.mark.parametrize("path, body, status, error_type, says", [
    ("/embed", {"inputs": ""}, 400, "Empty", "inputs is an empty string"),
    ("/embed", {"inputs": []}, 400, "Empty", "inputs is an empty list"),
    ("/embed", {"text": "x"}, 422, "Validation", "inputs: field required"),
    ("/embed", {"inputs": "x", "normalize": "yes"}, 422, "Validation", "normalize"),
    ("/embed", {"inputs": "x", "truncation_direction": "left"}, 422, "Validation",
     "'left' is not supported"),
    ("/embed", {"inputs": "x", "prompt_name": "passage"}, 422, "Validation",
     "its prompts: query"),
    ("/embed", {"inputs": "word " * 600}, 422, "Validation", "at most 512 tokens"),
    ("/rerank", {"query": "q", "texts": [3]}, 422, "Validation", "texts[0] is an integer"),
    ("/similarity", {"inputs": {"source_sentence": "q", "sentences": []}}, 400, "Empty",
     "inputs.sentences must be a non-empty list"),
    ("/tokenize", {"inputs": [1, 2]}, 422, "Validation", "inputs must be a string"),
    ("/", {"inputs": {"sentences": ["x"]}}, 422, "Validation", "source_sentence"),
])
def test_bad_requests_answer_in_tei_shape(client, path, body, status, error_type, says):
    assert_tei_error(client.post(path, json=body), status, error_type, says)


def test_truncate_true_cuts_a_long_input(client):
    answer = client.post("/embed", json={"inputs": "word " * 600, "truncate": True})
    assert answer.status_code == 200, answer.text
    assert answer.json()[0][0] == 512  # the stand-in's row starts with the sequence length
