"""/v1/rerank end to end with REAL processes: two `hedgerow server` processes (packaged
all-MiniLM-L6-v2 on CPU) and two `hedgerow gateway` processes in front of them.

The property: a document list chunked across two servers (a small chunk budget, so it splits
into many Score calls) ranks exactly as the unchunked list on one server (a budget larger than
the request), indices and scores bit for bit, with deliberate duplicate documents whose equal
scores must rank by the lower index. Requests run alone and concurrently, so the engine batches
that hold a document differ between the two paths.
"""

import concurrent.futures
import re

import httpx
import numpy as np
import pytest

from tests.children import RealGateway, RealServer

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
QUERY = "Which shrubs make a good hedge for birds?"
WORDS = ("hawthorn blackthorn hazel field margin wren robin bramble ditch bank lane oak ash "
         "elder holly rose ivy meadow sheep wall gate stile badger hedgehog").split()
DUPLICATE = "Hawthorn and blackthorn hedges give birds food and shelter."
OTHER_DUPLICATE = "A stone wall runs beside the lane."


def documents() -> list[str]:
    rng = np.random.default_rng(7)
    docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 30)))) for _ in range(45)]
    for position in (3, 17, 18, 40):       # same chunk and different chunks and servers
        docs[position] = DUPLICATE
    for position in (9, 31):
        docs[position] = OTHER_DUPLICATE
    return docs


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    directory = tmp_path_factory.mktemp("rerank")
    servers = [RealServer(directory / f"server{i}.log", "--cpu-threads", "1",
                          "--max-batch-tokens", "128") for i in range(2)]
    gateways = []
    try:
        for server in servers:
            server.wait_serving()
        split = RealGateway(directory / "split.log", [s.address for s in servers],
                            "--chunk-tokens", "96")
        whole = RealGateway(directory / "whole.log", [servers[0].address],
                            "--chunk-tokens", "100000")
        gateways = [split, whole]
        split.wait_until(lambda: split.ready_replicas() == 2, "split gateway")
        whole.wait_until(lambda: whole.ready_replicas() == 1, "whole gateway")
        yield servers, split, whole
    finally:
        for proc in [*gateways, *servers]:
            proc.stop()


def rerank(url: str, **fields) -> dict:
    body = {"model": MODEL, "query": QUERY, "documents": documents(), **fields}
    answer = httpx.post(url + "/v1/rerank", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def chunks_by_replica(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    pattern = r'hedgerow_gateway_chunks_total\{outcome="OK",replica="([^"]+)"\} ([0-9.e+]+)'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text)}


@pytest.mark.parametrize("top_n", [None, 1, 4, 13, 200])
def test_chunked_across_two_servers_equals_the_unchunked_answer(stacks, top_n):
    servers, split, whole = stacks
    fields = {} if top_n is None else {"top_n": top_n}
    before = chunks_by_replica(split.url)
    chunked = rerank(split.url, **fields)
    after = chunks_by_replica(split.url)
    unchunked = rerank(whole.url, **fields)

    assert chunked["results"] == unchunked["results"]
    assert chunked["usage"] == unchunked["usage"]
    count = len(documents()) if top_n is None else min(top_n, len(documents()))
    assert len(chunked["results"]) == count
    sent = {address: after.get(address, 0) - before.get(address, 0) for address in after}
    assert all(sent.get(s.address, 0) >= 1 for s in servers), sent  # both servers took chunks
    assert sum(sent.values()) >= 6                                    # many chunks


def test_duplicates_tie_and_rank_by_index(stacks):
    _, split, _ = stacks
    results = rerank(split.url)["results"]
    docs = documents()
    for text in (DUPLICATE, OTHER_DUPLICATE):
        same = [r for r in results if docs[r["index"]] == text]
        assert len({r["relevance_score"] for r in same}) == 1, same
        positions = [results.index(r) for r in same]
        assert positions == list(range(positions[0], positions[0] + len(same)))  # adjacent
        assert [r["index"] for r in same] == sorted(r["index"] for r in same)
    assert docs[results[0]["index"]] == DUPLICATE and results[0]["index"] == 3


def test_concurrent_requests_rank_the_same(stacks):
    _, split, whole = stacks
    want = rerank(whole.url, top_n=10, return_documents=True)["results"]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(
            lambda i: rerank((split if i % 2 else whole).url, top_n=10, return_documents=True),
            range(12)))
    for answer in answers:
        assert answer["results"] == want
    assert all(r["document"]["text"] == documents()[r["index"]] for r in want)


def test_scores_are_the_cosine_of_the_embeddings(stacks):
    _, split, _ = stacks
    docs = documents()
    results = rerank(split.url)["results"]
    body = {"model": MODEL, "input": [QUERY, *docs]}
    answer = httpx.post(split.url + "/v1/embeddings", json=body, timeout=120)
    rows = np.asarray([item["embedding"] for item in answer.json()["data"]], np.float64)
    cosine = rows[1:] @ rows[0] / np.linalg.norm(rows[1:], axis=1) / np.linalg.norm(rows[0])
    for result in results:
        assert result["relevance_score"] == pytest.approx(cosine[result["index"]], abs=1e-6)
    assert [r["index"] for r in results][:5] == list(np.argsort(-cosine, kind="stable")[:5])
