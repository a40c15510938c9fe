"""engine/scoring.py: cosine scores that do not depend on their neighbours, and their top-k."""

import pytest
import torch

from hedgerow.engine.scoring import cosine_scores, cosine_topk
from hedgerow.errors import InvalidInputError


def embeddings(n, d=384, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def test_cosine_matches_normalised_dot_product():
    q, docs = embeddings(1, seed=1)[0], embeddings(50, seed=2)
    want = torch.nn.functional.normalize(docs.double(), dim=1) @ torch.nn.functional.normalize(
        q.double(), dim=0)
    assert torch.allclose(cosine_scores(q, docs).double(), want, atol=1e-6)
    assert cosine_scores(q, docs).dtype == torch.float32


def test_scores_do_not_depend_on_the_other_candidates():
    q, docs = embeddings(1, d=1024, seed=3)[0], embeddings(300, d=1024, seed=4)
    whole = cosine_scores(q, docs)
    for a, b in [(0, 1), (1, 77), (77, 300)]:
        assert torch.equal(cosine_scores(q, docs[a:b]), whole[a:b])
    assert torch.equal(cosine_scores(q, docs.flip(0)), whole.flip(0))


def test_duplicate_documents_score_identically_and_rank_by_index():
    q = embeddings(1, seed=5)[0]
    docs = embeddings(6, seed=6)
    docs[4] = docs[1]
    docs[5] = q * 3  # the best: same direction as the query
    indices, scores = cosine_topk(q, docs, 6)
    assert indices[0] == 5
    assert torch.equal(cosine_scores(q, docs)[1], cosine_scores(q, docs)[4])
    assert indices.tolist().index(1) + 1 == indices.tolist().index(4)


def test_top_n_past_the_list_returns_all_and_order_is_best_first():
    q, docs = embeddings(1, seed=7)[0], embeddings(9, seed=8)
    indices, scores = cosine_topk(q, docs, 100)
    assert sorted(indices.tolist()) == list(range(9))
    assert scores.tolist() == sorted(scores.tolist(), reverse=True)
    assert indices.dtype == torch.int64 and scores.dtype == torch.float32


def test_zero_vector_scores_zero():
    q = embeddings(1, seed=9)[0]
    docs = torch.zeros(2, 384)
    docs[1] = q
    assert cosine_scores(q, docs).tolist()[0] == 0.0
    assert cosine_scores(torch.zeros(384), docs).tolist() == [0.0, 0.0]


def test_bfloat16_embeddings_are_accepted():
    q, docs = embeddings(1, seed=10)[0], embeddings(20, seed=11)
    indices, _ = cosine_topk(q.bfloat16(), docs.bfloat16(), 5)
    assert indices.shape == (5,)


@pytest.mark.parametrize(
    ("query", "docs", "k", "message"),
    [
        (torch.zeros(4), torch.zeros(0, 4), 3, "document list is empty"),
        (torch.zeros(4), torch.zeros(3, 4), 0, "top_n must be a positive integer"),
        (torch.zeros(4), torch.zeros(3, 4), -2, "top_n must be a positive integer"),
        (torch.zeros(4), torch.zeros(3, 5), 1, "same D"),
        (torch.zeros(2, 4), torch.zeros(3, 4), 1, "same D"),
        (torch.zeros(0), torch.zeros(3, 0), 1, "at least one dimension"),
    ],
)
def test_bad_input_raises_invalid_input(query, docs, k, message):
    with pytest.raises(InvalidInputError, match=message):
        cosine_topk(query, docs, k)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_scores_and_ranks_equal_cpu_bit_for_bit():
    q, docs = embeddings(1, d=1024, seed=12)[0], embeddings(1000, d=1024, seed=13)
    docs[500] = docs[20]
    cpu = cosine_topk(q, docs, 50)
    gpu = cosine_topk(q.cuda(), docs.cuda(), 50)
    assert torch.equal(gpu[0].cpu(), cpu[0]) and torch.equal(gpu[1].cpu(), cpu[1])
