"""Embedding spaces with real `hedgerow server` processes and the packaged model on CPU.

Two float32 servers agree on their fingerprint, in Info, /warmup and every answer; a bfloat16
server of the same weights is another space (dtype is one of the facts: docs/operator.md has
the measured cosines), yet within the default minimum cosine of a golden set recorded in
float32. `hedgerow guard record` writes the fingerprint a server of the same dtype reports.
A golden set the server does not match is reported, not refused: the operator judges it; one
it cannot read stops it at start, with one line and no traceback.
"""

import base64
import json
import subprocess

import grpc
import pytest

from hedgerow import golden_set, space
from hedgerow.golden_set import DEFAULT_MIN_COSINE
from hedgerow.warmup_report import parse_report, space_verdict
from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.conftest import child_env, free_port, hedgerow_command
from tests.server.conftest import embed_request, sentence

pytestmark = pytest.mark.slow
THREADS = ("--cpu-threads", "1")


@pytest.fixture(scope="module")
def golden_file(tmp_path_factory):
    """A golden set recorded in float32 from the packaged model, with the CLI."""
    path = tmp_path_factory.mktemp("golden") / "golden.json"
    done = subprocess.run(hedgerow_command("guard", "record", "--output", str(path),
                                           "--name", "minilm-golden"),
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def shuffled_golden_file(golden_file, tmp_path_factory):
    """The same texts with each vector moved to the next text: a space that does not match."""
    golden = golden_set.parse(golden_file.read_bytes())
    document = golden.document()
    document["vectors"] = document["vectors"][1:] + document["vectors"][:1]
    path = tmp_path_factory.mktemp("golden") / "shuffled.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def servers(start_server, golden_file, shuffled_golden_file):
    return {
        "float32": start_server(*THREADS),
        "float32-shuffled": start_server(*THREADS, "--golden-set", str(shuffled_golden_file)),
        "bfloat16": start_server(*THREADS, "--dtype", "bfloat16", "--golden-set",
                                 str(golden_file)),
    }


def _info(server) -> embed_pb2.InfoResponse:
    with grpc.insecure_channel(server.address) as channel:
        return embed_pb2_grpc.EmbedderStub(channel).Info(embed_pb2.InfoRequest(), timeout=30)


def _answers(server) -> tuple[embed_pb2.EmbedResponse, embed_pb2.ScoreResponse]:
    documents = [sentence(7592, 2088), sentence(2023, 2003, 1037)]
    query = embed_request([sentence(7592)] + documents)
    with grpc.insecure_channel(server.address) as channel:
        stub = embed_pb2_grpc.EmbedderStub(channel)
        embedded = stub.Embed(embed_request(documents), timeout=30)
        scored = stub.Score(embed_pb2.ScoreRequest(input_ids=query.input_ids,
                                                   cu_seqlens=query.cu_seqlens, top_n=1),
                            timeout=30)
    return embedded, scored


def test_two_servers_of_one_model_agree_on_the_fingerprint_everywhere(servers):
    first, second = servers["float32"], servers["float32-shuffled"]
    fingerprint = _info(first).space
    assert space.is_fingerprint(fingerprint)
    for server in (first, second):
        assert _info(server).space == fingerprint
        assert server.warmup()["space"] == fingerprint
        embedded, scored = _answers(server)
        assert embedded.space == scored.space == fingerprint
    facts = first.warmup()["space_facts"]
    assert facts["dtype"] == "float32" and facts["dimensions"] == 384
    assert facts == second.warmup()["space_facts"]


def test_float32_and_bfloat16_of_the_same_weights_are_two_spaces_within_the_guard(servers):
    full, half = _info(servers["float32"]).space, _info(servers["bfloat16"]).space
    assert full != half
    # The facts part differs (the dtype is a fact); the weights, tokenizer, config agree.
    assert full.split("-")[1] != half.split("-")[1]
    facts_full = servers["float32"].warmup()["space_facts"]
    facts_half = servers["bfloat16"].warmup()["space_facts"]
    assert {k for k in facts_full if facts_full[k] != facts_half[k]} == {"dtype"}
    # Its vectors stay within the default minimum of a golden set recorded in float32.
    report = parse_report(servers["bfloat16"].http_get("/warmup"))
    assert report.golden.texts == len(space.probe_texts())
    assert 0.9999 <= report.golden.min_cosine < 1.0
    verdict = space_verdict(report, DEFAULT_MIN_COSINE)
    assert verdict.matches and half in verdict.message


def test_guard_record_writes_the_fingerprint_a_server_of_that_dtype_reports(servers,
                                                                           golden_file):
    manifest = json.loads(golden_file.read_text())
    assert manifest["kind"] == "ConfigMap" and manifest["metadata"]["name"] == "minilm-golden"
    golden = golden_set.parse(golden_file.read_bytes())
    assert golden.fingerprint == _info(servers["float32"]).space
    assert golden.recorded_with["dtype"] == "float32" and golden.dimensions == 384
    assert len(base64.b64decode(golden.document()["vectors"][0])) == 4 * 384


def test_a_golden_set_the_server_does_not_match_is_reported_not_refused(servers):
    server = servers["float32-shuffled"]
    report = parse_report(server.http_get("/warmup"))
    assert report.serving and report.golden.min_cosine < 0.9
    verdict = space_verdict(report, DEFAULT_MIN_COSINE)
    assert verdict.matches is False and "below the minimum" in verdict.message
    assert "golden_min_cosine=" in server.log_text()


@pytest.mark.parametrize("content, said", [
    (None, "cannot read it: No such file or directory"),
    ("{not json", "is not JSON"),
    (json.dumps({"kind": "ConfigMap", "data": {"golden-set.json": json.dumps(
        {"format": "hedgerow.dev/golden-set/v1", "model": "m", "fingerprint": "s1-0"})}}),
     "fingerprint must look like s1-xxxxxxxx-xxxxxxxx"),
], ids=["missing", "not-json", "malformed"])
def test_a_golden_set_that_cannot_be_read_stops_the_server_with_one_line(tmp_path, content,
                                                                         said):
    path = tmp_path / "golden.json"
    if content is not None:
        path.write_text(content)
    done = subprocess.run(hedgerow_command("server", "--golden-set", str(path), "--port",
                                           str(free_port()), "--http-port", str(free_port())),
                          capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"hedgerow server: error: --golden-set {path}" in done.stderr and said in done.stderr
    assert "Traceback" not in done.stderr and "engine.load" not in done.stderr
