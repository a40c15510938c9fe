"""POST /v1/rerank decided by the gateway: bad input, chunking, routing, templates, the merge.

The servers are the in-test StandIns (conftest.py), standing in for the Hedgerow server with
trivial math and Hedgerow's ranking order; the real-server end-to-end property lives in
test_rerank_integration.py. The merge is checked against the kernels' reference merge
(`hedgerow.kernels.topk_reference.merge_topk`), which tests may import and the gateway may not.
"""

import math
import random

import grpc
import pytest
import torch

from hedgerow.gateway.rerank import merge_ranked
from hedgerow.kernels.topk_reference import merge_topk, topk_reference
from tests.gateway.test_http_errors import assert_error

MODEL = "all-MiniLM-L6-v2"
URL = "/v1/rerank"
DOCUMENTS = ["hawthorn hedges shelter birds", "the stock market", "blackthorn and hazel",
             "hawthorn hedges shelter birds", "wrens nest in hedges"]


@pytest.fixture
def client(gateway_factory, standins):
    return gateway_factory(servers=[standins[0].address], max_inputs=50,
                           max_request_tokens=400)


def rerank(client, **fields):
    body = {"model": MODEL, "query": "what do hedges shelter?", "documents": DOCUMENTS, **fields}
    return client.post(URL, json=body)


# --- the merge ---------------------------------------------------------------------------------

def _split_points(rng: random.Random, n: int) -> list[int]:
    cuts = sorted(rng.sample(range(1, n), k=min(n - 1, rng.randint(0, 5)))) if n > 1 else []
    return [0, *cuts, n]


@pytest.mark.parametrize("seed", range(40))
def test_merge_equals_the_reference_merge_and_the_whole_rows_topk(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 300)
    k = rng.choice([1, 2, 3, 7, 16, 64, n, n + 5])
    # Few distinct values, so ties are everywhere, including at every cutoff; ±0 and -inf too.
    pool = [0.5, 0.25, -0.25, 0.0, -0.0, 1.0, -1.0, float("-inf"), 0.125]
    scores = torch.tensor([rng.choice(pool[:rng.randint(2, len(pool))]) for _ in range(n)],
                          dtype=torch.float32)
    points = _split_points(rng, n)
    parts, cat_i, cat_v = [], [], []
    for start, stop in zip(points, points[1:]):
        wanted = min(k, stop - start)
        indices, values = topk_reference(scores[None, start:stop], wanted)
        global_indices = indices[0] + start
        parts.append((global_indices.tolist(), values[0].tolist()))
        cat_i.append(global_indices)
        cat_v.append(values[0])
    top = min(k, n)
    got = merge_ranked(parts, top)

    ref_i, ref_v = merge_topk(torch.cat(cat_i)[None, :], torch.cat(cat_v)[None, :], top)
    whole_i, whole_v = topk_reference(scores[None, :], top)
    assert [i for i, _ in got] == ref_i[0].tolist() == whole_i[0].tolist()
    assert [v for _, v in got] == ref_v[0].tolist() == whole_v[0].tolist()


def test_merge_ranks_nan_as_minus_inf_and_minus_zero_as_zero():
    parts = [([4, 0], [float("nan"), -0.0]), ([1, 3], [0.0, float("-inf")])]
    got = merge_ranked(parts, 4)
    assert [i for i, _ in got] == [0, 1, 3, 4]
    assert math.isnan(got[3][1])


# --- bad input ---------------------------------------------------------------------------------

BAD = [
    ({"query": ""}, "query", "empty_input", "query is an empty string"),
    ({"query": 5}, "query", "invalid_type", "query must be a string; got an integer"),
    ({"query": ["a"]}, "query", "invalid_type", "got a list"),
    ({"documents": []}, "documents", "empty_input", "documents is an empty list"),
    ({"documents": "one"}, "documents", "invalid_type", "documents must be a list"),
    ({"documents": None}, "documents", "invalid_type", "got null"),
    ({"documents": ["a", 3]}, "documents", "invalid_type", "documents[1] is an integer"),
    ({"documents": ["a", ""]}, "documents", "empty_input", "documents[1] is an empty string"),
    ({"documents": [{"txt": "a"}]}, "documents", "invalid_type",
     'documents[0] is an object without a string "text" field'),
    ({"documents": [{"text": ""}]}, "documents", "empty_input", "documents[0].text is an empty"),
    ({"documents": ["a"] * 51}, "documents", "too_many_inputs", "at most 50"),
    ({"top_n": 0}, "top_n", "invalid_value", "top_n is 0; it must be at least 1"),
    ({"top_n": -3}, "top_n", "invalid_value", "top_n is -3"),
    ({"top_n": "2"}, "top_n", "invalid_value", "top_n: must be a valid integer"),
    ({"top_n": True}, "top_n", "invalid_value", "top_n"),
    ({"top_n": 1.5}, "top_n", "invalid_value", "top_n"),
    ({"return_documents": "yes"}, "return_documents", "invalid_value", "return_documents"),
    ({"model": 7}, "model", "invalid_value", "model: must be a valid string"),
    ({"documents": ["word " * 600]}, "documents", "context_length_exceeded",
     "documents[0] has 602 tokens (its template included); the model accepts at most 512"),
    ({"query": "word " * 600}, "query", "context_length_exceeded",
     "query has 604 tokens (its template included); the model accepts at most 512"),
    ({"documents": ["word " * 150] * 3}, "documents", "too_many_tokens", "at most 400"),
]


@pytest.mark.parametrize("fields, param, code, says", BAD, ids=[b[3][:40] for b in BAD])
def test_bad_input_is_400_with_a_specific_message(client, standins, fields, param, code, says):
    error = assert_error(rerank(client, **fields), 400, param=param, code=code, says=says)
    assert error["type"] == "invalid_request_error"
    assert standins[0].calls == 0


def test_missing_fields_and_unknown_model(client):
    assert_error(client.post(URL, json={"model": MODEL, "documents": ["a"]}), 400,
                 param="query", says="query: Field required")
    assert_error(client.post(URL, json={"model": MODEL, "query": "a"}), 400,
                 param="documents", says="documents: Field required")
    assert_error(rerank(client, model="bge-m3"), 404, param="model", code="model_not_found",
                 says="'bge-m3' is not served here")


def test_a_server_rejection_is_a_400(client, standins):
    standins[0].fail_next = [grpc.StatusCode.INVALID_ARGUMENT]
    assert_error(rerank(client), 400, says="the server rejected the input")


# --- good requests ----------------------------------------------------------------------------

def test_top_n_past_the_list_returns_all_best_first_and_duplicates_by_index(client):
    answer = rerank(client, top_n=99)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"id", "model", "results", "usage"} and body["model"] == MODEL
    results = body["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    keys = [(-r["relevance_score"], r["index"]) for r in results]
    assert keys == sorted(keys)
    duplicates = [r for r in results if r["index"] in (0, 3)]
    assert duplicates[0]["relevance_score"] == duplicates[1]["relevance_score"]
    assert [r["index"] for r in duplicates] == [0, 3]
    assert all("document" not in r for r in results)
    assert rerank(client).json()["results"] == results  # top_n left out: all


def test_top_n_and_return_documents(client):
    body = rerank(client, top_n=2, return_documents=True,
                  documents=[{"text": d} if i % 2 else d for i, d in enumerate(DOCUMENTS)]).json()
    assert len(body["results"]) == 2
    for result in body["results"]:
        assert result["document"] == {"text": DOCUMENTS[result["index"]]}
    assert body["results"] == rerank(client, top_n=2, return_documents=True).json()["results"]


def test_usage_counts_the_query_and_documents_once(client, standins):
    query = client.post("/tokenize", json={"input": "what do hedges shelter?",
                                           "input_type": "query"}).json()
    docs = client.post("/tokenize", json={"input": DOCUMENTS, "input_type": "document"}).json()
    answer = rerank(client).json()
    expected = query["usage"]["total_tokens"] + docs["usage"]["total_tokens"]
    assert answer["usage"]["total_tokens"] == expected == standins[0].tokens


def test_large_lists_are_chunked_over_both_replicas_and_merge_to_the_unchunked_answer(
        standins, gateway_factory):
    documents = [f"hedge {'bramble ' * (i % 7)}wren {i % 5}" for i in range(60)]
    whole = gateway_factory(servers=[standins[0].address])
    unchunked = whole.post(URL, json={"model": MODEL, "query": "a wren in a bramble hedge",
                                      "documents": documents, "top_n": 10}).json()
    assert standins[0].chunks == [60]
    split = gateway_factory(chunk_tokens=64)
    chunked = split.post(URL, json={"model": MODEL, "query": "a wren in a bramble hedge",
                                    "documents": documents, "top_n": 10}).json()
    assert chunked["results"] == unchunked["results"]
    assert len(standins[0].chunks) > 2 and len(standins[1].chunks) > 1
    assert sum(standins[0].chunks[1:]) + sum(standins[1].chunks) == 60


def test_a_failed_chunk_is_retried_on_the_other_replica(standins, gateway_factory):
    client = gateway_factory()
    first, second = standins
    first.fail_next = [grpc.StatusCode.RESOURCE_EXHAUSTED]
    want = rerank(gateway_factory(servers=[second.address]), top_n=3).json()["results"]
    second.calls = 0
    for _ in range(2):  # equal replicas take turns, so one of these lands on `first` first
        answer = rerank(client, top_n=3)
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"] == want
    assert first.calls + second.calls == 3  # one failure, retried once
    retried = 'hedgerow_gateway_retries_total{code="RESOURCE_EXHAUSTED"} 1.0'
    assert retried in client.get("/metrics").text


def test_templates_apply_to_the_query_and_the_documents(standins, gateway_factory):
    client = gateway_factory(servers=[standins[0].address])  # Info templates {"query": "query: "}
    templated = rerank(client, query="hedges").json()
    query = client.post("/tokenize", json={"input": "query: hedges"}).json()["usage"]
    docs = client.post("/tokenize", json={"input": DOCUMENTS}).json()["usage"]
    assert templated["usage"]["total_tokens"] == query["total_tokens"] + docs["total_tokens"]
    flagged = gateway_factory(servers=[standins[0].address], document_template="passage: ")
    with_document_template = rerank(flagged, query="hedges").json()
    passage = rerank(client, query="hedges",
                     documents=["passage: " + d for d in DOCUMENTS]).json()
    assert with_document_template["results"] == passage["results"]
    assert with_document_template["usage"] == passage["usage"] != templated["usage"]


def test_truncate_cuts_long_documents_instead_of_refusing(standins, gateway_factory):
    client = gateway_factory(servers=[standins[0].address], truncate=True)
    answer = rerank(client, documents=["word " * 600, "hedge"])
    assert answer.status_code == 200, answer.text
    query = client.post("/tokenize", json={"input": "what do hedges shelter?",
                                           "input_type": "query"}).json()["usage"]
    assert answer.json()["usage"]["total_tokens"] == query["total_tokens"] + 512 + 3
