"""Clients that call rerank, unchanged, against a cross-encoder served by `hedgerow serve
--model DIR`: a random-weight BertForSequenceClassification written by the test
(tests/conftest.py `write_cross_encoder`), beside the packaged model's tokenizer.

The reference is `transformers` on the same directory: the tokenizer's pair encoding
(`truncation="only_second"` at the model's 512 tokens) and the classifier's logits, pair by
pair. Relevance scores are the logits' sigmoid (TEI's raw_scores: the logits), within 1e-3,
in the same order.
"""

import math

import httpx
import pytest
import torch
import transformers

from tests.clients.conftest import RERANK_QUERY, rerank_corpus, running_stack
from tests.conftest import write_cross_encoder

MODEL = "reranker"
QUERY = RERANK_QUERY
LONG, DOCUMENTS = rerank_corpus(80)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_cross_encoder(tmp_path_factory.mktemp("cross") / MODEL, seed=3)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_dir):
    with running_stack(tmp_path_factory, "--model", str(model_dir)) as served:
        yield served


@pytest.fixture(scope="module")
def logits(model_dir) -> list[float]:
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(model_dir / "tokenizer.json"))
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir).eval()
    scores = []
    with torch.inference_mode():
        for document in DOCUMENTS:
            encoded = tokenizer(QUERY, document, truncation="only_second", max_length=512,
                                return_token_type_ids=True, return_tensors="pt")
            scores.append(float(model(**encoded).logits[0, 0]))
    return scores


def ranking(scores, top_n=None) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_n]


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_the_long_document_needs_cutting(model_dir):
    """Guards the truncation checks below: the long document's pair is past 512 tokens."""
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(model_dir / "tokenizer.json"))
    assert len(tokenizer(QUERY, LONG)["input_ids"]) > 512


def test_cohere_client_v2_rerank(stack, logits):
    import cohere

    client = cohere.ClientV2(api_key="unused", base_url=stack.url)
    ranked = client.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=4)
    assert [result.index for result in ranked.results] == ranking(logits, 4)
    assert [result.relevance_score for result in ranked.results] == pytest.approx(
        [sigmoid(logits[i]) for i in ranking(logits, 4)], abs=1e-3)
    assert ranked.meta.warnings == ["documents[3] was truncated to fit the model's pair length"]


@pytest.mark.parametrize("raw", [False, True])
def test_tei_rerank_with_and_without_raw_scores(stack, logits, raw):
    ranks = httpx.post(stack.url + "/rerank", json={"query": QUERY, "texts": DOCUMENTS,
                                                    "raw_scores": raw}, timeout=60).json()
    assert [rank["index"] for rank in ranks] == ranking(logits)
    expected = [logits[i] if raw else sigmoid(logits[i]) for i in ranking(logits)]
    assert [rank["score"] for rank in ranks] == pytest.approx(expected, abs=1e-3)
    assert [rank["index"] for rank in ranks if rank.get("truncated")] == [3]


def test_cohere_v1_jina_rerank_marks_the_truncated_document(stack, logits):
    body = httpx.post(stack.url + "/v1/rerank", json={
        "model": MODEL, "query": QUERY, "documents": DOCUMENTS, "return_documents": True},
        timeout=60).json()
    assert [item["index"] for item in body["results"]] == ranking(logits)
    assert [item["index"] for item in body["results"] if item.get("truncated")] == [3]
    assert body["results"][0]["document"]["text"] == DOCUMENTS[ranking(logits)[0]]


def test_tei_info_names_a_reranker(stack):
    info = httpx.get(stack.url + "/info", timeout=30).json()
    assert info["model_type"] == {"reranker": {}}


@pytest.mark.parametrize("path, body, status", [
    ("/v1/embeddings", {"input": "hawthorn"}, 400),
    ("/embed", {"inputs": "hawthorn"}, 422),  # TEI answers invalid input with 422
    ("/v2/embed", {"texts": ["hawthorn"], "input_type": "search_document"}, 400),
])
def test_an_embed_call_to_a_reranker_is_refused_naming_the_task(stack, path, body, status):
    answer = httpx.post(stack.url + path, json=body, timeout=30)
    assert answer.status_code == status
    assert "model 'reranker' is of task 'rerank' (a cross-encoder" in answer.text


@pytest.mark.parametrize("body, message", [
    ({"query": QUERY, "documents": []}, "documents is an empty list"),
    ({"query": QUERY, "documents": ["a"] * 2049}, "documents has 2049 items; at most 2048"),
    ({"query": LONG, "documents": ["a"]}, "query has 880 tokens; the model reads a query and a document together in at most 512 tokens (3 of them separators), so a query may have at most 508"),
])
def test_bad_rerank_requests_each_get_their_own_message(stack, body, message):
    answer = httpx.post(stack.url + "/v1/rerank", json=body, timeout=30)
    assert answer.status_code == 400
    assert message in answer.text
