"""Embedding spaces at the gateway: every answer names its space, and no answer mixes two.

Stand-ins (conftest.py) name a space each and mark their rows (column 4), so a test can see
which one embedded each row; the router-level tests drive the Router with replicas whose
answers they control. test_space_integration.py repeats the important case with real servers.
"""

import asyncio
import types

import numpy as np
import pytest

from hedgerow.gateway.chunking import plan_chunks
from hedgerow.gateway.errors import SpaceConflictError
from hedgerow.gateway.http_errors import Style, answer_for
from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.gateway.router import Router
from hedgerow.gateway.tokenizer import Sequences
from hedgerow.wire import embed_pb2
from tests.gateway.test_routing import MODEL, replica

SPACE_A, SPACE_B, SPACE_C = "s1-aaaaaaaa-00000001", "s1-bbbbbbbb-00000002", "s1-cccccccc-00000003"


@pytest.fixture
def two_spaces(standins):
    first, second = standins
    first.space, first.marker = SPACE_A, 1.0
    second.space, second.marker = SPACE_B, 2.0
    return {1.0: SPACE_A, 2.0: SPACE_B}


def test_one_chunk_answers_name_the_space_that_embedded_them(two_spaces, gateway_factory):
    client = gateway_factory()
    seen = set()
    for number in range(6):
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": f"text {number}"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        marker = body["data"][0]["embedding"][4]
        assert answer.headers["x-embedding-space"] == body["embedding_space"] == \
            two_spaces[marker]
        seen.add(marker)
    assert seen == {1.0, 2.0}, "equal replicas take turns, whatever their space"


@pytest.mark.parametrize("path, body", [
    ("/v2/embed", {"texts": ["hedge", "row"], "input_type": "search_document"}),
    ("/embed", {"inputs": ["hedge", "row"]}),
    ("/", {"inputs": "hedge"}),
    ("/similarity", {"inputs": {"source_sentence": "hedge", "sentences": ["row", "bank"]}}),
    ("/v1/rerank", {"query": "hedge", "documents": ["row", "bank", "ditch"]}),
    ("/v2/rerank", {"model": MODEL, "query": "hedge", "documents": ["row", "bank"]}),
    ("/rerank", {"query": "hedge", "texts": ["row", "bank"]}),
], ids=["cohere", "tei-embed", "tei-root", "tei-similarity", "rerank", "cohere-rerank",
        "tei-rerank"])
def test_every_embeddings_and_rerank_route_names_the_space_in_a_header(two_spaces,
                                                                       gateway_factory, path,
                                                                       body):
    client = gateway_factory()
    answer = client.post(path, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-embedding-space"] in two_spaces.values()


def test_a_request_of_many_chunks_never_mixes_two_spaces(two_spaces, gateway_factory):
    client = gateway_factory(chunk_tokens=32)
    texts = [f"document {i} " + "word " * (i % 5) for i in range(40)]
    used = set()
    for _ in range(8):
        answer = client.post("/v1/embeddings", json={"model": MODEL, "input": texts})
        assert answer.status_code == 200, answer.text
        markers = {item["embedding"][4] for item in answer.json()["data"]}
        assert len(markers) == 1, f"one answer mixed the spaces of stand-ins {markers}"
        (marker,) = markers
        assert answer.headers["x-embedding-space"] == two_spaces[marker]
        used |= markers
    assert used == {1.0, 2.0}, "requests still spread over both spaces"


def test_an_answer_in_another_space_is_retried_on_the_requests_own(standins, gateway_factory):
    """A server that restarted in a new space since its Info: its answer is not used, it is
    asked for Info again, and the chunk goes to a replica of the request's space."""
    restarted, steady = standins
    restarted.marker, steady.marker = 1.0, 2.0
    client = gateway_factory(chunk_tokens=32)
    restarted.answer_space = SPACE_B  # its Info still says the stand-ins' common space
    texts = [f"document {i}" for i in range(30)]
    answer = client.post("/v1/embeddings", json={"model": MODEL, "input": texts})
    assert answer.status_code == 200, answer.text
    assert {item["embedding"][4] for item in answer.json()["data"]} == {2.0}
    assert answer.headers["x-embedding-space"] == steady.space
    assert "SPACE_CHANGED" in client.get("/metrics").text


def _answering(space: str, calls: list):
    async def embed(request, timeout, metadata=None):
        calls.append(space)
        rows = len(request.cu_seqlens) // 4 - 1
        return embed_pb2.EmbedResponse(embeddings=np.zeros((rows, 4), "<f4").tobytes(),
                                       shape=[rows, 4], space=space)
    return types.SimpleNamespace(Embed=embed)


def test_a_request_whose_space_is_gone_is_refused_with_409_not_finished_in_another():
    restarted = replica("a", space=SPACE_A)  # its Info says A; it now answers in B
    other = replica("c", tokens=50, space=SPACE_C)  # busier: the request is bound to A
    suspected, calls = [], []
    for r, answers in ((restarted, SPACE_B), (other, SPACE_C)):
        r.address, r.embedder, r.suspect = f"{r.name}:1", _answering(answers, calls), \
            suspected.append
    router = Router(types.SimpleNamespace(ready=lambda: [restarted, other]), GatewayMetrics())
    sequences = Sequences.from_lists([[101, 7, 102]] * 4)
    chunks = plan_chunks(sequences.lengths, 6)
    assert len(chunks) == 2

    async def embed():
        deadline = asyncio.get_running_loop().time() + 5
        return await router.embed(sequences, chunks, dimensions=None, deadline=deadline)

    with pytest.raises(SpaceConflictError, match="would mix two embedding spaces"):
        asyncio.run(embed())
    assert SPACE_C not in calls, "a chunk went to a replica of another space"
    assert suspected, "the replica whose answer named another space is asked for Info again"


def test_the_conflict_is_a_409_with_its_own_code_on_every_route():
    status, body, _ = answer_for(SpaceConflictError("mixing"))
    assert status == 409
    assert b'"code":"embedding_space_changed"' in body and b'"type":"conflict_error"' in body
    for style in (Style.TEI, Style.COHERE):  # TEI's routes would make a failed backend 424
        status, body, _ = answer_for(SpaceConflictError("mixing"), style)
        assert status == 409 and b"mixing" in body
