"""Clients that call rerank, unchanged, against a Qwen3-Reranker served by `hedgerow serve
--model DIR --task rerank`: a random-weight Qwen3ForCausalLM with a real BPE tokenizer,
written by the test (tests/qwen3_reranker.py).

The reference is the model card's on the same directory with `transformers`: each pair in
the reranker's prompt (the pair text cut from its end to the model's 512 tokens) and P("yes")
over the full LM head's "no" and "yes" logits at the last token. Relevance scores are those
probabilities (TEI's raw_scores: the log-odds), within 1e-3, in the same order.
"""

import httpx
import pytest

from tests.clients.conftest import RERANK_QUERY, rerank_corpus, running_stack
from tests.qwen3_reranker import reference_pairs, reference_scores, write_qwen3_reranker

MODEL = "qwen3-reranker"
QUERY = RERANK_QUERY
LONG, DOCUMENTS = rerank_corpus(60)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_qwen3_reranker(tmp_path_factory.mktemp("qwen3") / MODEL, seed=5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, model_dir):
    with running_stack(tmp_path_factory, "--model", str(model_dir), "--task", "rerank") as served:
        yield served


@pytest.fixture(scope="module")
def reference(model_dir) -> tuple[list[float], list[float]]:
    pairs = reference_pairs(model_dir, QUERY, DOCUMENTS, 512)
    assert len(pairs[3]) == 512  # the long document is cut to fit
    return reference_scores(model_dir, pairs)


def ranking(scores, top_n=None) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_n]


def test_cohere_client_v2_rerank(stack, reference):
    import cohere

    probabilities, _ = reference
    client = cohere.ClientV2(api_key="unused", base_url=stack.url)
    ranked = client.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=4)
    assert [result.index for result in ranked.results] == ranking(probabilities, 4)
    assert [result.relevance_score for result in ranked.results] == pytest.approx(
        [probabilities[i] for i in ranking(probabilities, 4)], abs=1e-3)
    assert ranked.meta.warnings == ["documents[3] was truncated to fit the model's pair length"]


@pytest.mark.parametrize("raw", [False, True])
def test_tei_rerank_with_and_without_raw_scores(stack, reference, raw):
    probabilities, log_odds = reference
    ranks = httpx.post(stack.url + "/rerank", json={"query": QUERY, "texts": DOCUMENTS,
                                                    "raw_scores": raw}, timeout=60).json()
    assert [rank["index"] for rank in ranks] == ranking(probabilities)
    expected = [(log_odds if raw else probabilities)[i] for i in ranking(probabilities)]
    assert [rank["score"] for rank in ranks] == pytest.approx(expected, abs=1e-3)
    assert [rank["index"] for rank in ranks if rank.get("truncated")] == [3]


def test_tei_info_names_a_reranker(stack):
    info = httpx.get(stack.url + "/info", timeout=30).json()
    assert info["model_type"] == {"reranker": {}}


@pytest.mark.parametrize("path, body, status", [
    ("/v1/embeddings", {"input": "hawthorn"}, 400),
    ("/embed", {"inputs": "hawthorn"}, 422),  # TEI answers invalid input with 422
])
def test_an_embed_call_to_the_reranker_is_refused_naming_the_task(stack, path, body, status):
    answer = httpx.post(stack.url + path, json=body, timeout=30)
    assert answer.status_code == status
    assert f"model '{MODEL}' is of task 'rerank' (a cross-encoder" in answer.text


def test_a_query_that_leaves_no_room_is_refused(stack):
    answer = httpx.post(stack.url + "/v1/rerank", json={"query": LONG, "documents": ["a"]},
                        timeout=30)
    assert answer.status_code == 400
    assert "of them Qwen3-Reranker's prompt), so a query may have at most" in answer.text
