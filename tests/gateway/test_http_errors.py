"""Every bad request gets its 4xx and OpenAI's error shape; a client error is never a 500.

The server behind the gateway is the in-test StandIn (conftest.py), standing in for the
Hedgerow server: these answers are decided by the gateway before any server is asked.
"""

import pytest

from tests.gateway.conftest import wait_ready

MODEL = "all-MiniLM-L6-v2"
URL = "/v1/embeddings"


def assert_error(answer, status, *, param=..., code=..., says=""):
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    assert says.lower() in error["message"].lower()
    if param is not ...:
        assert error["param"] == param
    if code is not ...:
        assert error["code"] == code
    return error


@pytest.fixture
def client(gateway_factory, standins):
    return gateway_factory(servers=[standins[0].address], max_inputs=50,
                           max_request_tokens=400, max_body_bytes=20_000, accept_token_ids=True)


def post(client, body):
    return client.post(URL, json=body)


@pytest.mark.parametrize("raw, says", [
    (b"{not json", "not valid JSON"),
    (b"", "body is empty"),
    (b'{"model": "all-MiniLM-L6-v2", "input": "caf\xe9"}', "not valid UTF-8"),
    (b"[1, 2]", "request body: must be a JSON object"),
    (b'"just a string"', "request body: must be a JSON object"),
    (b"[" * 9000 + b"]" * 9000, "nested too deeply"),
])
def test_malformed_bodies_are_400(client, raw, says):
    assert_error(client.post(URL, content=raw, headers={"content-type": "application/json"}),
                 400, says=says)


@pytest.mark.parametrize("body, param, says", [
    ({"model": MODEL}, "input", "field required"),
    ({"model": 7, "input": "x"}, "model", "valid string"),
    ({"model": MODEL, "input": 7}, "input", "an integer"),
    ({"model": MODEL, "input": None}, "input", "null"),
    ({"model": MODEL, "input": {"text": "x"}}, "input", "an object"),
    ({"model": MODEL, "input": ["a", 3]}, "input", "input[1] is an integer"),
    ({"model": MODEL, "input": [[1, 2], "a"]}, "input", "input[1] is a string"),
    ({"model": MODEL, "input": [[1, "a"]]}, "input", "input[0][1]"),
    ({"model": MODEL, "input": [1, True]}, "input", "input[1] is true"),
    ({"model": MODEL, "input": [1.5]}, "input", "a number"),
    ({"model": MODEL, "input": []}, "input", "empty list"),
    ({"model": MODEL, "input": ""}, "input", "empty string"),
    ({"model": MODEL, "input": ["ok", ""]}, "input", "input[1] is an empty string"),
    ({"model": MODEL, "input": [[]]}, "input", "empty token list"),
    ({"model": MODEL, "input": "x", "dimensions": 0}, "dimensions", "between 1 and 384"),
    ({"model": MODEL, "input": "x", "dimensions": -3}, "dimensions", "between 1 and 384"),
    ({"model": MODEL, "input": "x", "dimensions": 385}, "dimensions", "between 1 and 384"),
    ({"model": MODEL, "input": "x", "dimensions": "8"}, "dimensions", "valid integer"),
    ({"model": MODEL, "input": "x", "dimensions": 8.5}, "dimensions", "valid integer"),
    ({"model": MODEL, "input": "x", "encoding_format": "hex"}, "encoding_format", "'base64'"),
    ({"model": MODEL, "input": "x", "input_type": "poem"}, "input_type", "'document'"),
    ({"model": MODEL, "input": ["x"] * 51}, "input", "at most 50"),
    ({"model": MODEL, "input": ["word " * 100] * 5}, "input", "at most 400"),
    ({"model": MODEL, "input": "word " * 600}, "input", "at most 512 tokens per input"),
    ({"model": MODEL, "input": [[101, 30522, 102]]}, "input", "input[0][1] is token id 30522"),
    ({"model": MODEL, "input": [101, -1]}, "input", "input[0][1] is token id -1"),
    ({"model": MODEL, "input": [101, 2**40]}, "input", "outside the model's vocabulary"),
    ({"model": MODEL, "input": [101] * 513}, "input", "at most 512 tokens per input"),
    ({"model": MODEL, "input": [101, 102], "input_type": "query"}, "input_type", "template"),
])
def test_bad_fields_are_400_naming_the_field(client, body, param, says):
    assert_error(post(client, body), 400, param=param, says=says)


def test_a_lone_surrogate_is_400(client):
    raw = b'{"model": "all-MiniLM-L6-v2", "input": "a\\ud800b"}'
    assert_error(client.post(URL, content=raw), 400, code="invalid_encoding",
                 says="lone surrogate")


def test_unknown_model_is_404(client):
    assert_error(post(client, {"model": "gpt-9", "input": "x"}), 404, param="model",
                 code="model_not_found", says="gpt-9")


def test_oversized_body_is_413_before_parsing(client):
    # not even JSON: the size is checked before the body is parsed
    assert_error(client.post(URL, content=b"x" * 20_001), 413, code="body_too_large")
    chunks = (b"y" * 5000 for _ in range(5))  # no Content-Length: counted while streaming
    assert_error(client.post(URL, content=chunks), 413, code="body_too_large")


def test_bad_timeout_header_is_400(client):
    answer = client.post(URL, json={"model": MODEL, "input": "x"},
                         headers={"X-Request-Timeout": "soon"})
    assert_error(answer, 400, param="x-request-timeout")


def test_unknown_route_and_method_keep_the_shape(client):
    assert_error(client.get("/v1/nothing"), 404, says="no route")
    assert_error(client.get(URL), 405, says="does not accept GET")


def test_tokenize_shares_the_checks(client):
    assert_error(client.post("/tokenize", json={"input": []}), 400, param="input")
    assert_error(client.post("/tokenize", json={"input": "x", "model": "nope"}), 404)


def test_a_good_request_still_works_beside_them(client):
    answer = post(client, {"model": MODEL, "input": ["fine", "also fine"]})
    assert answer.status_code == 200
    assert answer.json()["object"] == "list"
    # Whitespace alone is text, as in OpenAI's API: embedded as the tokenizer encodes it.
    assert post(client, {"model": MODEL, "input": ["   ", "\n\n"]}).status_code == 200


@pytest.fixture
def keyed(gateway_factory, standins, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nsk-first\n\n  # sk-retired, indented\nsk-second\n")
    client = gateway_factory(servers=[standins[0].address], api_keys_file=keys, ready=0)
    wait_ready(client, 1, headers={"Authorization": "Bearer sk-first"})
    return client


@pytest.mark.parametrize("headers, says", [
    ({}, "missing API key"),
    ({"Authorization": "Bearer sk-wrong"}, "incorrect API key"),
    ({"Authorization": "Basic sk-first"}, "Bearer"),
    ({"Authorization": "Bearer"}, "Bearer"),  # no key after the scheme
    ({"Authorization": "Bearer # sk-retired, indented"}, "incorrect API key"),  # a comment
])
def test_missing_or_wrong_api_key_is_401(keyed, headers, says):
    answer = keyed.post(URL, json={"model": MODEL, "input": "x"}, headers=headers)
    assert_error(answer, 401, code="invalid_api_key", says=says)
    assert answer.headers["www-authenticate"] == "Bearer"
    assert keyed.get("/v1/models", headers=headers).status_code == 401


def test_a_right_api_key_passes_and_probes_stay_open(keyed):
    for key in ("sk-first", "sk-second"):
        answer = keyed.post(URL, json={"model": MODEL, "input": "x"},
                            headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
    for path in ("/healthz", "/readyz", "/metrics"):
        assert keyed.get(path).status_code == 200


def test_readyz_names_the_servers_only_to_a_caller_with_a_key(keyed, standins):
    assert keyed.get("/readyz").json() == {"status": "ready"}
    assert keyed.get("/readyz", headers={"Authorization": "Bearer sk-wrong"}).json() == {
        "status": "ready"}
    detailed = keyed.get("/readyz", headers={"Authorization": "Bearer sk-first"}).json()
    assert detailed["ready_replicas"] == [standins[0].address]


def test_error_statuses_are_counted_by_route(client):
    post(client, {"model": MODEL, "input": []})
    text = client.get("/metrics").text
    assert 'hedgerow_gateway_request_seconds_count{route="/v1/embeddings",status="400"}' in text


def test_a_text_that_tokenizes_to_nothing_is_400(gateway_factory, standins, default_model_dir,
                                                 tmp_path):
    """Without a post-processor ([CLS] ... [SEP]) a lone combining accent (stripped by
    the normalizer) tokenizes to no ids: a
    400 naming the input (or document), not an empty sequence sent to a server."""
    import json

    for item in default_model_dir.iterdir():
        if item.name != "tokenizer.json":
            (tmp_path / item.name).symlink_to(item)
    raw = json.loads((default_model_dir / "tokenizer.json").read_text())
    raw["post_processor"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(raw))
    client = gateway_factory(servers=[standins[0].address], model=tmp_path,
                             served_model_name=MODEL)
    calls = standins[0].calls
    assert_error(post(client, {"model": MODEL, "input": ["hello", "\u0301"]}), 400,
                 param="input", code="empty_input", says="input[1] tokenizes to no tokens")
    assert_error(client.post("/v1/rerank", json={"model": MODEL, "query": "bees",
                                                 "documents": ["hives", "\u0301"]}),
                 400, param="documents", code="empty_input",
                 says="documents[1] tokenizes to no tokens")
    assert standins[0].calls == calls
