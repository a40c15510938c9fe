"""One reader of a model directory's sentence-transformers files for the engine and the gateway:
the same templates, the same checks, clear errors for malformed or unreadable files."""

import json
import shutil

import pytest

from hedgerow.errors import ModelLoadError
from hedgerow.gateway.model_card import load_card
from hedgerow.model_files import read_sentence_transformers, readable


@pytest.fixture
def model_dir(default_model_dir, tmp_path):
    copy = tmp_path / "e5-style"
    shutil.copytree(default_model_dir, copy)
    return copy


def _card(directory):
    return load_card(directory, name="m", query_template=None, document_template=None)


def test_passage_prompts_are_the_document_template_for_engine_and_gateway(model_dir):
    from hedgerow.engine.loader import load_model

    (model_dir / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}}))
    expected = {"query": "query: ", "document": "passage: "}
    assert read_sentence_transformers(model_dir).templates == expected
    assert load_model(model_dir).templates == expected
    assert _card(model_dir).templates == expected


@pytest.mark.parametrize("name, content, message", [
    ("config_sentence_transformers.json", {"prompts": "x"}, "prompts must be an object"),
    ("sentence_bert_config.json", {"max_seq_length": "abc"}, "positive integer"),
    ("sentence_bert_config.json", {"max_seq_length": float("inf")}, "positive integer"),
    ("config.json", [1, 2], "must hold a JSON object"),
])
def test_the_gateway_refuses_malformed_model_files_with_the_file_named(model_dir, name, content,
                                                                      message):
    (model_dir / name).write_text(json.dumps(content))
    with pytest.raises(ModelLoadError, match=message) as caught:
        _card(model_dir)
    assert name in str(caught.value)


def test_a_permission_error_becomes_a_model_load_error_naming_the_path(tmp_path):
    # Tests run as root here, where chmod cannot make a file unreadable: raise it directly.
    with pytest.raises(ModelLoadError, match=r"cannot read .*config.json: permission denied"):
        with readable(tmp_path):
            raise PermissionError(13, "Permission denied", str(tmp_path / "config.json"))
