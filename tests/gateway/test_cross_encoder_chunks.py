"""A cross-encoder's ranking, chunked across two real servers, equals the unchunked one.

Two `hedgerow server` processes serve a random-weight BertForSequenceClassification
(tests/conftest.py `write_cross_encoder`); one gateway cuts the pairs into many Rerank calls
(a small chunk budget) spread over both, another sends them in one call to one server. Indices
and scores must agree bit for bit, duplicate documents tying by the lower index: the pair
scores do not depend on their batch, and the merge keeps the one order.
"""

import httpx
import numpy as np
import pytest

from tests.children import RealGateway, RealServer
from tests.conftest import write_cross_encoder

pytestmark = pytest.mark.slow

QUERY = "Which shrubs make a good hedge for birds?"
WORDS = "hawthorn blackthorn hazel wren robin bramble ditch lane oak holly ivy badger".split()


def documents() -> list[str]:
    rng = np.random.default_rng(3)
    docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 25)))) for _ in range(30)]
    docs[4] = docs[21] = docs[27] = "Hawthorn and blackthorn hedges feed birds."
    return docs


@pytest.fixture(scope="module")
def gateways(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cross-chunks")
    model = str(write_cross_encoder(directory / "reranker", seed=5))
    servers = [RealServer(directory / f"server{i}.log", "--model", model,
                          "--cpu-threads", "1", "--max-batch-tokens", "128")
               for i in range(2)]
    gateways = []
    try:
        for server in servers:
            server.wait_serving()
        split = RealGateway(directory / "split.log", [s.address for s in servers],
                            "--model", model, "--chunk-tokens", "80")
        whole = RealGateway(directory / "whole.log", [servers[0].address],
                            "--model", model, "--chunk-tokens", "100000")
        gateways = [split, whole]
        split.wait_until(lambda: split.ready_replicas() == 2, "split gateway")
        whole.wait_until(lambda: whole.ready_replicas() == 1, "whole gateway")
        yield split, whole
    finally:
        for proc in [*gateways, *servers]:
            proc.stop()


@pytest.mark.parametrize("top_n", [1, 5, 30])
def test_chunked_pairs_rank_exactly_as_one_call(gateways, top_n):
    split, whole = gateways
    body = {"query": QUERY, "documents": documents(), "top_n": top_n}
    ranked = [httpx.post(g.url + "/v1/rerank", json=body, timeout=120).json()["results"]
              for g in (split, whole)]
    assert [(r["index"], r["relevance_score"]) for r in ranked[0]] == [
        (r["index"], r["relevance_score"]) for r in ranked[1]]
    assert len(ranked[0]) == top_n
    ties = [r for r in ranked[1] if r["index"] in (4, 21, 27)]
    assert [r["index"] for r in ties] == sorted(r["index"] for r in ties)
    assert len({r["relevance_score"] for r in ties}) <= 1  # identical pairs score identically
    if top_n == 30:
        assert len(ties) == 3
