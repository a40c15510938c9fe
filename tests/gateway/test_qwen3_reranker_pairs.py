"""The gateway's Qwen3-Reranker pairs: the ids the model card's reference builds, bit for bit.

A real tokenizer.json (tests/qwen3_reranker.py: byte-level BPE with Qwen's pre-tokenizer and
chat tokens); the reference is `transformers`' tokenizer on the model card's prompt, the pair
text cut from its end to fit. The long document must be cut, and the answer says which; the
bad inputs each get their own message.
"""

import pytest

from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.model_card import load_card
from hedgerow.gateway.tokenizer import TextTokenizer
from tests.qwen3_reranker import reference_pairs, write_qwen3_reranker

QUERY = "which shrubs make a good hedge for birds?"
LONG = " ".join(["hawthorn hedges shelter wrens and robins along the lane"] * 60)
DOCUMENTS = ["Hawthorn and blackthorn hedges give birds food and shelter.", LONG,
             "\nHolly, ivy: berries 123 feed thrushes in winter.", " two  spaces", "yes"]
MAX_TOKENS = 512


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_qwen3_reranker(tmp_path_factory.mktemp("qwen3-reranker"))


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    tokenizer = TextTokenizer(model_dir, threads=1)
    yield tokenizer
    tokenizer.close()


def test_pairs_are_the_references(model_dir, tokenizer):
    pairs = tokenizer.encode_prompted_pairs_sync(QUERY, DOCUMENTS, MAX_TOKENS, truncate=True)
    expected = reference_pairs(model_dir, QUERY, DOCUMENTS, MAX_TOKENS)
    starts = pairs.starts()
    got = [pairs.input_ids[starts[i]:starts[i + 1]].tolist() for i in range(len(DOCUMENTS))]
    assert got == expected
    assert len(expected[1]) == MAX_TOKENS  # the long document was cut to fit, and only it
    assert pairs.truncated == frozenset({1})
    assert set(pairs.type_ids) == {0} and len(pairs.type_ids) == len(pairs.input_ids)


def test_a_pair_too_long_is_refused_when_truncate_is_false(tokenizer):
    with pytest.raises(RequestError, match=r"documents\[1\] makes a pair of \d+ tokens with the "
                                           r"query; the model accepts at most 512"):
        tokenizer.encode_prompted_pairs_sync(QUERY, DOCUMENTS, MAX_TOKENS, truncate=False)


def test_a_query_that_leaves_no_room_is_refused(tokenizer):
    with pytest.raises(RequestError, match=r"query has \d+ tokens; the model reads a query and "
                                           r"a document together in at most 512 tokens \(\d+ of "
                                           r"them Qwen3-Reranker's prompt\)"):
        tokenizer.encode_prompted_pairs_sync(LONG, ["a"], MAX_TOKENS, truncate=True)


def test_the_card_names_the_architecture(model_dir):
    card = load_card(model_dir, name="r", query_template=None, document_template=None)
    # config.json alone says embed (Qwen3-Embedding ships the same way); the server's Info,
    # answering for `--task rerank`, makes it a reranker.
    assert (card.architecture, card.task) == ("qwen3", "embed")
