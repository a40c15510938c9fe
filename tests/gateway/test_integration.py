"""The gateway with REAL processes on loopback: `hedgerow gateway` in front of two
`hedgerow server` processes serving the packaged all-MiniLM-L6-v2 on CPU, and `hedgerow serve`.
"""

import base64
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import openai
import pytest
from openai import OpenAI

from hedgerow.commands import serve
from hedgerow.errors import HedgerowError
from tests.children import RealServe, start_stack
from tests.conftest import free_port

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"


KEY = "sk-hedgerow-test"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    directory = tmp_path_factory.mktemp("stack")
    (directory / "keys").write_text(f"# test key\n{KEY}\n")
    servers, gateway = start_stack(
        directory, 2, "--chunk-tokens", "256", "--max-request-tokens", "20000",
        "--api-keys-file", str(directory / "keys"), auth=AUTH)
    yield servers, gateway
    assert gateway.stop() == 0, gateway.log_text()
    for server in servers:
        assert server.stop() == 0, server.log_text()


@pytest.fixture(scope="module")
def reference(default_model_dir):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(default_model_dir), device="cpu")
    return lambda texts: model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)


def cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def embed(url, texts, headers=AUTH, **extra):
    answer = httpx.post(url + "/v1/embeddings", json={"model": MODEL, "input": texts, **extra},
                        headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


TEXTS = ["Roses are red", "The quick brown fox jumps over the lazy dog",
         "Hedgerows shelter birds, insects and small mammals between fields. " * 8,
         "é ü 中文 emoji 🌱", "a"]


def test_embeddings_match_sentence_transformers(stack, reference):
    _, gateway = stack
    body = embed(gateway.url, TEXTS)
    assert body["object"] == "list" and body["model"] == MODEL
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > len(TEXTS)
    got = np.array([item["embedding"] for item in body["data"]])
    assert got.shape == (len(TEXTS), 384)
    assert cosines(got, reference(TEXTS)).min() >= 0.999


def test_300_texts_are_chunked_over_both_servers_and_come_back_in_order(stack, reference):
    servers, gateway = stack
    before = [server.metric("hedgerow_server_tokens_total") for server in servers]
    texts = [f"item {i}: " + " ".join(["meadow", "hawthorn", "blackthorn", "hazel"][: i % 4 + 1])
             * (1 + i % 5) for i in range(300)]
    body = embed(gateway.url, texts)
    assert [item["index"] for item in body["data"]] == list(range(300))
    got = np.array([item["embedding"] for item in body["data"]])
    assert cosines(got, reference(texts)).min() >= 0.999  # row i is text i's embedding
    gained = [server.metric("hedgerow_server_tokens_total") - b
              for server, b in zip(servers, before)]
    assert all(tokens > 0 for tokens in gained), gained
    assert sum(gained) == body["usage"]["prompt_tokens"]
    chunks = httpx.get(gateway.url + "/metrics").text  # /metrics needs no key
    assert chunks.count('hedgerow_gateway_chunks_total{') >= 2  # OK chunks counted per replica


def test_the_openai_client_works_in_float_and_base64(stack, reference):
    _, gateway = stack
    client = OpenAI(base_url=gateway.url + "/v1", api_key=KEY)
    expected = reference(TEXTS[:2])
    as_floats = client.embeddings.create(model=MODEL, input=TEXTS[:2], encoding_format="float")
    got = np.array([item.embedding for item in as_floats.data])
    assert cosines(got, expected).min() >= 0.999
    # asked for base64 explicitly, the client hands the string through, as with OpenAI's API
    as_base64 = client.embeddings.create(model=MODEL, input=TEXTS[:2], encoding_format="base64")
    got = np.array([np.frombuffer(base64.b64decode(item.embedding), "<f4")
                    for item in as_base64.data])
    assert cosines(got, expected).min() >= 0.999
    # left unset, the client asks for base64 and decodes it itself
    default = client.embeddings.create(model=MODEL, input="Roses are red")
    assert cosines([default.data[0].embedding], expected[:1])[0] >= 0.999
    assert [m.id for m in client.models.list().data] == [MODEL]
    # all-MiniLM-L6-v2 was not trained for Matryoshka truncation: refused, the flag named.
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=MODEL, input="Roses are red", dimensions=64)
    assert refused.value.code == "dimensions_not_supported"
    assert "--allow-truncated-dimensions" in refused.value.message


def test_base64_is_little_endian_float32(stack):
    _, gateway = stack
    as_floats = embed(gateway.url, ["one text"])["data"][0]["embedding"]
    encoded = embed(gateway.url, ["one text"], encoding_format="base64")["data"][0]["embedding"]
    assert np.frombuffer(base64.b64decode(encoded), "<f4").tolist() == pytest.approx(as_floats)


BAD = [
    (b"{oops", 400, None),
    ([101, 102], 400, None),  # the body is a list, not an object
    (b'{"model": "all-MiniLM-L6-v2", "input": "caf\xe9"}', 400, None),
    ({"model": MODEL, "input": []}, 400, "input"),
    ({"model": MODEL, "input": ""}, 400, "input"),
    ({"model": MODEL, "input": 12.5}, 400, "input"),
    ({"model": "text-embedding-3-small", "input": "x"}, 404, "model"),
    ({"model": MODEL, "input": "x", "dimensions": 0}, 400, "dimensions"),
    ({"model": MODEL, "input": "x", "dimensions": 385}, 400, "dimensions"),
    ({"model": MODEL, "input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
    ({"model": MODEL, "input": ["x"] * 3000}, 400, "input"),
    ({"model": MODEL, "input": "hedge " * 300}, 400, "input"),  # over the model's 256 tokens
    ({"model": MODEL, "input": [101, 99999, 102]}, 400, "input"),
    ({"model": MODEL, "input": ["hedge " * 100] * 250}, 400, "input"),  # > 20000 per request
]


@pytest.mark.parametrize("body, status, param", BAD)
def test_bad_input_gets_its_status_and_shape_from_the_real_stack(stack, body, status, param):
    _, gateway = stack
    if isinstance(body, bytes):
        answer = httpx.post(gateway.url + "/v1/embeddings", content=body, headers=AUTH)
    else:
        answer = httpx.post(gateway.url + "/v1/embeddings", json=body, headers=AUTH)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param


def test_oversized_body_is_413(stack):
    _, gateway = stack
    answer = httpx.post(gateway.url + "/v1/embeddings", content=b"x" * (16 * 1024 * 1024 + 1),
                        headers=AUTH)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "body_too_large"


@pytest.mark.parametrize("length", [b"1e5", b"99999999999999999999", b"+5"])
def test_a_request_the_http_parser_refuses_gets_openais_shape(stack, length):
    """The parser (before the app) refuses these heads; the answer is still OpenAI's shape."""
    import json
    import socket

    _, gateway = stack
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as conn:
        conn.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + length + b"\r\n\r\n{}")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "malformed_http" and "Content-Length" in error["message"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer sk-wrong"}])
def test_a_missing_or_wrong_api_key_is_401(stack, headers):
    _, gateway = stack
    answer = httpx.post(gateway.url + "/v1/embeddings", json={"model": MODEL, "input": "x"},
                        headers=headers)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_api_key"
    client = OpenAI(base_url=gateway.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.embeddings.create(model=MODEL, input="x")
    assert raised.value.status_code == 401


def test_killing_a_server_under_load_loses_no_request(tmp_path):
    servers, gateway = start_stack(tmp_path, 2, "--chunk-tokens", "128")
    texts = [f"request text number {i} about hedges and fields" for i in range(40)]
    results, failures = [], []
    done_before_kill = threading.Event()
    stop = threading.Event()

    def load():
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                answer = client.post(gateway.url + "/v1/embeddings",
                                     json={"model": MODEL, "input": texts})
                if answer.status_code != 200:
                    failures.append(answer.text)
                    continue
                results.append([item["index"] for item in answer.json()["data"]])
                if len(results) >= 4:
                    done_before_kill.set()

    threads = [threading.Thread(target=load) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        assert done_before_kill.wait(120), failures
        servers[0].kill()  # SIGKILL, mid-load: its in-flight chunks must be retried
        finished = len(results)
        deadline = time.monotonic() + 120
        while len(results) < finished + 8 and time.monotonic() < deadline and not failures:
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
        gateway_status = gateway.stop()
        servers[1].stop()
    assert not failures, failures[:3]
    assert len(results) >= finished + 8
    assert all(indices == list(range(40)) for indices in results)
    assert gateway_status == 0


@contextlib.contextmanager
def running_serve(tmp_path):
    """`hedgerow serve`, once it printed ready; killed on the way out if the test left it
    running."""
    served = RealServe(tmp_path / "serve.log")
    try:
        served.wait_until(served.ready, "hedgerow serve")
        yield served
    finally:
        served.kill()


def test_hedgerow_serve_starts_answers_and_stops_on_sigint(tmp_path):
    with running_serve(tmp_path) as served:
        body = embed(served.url, ["served by hedgerow serve"])
        assert len(body["data"][0]["embedding"]) == 384
        served.proc.send_signal(signal.SIGINT)
        assert served.proc.wait(60) == 0
    text = served.log_text()
    assert "hedgerow serve: stopped" in text
    assert "stopping the gateway" in text and "stopping the server" in text
    with pytest.raises(httpx.HTTPError):
        httpx.get(served.url + "/healthz", timeout=1)


def test_hedgerow_serve_exits_non_zero_and_stops_the_gateway_when_the_server_dies(tmp_path):
    with running_serve(tmp_path) as served:
        server_pid = int(re.search(r"the server \(pid (\d+)\)", served.log_text())[1])
        os.kill(server_pid, signal.SIGKILL)
        assert served.proc.wait(60) == 1
    text = served.log_text()
    assert "the server exited unexpectedly" in text and "stopping the gateway" in text
    with pytest.raises(httpx.HTTPError):
        httpx.get(served.url + "/healthz", timeout=1)


def test_killing_hedgerow_serve_outright_stops_its_children(tmp_path):
    with running_serve(tmp_path) as served:
        pids = [int(pid) for pid in re.findall(r"\(pid (\d+)\)", served.log_text())]
        assert len(pids) == 2, served.log_text()
        served.proc.kill()  # SIGKILL: serve gets no chance to stop them
        served.proc.wait(60)

    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    survivors = [pid for pid in pids if alive(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, served.log_text()


def test_serve_stops_waiting_for_the_gateway_when_the_server_dies_meanwhile():
    """The gateway's readiness needs a SERVING server: were only the gateway watched while it
    starts, a server dying then would leave serve waiting until --startup-timeout."""
    stack = serve.Stack(serve.ServeSettings(startup_timeout=600))
    stack.children = [("server", subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])),
                      ("gateway", subprocess.Popen([sys.executable, "-c", "import time; "
                                                    "time.sleep(600)"]))]
    stack.children[0][1].wait(60)
    try:
        with pytest.raises(HedgerowError, match="the server exited with status 3 while the "
                                                "gateway started"):
            stack.wait_until("gateway", lambda: False)
    finally:
        stack.stop()


def test_serve_picks_other_ports_when_another_process_takes_its_pick_first(
        monkeypatch, subprocess_env, capfd):
    """The race between picking a free port and the server binding it, made certain: the first
    gRPC port picked is one this test holds, as another process could have taken it meanwhile.
    The server exits saying the port is in use; serve picks again and the stack comes up."""
    for key in [key for key in os.environ if key.startswith("HEDGEROW_")]:
        monkeypatch.delenv(key)
    for key, value in subprocess_env.items():
        monkeypatch.setenv(key, value)
    real_pick, picks = serve.pick_port, []

    def pick(host, asked, preferred, avoid):
        first_grpc = not picks and preferred == serve.DEFAULT_GRPC_PORT
        picks.append(held.getsockname()[1] if first_grpc else
                     real_pick(host, asked, preferred, avoid))
        return picks[-1]

    monkeypatch.setattr(serve, "pick_port", pick)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        stack = serve.Stack(serve.ServeSettings(port=free_port()))
        try:
            address = serve.start_server(stack, [])
            assert address == f"127.0.0.1:{picks[2]}" and picks[2] != picks[0]
            assert [name for name, _ in stack.children] == ["server"]
            assert serve.server_serving(address)
        finally:
            stack.stop()
    err = capfd.readouterr().err
    assert f"cannot listen for gRPC on 127.0.0.1:{picks[0]}" in err
    assert f"port {picks[0]} was taken by another process while the server started" in err
    assert "is SERVING" in err and "Traceback" not in err
