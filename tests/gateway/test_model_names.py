"""Served names, aliases and token-id input: who may call the model what, and with which ids.

The servers are the in-test stand-ins (conftest.py); the gateway is served for real.
"""

import pytest

from hedgerow.errors import ConfigError
from tests.gateway.conftest import make_settings

MODEL = "all-MiniLM-L6-v2"


def test_aliases_are_served_listed_and_retrievable(gateway_factory):
    client = gateway_factory(served_model_aliases=("text-embedding-3-small", "org/embedder"))
    for name in (MODEL, "text-embedding-3-small", "org/embedder"):
        answer = client.post("/v1/embeddings", json={"model": name, "input": "hedge"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == MODEL  # answers name the served model
    listed = [entry["id"] for entry in client.get("/v1/models").json()["data"]]
    assert listed == [MODEL, "text-embedding-3-small", "org/embedder"]
    one = client.get("/v1/models/text-embedding-3-small").json()
    assert one["id"] == "text-embedding-3-small" and one["object"] == "model"
    # A name with a slash arrives percent-encoded, as OpenAI's client sends it.
    assert client.get("/v1/models/org%2Fembedder").json()["id"] == "org/embedder"


def test_an_unknown_model_is_404_everywhere_naming_what_is_served(gateway_factory):
    client = gateway_factory(served_model_aliases=("text-embedding-3-small",))
    for answer in (client.get("/v1/models/gpt-4"),
                   client.post("/v1/embeddings", json={"model": "gpt-4", "input": "x"})):
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert error["code"] == "model_not_found" and error["param"] == "model"
        assert "'all-MiniLM-L6-v2' or 'text-embedding-3-small'" in error["message"]
    assert client.get("/v1/models/bad%FF").status_code == 400  # not UTF-8 once decoded


@pytest.mark.parametrize("body", [{"input": [101, 7592, 102]}, {"input": [[101, 7592, 102]]}])
def test_token_ids_are_refused_by_default_naming_the_langchain_switch(gateway_factory, body):
    client = gateway_factory()
    answer = client.post("/v1/embeddings", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "token_ids_not_accepted" and error["param"] == "input"
    assert "check_embedding_ctx_length=False" in error["message"]
    assert "--accept-token-ids" in error["message"]
    tei = client.post("/embed", json={"inputs": [101, 7592, 102]})
    assert tei.status_code == 422 and "--accept-token-ids" in tei.json()["error"]


def test_token_ids_are_embedded_when_accepted(gateway_factory):
    client = gateway_factory(accept_token_ids=True)
    answer = client.post("/v1/embeddings", json={"input": [[101, 7592, 102]]})
    assert answer.status_code == 200, answer.text
    # The stand-in's row: (length, sum, first, last, ...): the ids arrived as sent.
    assert answer.json()["data"][0]["embedding"][:4] == [3, 101 + 7592 + 102, 101, 102]


@pytest.mark.parametrize("overrides, says", [
    ({"served_model_name": "a,b"}, "--served-model-aliases 'b'"),
    ({"served_model_aliases": (" spaced",)}, "not a name"),
])
def test_bad_model_names_are_refused_at_start(overrides, says):
    settings = dict(servers=("127.0.0.1:1",), **overrides)
    if "served_model_aliases" in overrides:
        from hedgerow.gateway_settings import GatewaySettings

        with pytest.raises(ConfigError, match=says):
            GatewaySettings(**settings)
        return
    with pytest.raises(ConfigError, match=says):
        make_settings(**settings)
