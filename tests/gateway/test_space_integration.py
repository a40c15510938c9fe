"""A real `hedgerow gateway` in front of two real servers of two embedding spaces: the packaged
model in float32 and in bfloat16. No answer mixes them; each names the space that embedded it;
a request whose space leaves while its chunks are out is refused with 409 rather than finished
in the other; OpenAI's client ignores the extra field; `hedgerow guard check` holds the gateway
to a golden set. The servers' own outputs are the references. A float32 row does not depend on
the batch it ran in, so an answer in the float32 space must equal that server's rows. A
bfloat16 row can: on an Intel Xeon with AMX, a sequence embedded alone and the same sequence
among 47 others differed by up to 1.2e-3. So an answer in the bfloat16 space must hold no
float32 row and match the bfloat16 server's rows to the dtype gate's cosine."""

import json
import os
import signal
import subprocess
import threading
import time

import grpc
import httpx
import numpy as np
import pytest
from openai import OpenAI

from hedgerow import golden_set
from hedgerow.server.convert import decode_embeddings
from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.children import RealGateway, RealServer
from tests.conftest import child_env, hedgerow_command

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
TEXTS = [f"hedge number {i} " + "bramble " * (i % 7) for i in range(48)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    directory = tmp_path_factory.mktemp("spaces")
    servers = {dtype: RealServer(directory / f"{dtype}.log", "--dtype", dtype,
                                 "--cpu-threads", "1")
               for dtype in ("float32", "bfloat16")}
    try:
        for server in servers.values():
            server.wait_serving()
        gateway = RealGateway(directory / "gateway.log",
                              [s.address for s in servers.values()],
                              "--chunk-tokens", "64")
        gateway.wait_until(lambda: gateway.ready_replicas() == 2, "gateway")
        yield servers, gateway
        assert gateway.stop() == 0, gateway.log_text()
    finally:
        for server in servers.values():
            server.stop()


def _direct(server, sequences):
    """The server's own rows for these token-id sequences, and its space."""
    flat = np.asarray([t for s in sequences for t in s], "<i4").tobytes()
    cu = np.cumsum([0] + [len(s) for s in sequences]).astype("<i4").tobytes()
    with grpc.insecure_channel(server.address) as channel:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        answer = stub.Embed(embed_pb2.EmbedRequest(input_ids=flat, cu_seqlens=cu), timeout=60)
        info = stub.Info(embed_pb2.InfoRequest(), timeout=30)
    return decode_embeddings(answer), info.space


def test_a_gateway_in_front_of_two_spaces_never_mixes_them_in_one_answer(stack):
    servers, gateway = stack
    tokenized = httpx.post(gateway.url + "/tokenize", json={"input": TEXTS}, timeout=60).json()
    sequences = [item["tokens"] for item in tokenized["data"]]
    assert sum(len(s) for s in sequences) > 4 * 64, "the request must span several chunks"
    float32, float32_space = _direct(servers["float32"], sequences)
    bfloat16, bfloat16_space = _direct(servers["bfloat16"], sequences)
    assert float32_space != bfloat16_space, "float32 and bfloat16 are two spaces"
    answered = set()
    for _ in range(6):
        answer = httpx.post(gateway.url + "/v1/embeddings",
                            json={"model": MODEL, "input": TEXTS}, timeout=120)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        space = answer.headers["x-embedding-space"]
        assert body["embedding_space"] == space and space in {float32_space, bfloat16_space}
        got = np.asarray([item["embedding"] for item in body["data"]], np.float32)
        if space == float32_space:
            np.testing.assert_allclose(got, float32, rtol=0, atol=1e-6)
        else:
            from_float32 = np.abs(got - float32).max(axis=1) <= 1e-6
            assert not from_float32.any(), f"float32 rows {np.flatnonzero(from_float32)}"
            assert (got * bfloat16).sum(axis=1).min() >= 0.9999  # unit rows: the cosines
        answered.add(space)
    assert answered == {float32_space, bfloat16_space}, "requests spread over both spaces"


def _in_flight(gateway, address: str) -> float:
    """The tokens the gateway has sent to the replica at `address` and not had answered."""
    text = httpx.get(gateway.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("hedgerow_gateway_replica_in_flight_tokens{")
               and f'"{address}"' in line)


class _Request(threading.Thread):
    """POST /v1/embeddings in the background; `answer` once it returns."""

    def __init__(self, gateway) -> None:
        super().__init__(daemon=True)
        self.gateway, self.answer = gateway, None
        self.start()

    def run(self) -> None:
        self.answer = httpx.post(self.gateway.url + "/v1/embeddings",
                                 json={"model": MODEL, "input": TEXTS}, timeout=120)


def test_a_request_whose_space_leaves_mid_way_is_refused_not_finished_in_the_other(tmp_path):
    """The float32 server admits two chunks at a time and is frozen (SIGSTOP), so a request
    bound to its space has chunks sent and the rest waiting in the gateway. It is then told to
    drain (SIGTERM, SIGCONT): what it admitted it answers, the rest has only the bfloat16 server
    left, and the request is a 409, not an answer with rows of both."""
    leaving = RealServer(tmp_path / "float32.log", "--cpu-threads", "1",
                         "--max-inflight-tokens", "128", "--max-request-tokens", "128")
    staying = RealServer(tmp_path / "bfloat16.log", "--dtype", "bfloat16",
                         "--cpu-threads", "1")
    gateway = None
    try:
        for server in (leaving, staying):
            server.wait_serving()
        gateway = RealGateway(tmp_path / "gateway.log",
                              [leaving.address, staying.address],
                              "--chunk-tokens", "64", "--workers", "1")
        gateway.wait_until(lambda: gateway.ready_replicas() == 2, "gateway")
        leaving.proc.send_signal(signal.SIGSTOP)
        # Equal replicas take turns binding requests: by the second, one is bound to the frozen
        # server's space (a request bound to the other's finishes there, in its space).
        pending = None
        for _ in range(2):
            request = _Request(gateway)
            deadline = time.monotonic() + 60
            while request.is_alive() and time.monotonic() < deadline:
                if _in_flight(gateway, leaving.address) > 0:
                    pending = request
                    break
                time.sleep(0.05)
            if pending is not None:
                break
            request.join(1)
            assert request.answer is not None and request.answer.status_code == 200, \
                request.answer and request.answer.text
            assert request.answer.headers["x-embedding-space"] == _direct(staying, [[101, 102]])[1]
        assert pending is not None, "no request was bound to the frozen server's space"
        time.sleep(0.3)  # the rest of its chunks wait in the gateway for room on that server
        assert _in_flight(gateway, leaving.address) <= 128
        leaving.proc.send_signal(signal.SIGTERM)
        leaving.proc.send_signal(signal.SIGCONT)
        pending.join(60)
        answer = pending.answer
        assert answer is not None and answer.status_code == 409, answer and answer.text
        error = answer.json()["error"]
        assert error["code"] == "embedding_space_changed" and error["type"] == "conflict_error"
        assert "would mix two embedding spaces" in error["message"]
        assert leaving.proc.wait(60) == 0, leaving.log_text()
        # What follows is served whole in the space that stayed.
        answer = httpx.post(gateway.url + "/v1/embeddings", json={"model": MODEL, "input": TEXTS},
                            timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-embedding-space"] == _direct(staying, [[101, 102]])[1]
    finally:
        if leaving.proc.poll() is None:
            os.kill(leaving.proc.pid, signal.SIGCONT)
        if gateway is not None:
            gateway.stop()
        for server in (leaving, staying):
            server.stop()


def test_openai_clients_ignore_the_space_field(stack):
    _, gateway = stack
    client = OpenAI(base_url=gateway.url + "/v1", api_key="unused")
    result = client.embeddings.create(model=MODEL, input=TEXTS[:3])
    assert len(result.data) == 3 and len(result.data[0].embedding) == 384


@pytest.fixture(scope="module")
def golden_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("golden") / "golden.json"
    done = subprocess.run(hedgerow_command("guard", "record", "--output", str(path)),
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return path


def _check(url, golden, *flags):
    done = subprocess.run(hedgerow_command("guard", "check", url, "--golden", str(golden),
                                           *flags),
                          capture_output=True, text=True, env=child_env(), timeout=300)
    return done.returncode, done.stdout, done.stderr


def test_guard_check_holds_a_gateway_to_its_golden_set(stack, golden_file, tmp_path):
    servers, gateway = stack
    code, out, err = _check(gateway.url, golden_file)
    assert code == 0, out + err
    report = json.loads(out)
    assert report["matches"] is True and report["min_cosine"] >= 0.9999
    assert report["space"] in {_direct(s, [[101, 102]])[1] for s in servers.values()}
    # Another space: the same texts, each vector moved to the next text.
    document = golden_set.parse(golden_file.read_bytes()).document()
    document["vectors"] = document["vectors"][1:] + document["vectors"][:1]
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(document))
    code, out, err = _check(gateway.url, moved)
    assert code == 1, out + err
    assert json.loads(out)["matches"] is False and "below the minimum" in out
    code, _, err = _check("http://127.0.0.1:9", golden_file)
    assert code == 2 and "cannot reach http://127.0.0.1:9/v1/embeddings" in err
