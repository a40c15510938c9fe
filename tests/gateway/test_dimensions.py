"""`dimensions` below the width only for a model that declares Matryoshka training (config.json
or config_sentence_transformers.json: `matryoshka_dimensions` or `is_matryoshka`), or with
--allow-truncated-dimensions; otherwise 400 naming the flag."""

import json
import shutil

import pytest

from hedgerow.defaults import default_model_path
from hedgerow.errors import ModelLoadError
from hedgerow.gateway.model_card import load_card


def model_dir(tmp_path, **declared):
    """The packaged model's gateway files, with `declared` added to the named config file."""
    source = default_model_path()
    for name in ("tokenizer.json", "config.json", "config_sentence_transformers.json",
                 "sentence_bert_config.json"):
        if (source / name).is_file():
            shutil.copy(source / name, tmp_path / name)
    for name, extra in declared.items():
        path = tmp_path / f"{name}.json"
        config = json.loads(path.read_text()) if path.is_file() else {}
        path.write_text(json.dumps({**config, **extra}))
    return tmp_path


def embed(client, dimensions, path="/v1/embeddings"):
    return client.post(path, json={"input": "hedge", "dimensions": dimensions})


def test_a_model_without_the_declaration_is_refused_naming_the_flag(gateway_factory):
    client = gateway_factory()
    refused = embed(client, 8)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "dimensions_not_supported" and error["param"] == "dimensions"
    assert "--allow-truncated-dimensions" in error["message"]
    assert "all-MiniLM-L6-v2" in error["message"]
    tei = client.post("/embed", json={"inputs": "hedge", "dimensions": 8})
    assert tei.status_code == 422 and "--allow-truncated-dimensions" in tei.json()["error"]
    full = embed(client, 384)  # the full width is no truncation
    assert full.status_code == 200 and len(full.json()["data"][0]["embedding"]) == 384


def test_the_flag_allows_any_width(gateway_factory):
    client = gateway_factory(allow_truncated_dimensions=True)
    answer = embed(client, 8)
    assert answer.status_code == 200 and len(answer.json()["data"][0]["embedding"]) == 8


def test_declared_widths_only(gateway_factory, tmp_path):
    client = gateway_factory(model=model_dir(tmp_path, config={"matryoshka_dimensions":
                                                                [128, 64]}))
    assert len(embed(client, 64).json()["data"][0]["embedding"]) == 64
    refused = embed(client, 100)
    assert refused.status_code == 400
    assert "truncation to 64, 128 (its matryoshka_dimensions)" in refused.json()["error"][
        "message"]


def test_is_matryoshka_in_the_sentence_transformers_config_allows_any_width(
        gateway_factory, tmp_path):
    client = gateway_factory(model=model_dir(
        tmp_path, config_sentence_transformers={"is_matryoshka": True}))
    assert len(embed(client, 100).json()["data"][0]["embedding"]) == 100


@pytest.mark.parametrize("bad", ["64", [], [64, 0], [64.0], [True]])
def test_a_malformed_declaration_stops_the_gateway(tmp_path, bad):
    directory = model_dir(tmp_path, config={"matryoshka_dimensions": bad})
    with pytest.raises(ModelLoadError, match="matryoshka_dimensions is .* list of positive"):
        load_card(directory, name="m", query_template=None, document_template=None)
