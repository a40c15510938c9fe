"""Tokenization with the model's real tokenizer.json: ids, templates, limits, truncation."""

import asyncio
import json
import shutil
import threading

import pytest
from tokenizers import Tokenizer

from hedgerow.gateway.errors import RequestError
from hedgerow.gateway.model_card import load_card, refine_with_info
from hedgerow.gateway.tokenizer import TextTokenizer
from hedgerow.wire import embed_pb2


@pytest.fixture(scope="module")
def tokenizer(default_model_dir):
    tok = TextTokenizer(default_model_dir, threads=2)
    yield tok
    tok.close()


def encode(tokenizer, texts, template="", max_tokens=512, truncate=False):
    return asyncio.run(tokenizer.encode(texts, template=template, max_tokens=max_tokens,
                                        truncate=truncate))


def test_ids_match_the_tokenizer_without_padding_or_its_truncation(tokenizer, default_model_dir):
    reference = Tokenizer.from_file(str(default_model_dir / "tokenizer.json"))
    reference.no_padding()
    reference.no_truncation()
    texts = ["Roses are red", "The quick brown fox", "word " * 200]
    sequences = encode(tokenizer, texts)
    assert sequences.lengths == [len(reference.encode(t).ids) for t in texts]
    assert sequences.lengths[2] > 128  # the file's own truncation (128) is off
    for i, text in enumerate(texts):
        assert sequences.sequence(i).tolist() == reference.encode(text).ids
    assert sequences.input_ids.typecode == "i" and sequences.input_ids.itemsize == 4


def test_a_long_text_tokenized_in_pieces_has_the_reference_ids(tokenizer, default_model_dir):
    """A text over 2 x PIECE_CHARS is cut and its pieces tokenized in parallel
    (gateway/text_pieces.py); templated or not, alone or beside short ones, the ids are the
    whole text's."""
    reference = Tokenizer.from_file(str(default_model_dir / "tokenizer.json"))
    reference.no_padding()
    reference.no_truncation()
    long = "Hedgerows shelter wrens, robins and 12 kinds of bramble. " * 60
    for texts, template in (([long], ""), ([long, "short one", long[:1500]], "query: ")):
        sequences = encode(tokenizer, texts, template=template, max_tokens=4096)
        for i, text in enumerate(texts):
            assert sequences.sequence(i).tolist() == reference.encode(template + text).ids


def test_a_template_is_prepended_before_tokenizing(tokenizer):
    plain = encode(tokenizer, ["query: what is a hedgerow"])
    templated = encode(tokenizer, ["what is a hedgerow"], template="query: ")
    assert templated.input_ids.tolist() == plain.input_ids.tolist()


def test_over_length_is_rejected_naming_the_limit_or_truncated(tokenizer):
    with pytest.raises(RequestError, match=r"input\[1\] has \d+ tokens; .* at most 16"):
        encode(tokenizer, ["short", "word " * 40], max_tokens=16)
    cut = encode(tokenizer, ["short", "word " * 40], max_tokens=16, truncate=True)
    assert cut.lengths[1] == 16
    assert cut.sequence(1).tolist()[-1] == 102  # [SEP] survives truncation


def test_large_tokenization_runs_off_the_event_loop(tokenizer):
    seen = []
    original = tokenizer.encode_sync

    def spy(*args):
        seen.append(threading.current_thread().name)
        return original(*args)

    tokenizer.encode_sync = spy
    try:
        encode(tokenizer, ["tiny"])
        encode(tokenizer, ["a longer text " * 60] * 4)
    finally:
        del tokenizer.encode_sync
    assert seen[0] == threading.main_thread().name  # tiny: inline, a thread hop costs more
    assert seen[1].startswith("tokenize")


def test_templates_come_from_the_model_then_the_server_then_flags(default_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(default_model_dir, model, ignore=shutil.ignore_patterns("*.safetensors"))
    (model / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "q: ", "passage": "p: "}}))
    card = load_card(model, name="m", query_template=None, document_template=None)
    assert card.templates == {"query": "q: ", "document": "p: "}
    assert card.max_tokens == 256 and card.dimensions == 384 and card.vocab_size == 30522
    info = embed_pb2.InfoResponse(dimensions=384, max_tokens=512, vocab_size=30522,
                                  templates={"query": "server q: "})
    assert refine_with_info(card, info, {}).templates["query"] == "server q: "
    assert refine_with_info(card, info, {}).max_tokens == 512
    flagged = refine_with_info(card, info, {"query": "flag q: "})
    assert flagged.templates == {"query": "flag q: ", "document": "p: "}

