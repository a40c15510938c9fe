"""The client libraries people already use, unchanged, against a real `hedgerow serve`.

Each holds the vectors or rankings it gets to sentence-transformers on the same model (cosine
0.999 or closer per vector; rankings in the same order, scores within 1e-4 of the reference
cosines). LangChain's default OpenAIEmbeddings, which sends tiktoken ids, ends in a 400 that
names the fix, never in wrong vectors. See docs/gateway.md, "Clients".
"""

import numpy as np
import pytest

from tests.clients.conftest import ALIAS, cosines

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
TEXTS = ["Roses are red", "Hedgerows shelter birds, insects and small mammals.",
         "The stock market closed higher today."]
QUERY = "What do hedgerows shelter?"
DOCUMENTS = ["Hedgerows shelter birds, insects and small mammals.",
             "The stock market closed higher today.",
             "Hawthorn and blackthorn are common hedgerow shrubs."]


def reference_ranking(reference) -> tuple[list[int], np.ndarray]:
    vectors = reference([QUERY, *DOCUMENTS])
    scores = cosines(vectors[1:], np.repeat(vectors[:1], len(DOCUMENTS), axis=0))
    return sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i]), scores


def test_openai_with_an_alias_base64_by_default(stack, reference):
    from openai import OpenAI

    client = OpenAI(base_url=stack.url + "/v1", api_key="unused")
    result = client.embeddings.create(model=ALIAS, input=TEXTS)
    got = [item.embedding for item in result.data]
    assert cosines(got, reference(TEXTS)).min() >= 0.999
    assert client.models.retrieve(ALIAS).id == ALIAS
    assert [model.id for model in client.models.list()] == [MODEL, ALIAS]


def test_langchain_default_configuration_is_a_clear_400_not_wrong_vectors(stack, offline_cl100k):
    import openai
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(model=ALIAS, base_url=stack.url + "/v1", api_key="unused",
                                  max_retries=0)
    assert embeddings.check_embedding_ctx_length and embeddings.tiktoken_enabled  # defaults
    with pytest.raises(openai.BadRequestError) as refused:
        embeddings.embed_documents(TEXTS)
    assert refused.value.code == "token_ids_not_accepted"
    assert "check_embedding_ctx_length=False" in refused.value.message
    # What it sent was tiktoken's ids: "Roses are red" is cl100k's [49, 20274, 527, 2579].
    assert offline_cl100k.encode_ordinary(TEXTS[0]) == [49, 20274, 527, 2579]


def test_langchain_sending_text_gets_the_right_vectors(stack, reference):
    from langchain_openai import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(model=MODEL, base_url=stack.url + "/v1", api_key="unused",
                                  check_embedding_ctx_length=False)
    documents = embeddings.embed_documents(TEXTS)
    assert cosines(documents, reference(TEXTS)).min() >= 0.999
    query = embeddings.embed_query(QUERY)
    assert cosines([query], reference([QUERY])).min() >= 0.999


def test_cohere_v2_embed_and_rerank(stack, reference):
    import cohere

    client = cohere.ClientV2(api_key="unused", base_url=stack.url)
    embedded = client.embed(model=MODEL, texts=TEXTS, input_type="search_document",
                            embedding_types=["float"])
    assert cosines(embedded.embeddings.float_, reference(TEXTS)).min() >= 0.999
    ranked = client.rerank(model=MODEL, query=QUERY, documents=DOCUMENTS, top_n=3)
    order, scores = reference_ranking(reference)
    assert [result.index for result in ranked.results] == order
    assert [result.relevance_score for result in ranked.results] == pytest.approx(
        [scores[i] for i in order], abs=1e-4)


def test_huggingface_inference_client_feature_extraction_and_similarity(stack, reference):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=stack.url)
    vector = client.feature_extraction(TEXTS[1])
    assert vector.shape == (1, 384) and vector.dtype == np.float32
    assert cosines(vector, reference(TEXTS[1:2])).min() >= 0.999
    similarities = client.sentence_similarity(QUERY, other_sentences=DOCUMENTS)
    _, scores = reference_ranking(reference)
    assert similarities == pytest.approx(scores.tolist(), abs=1e-4)


def test_tei_routes_against_the_reference(stack, reference):
    import httpx

    vectors = httpx.post(stack.url + "/embed", json={"inputs": TEXTS}, timeout=30).json()
    assert cosines(vectors, reference(TEXTS)).min() >= 0.999
    ranks = httpx.post(stack.url + "/rerank", json={"query": QUERY, "texts": DOCUMENTS},
                       timeout=30).json()
    order, _ = reference_ranking(reference)
    assert [rank["index"] for rank in ranks] == order
    info = httpx.get(stack.url + "/info", timeout=30).json()
    assert info["model_dtype"] == "float32" and info["model_type"]["embedding"]["pooling"] == "mean"
