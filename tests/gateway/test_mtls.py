"""Mutual TLS between real `hedgerow gateway` and `hedgerow server` processes, with
certificates made in the test: embeddings over mTLS equal the plaintext path's; a client
without a certificate, with one from another CA, or with an expired one is refused at the
handshake (a direct gRPC client), while health and reflection answer behind the same
credentials; a bad file stops either process at start with a one-line error."""

import subprocess
import urllib.request

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from hedgerow.commands.serve import server_serving
from hedgerow.wire import embed_pb2, embed_pb2_grpc
from tests.certs import DAY, NOW, Authority
from tests.children import RealGateway, RealServer
from tests.conftest import child_env, hedgerow_command

pytestmark = pytest.mark.slow

# The name the operator gives the servers' certificate; the certificate holds no IP, so the
# gateway, dialling 127.0.0.1, must check it for this name (--tls-server-name).
SERVER_NAME = "emb-server.ml.svc"
TEXTS = ["a hedge between two fields", "rows of hawthorn", "blackthorn"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    ca, other = Authority(), Authority("another-ca")
    files = {"ca": ca.write(directory / "ca.crt")}
    files["cert"], files["key"] = ca.issue((SERVER_NAME,), loopback=False).write(directory,
                                                                                  "tls")
    files["other_cert"], files["other_key"] = other.issue((SERVER_NAME,)).write(directory,
                                                                                 "other")
    files["expired_cert"], files["expired_key"] = ca.issue(
        (SERVER_NAME,), not_before=NOW - 10 * DAY, not_after=NOW - DAY).write(directory,
                                                                              "expired")
    return files


def _flags(pki, cert="cert", key="key"):
    return ("--tls-cert", str(pki[cert]), "--tls-key", str(pki[key]), "--tls-ca", str(pki["ca"]))


def _channel(address, pki, cert=None, key=None):
    """A secure channel trusting the CA, checking the server for SERVER_NAME, presenting
    `cert` (a key of `pki`) or no certificate at all."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].read_bytes(),
        private_key=pki[key].read_bytes() if key else None,
        certificate_chain=pki[cert].read_bytes() if cert else None)
    return grpc.secure_channel(address, credentials,
                               options=[("grpc.ssl_target_name_override", SERVER_NAME)])


def _tls_serving(address, pki) -> bool:
    with _channel(address, pki, "cert", "key") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                              timeout=2.0)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module")
def stacks(pki, tmp_path_factory):
    """A plaintext server and gateway, and an mTLS server and gateway, all ready."""
    logs = tmp_path_factory.mktemp("logs")
    plain = RealServer(logs / "plain-server.log")
    secure = RealServer(logs / "tls-server.log", *_flags(pki))
    procs = [plain, secure]
    try:
        plain.wait_serving()
        secure.wait_until(lambda: _tls_serving(secure.address, pki), "mTLS server")
        plain_gateway = RealGateway(logs / "plain-gateway.log", [plain.address])
        secure_gateway = RealGateway(logs / "tls-gateway.log", [secure.address], *_flags(pki),
                                     "--tls-server-name", SERVER_NAME)
        procs += [plain_gateway, secure_gateway]
        plain_gateway.wait_until(lambda: plain_gateway.ready_replicas() == 1, "gateway")
        secure_gateway.wait_until(lambda: secure_gateway.ready_replicas() == 1, "mTLS gateway")
        yield {"plain": plain_gateway, "secure": secure_gateway, "server": secure}
    finally:
        for proc in reversed(procs):
            proc.stop()


def _embeddings(gateway):
    answer = httpx.post(gateway.url + "/v1/embeddings", json={"input": TEXTS}, timeout=60)
    assert answer.status_code == 200, answer.text
    return [item["embedding"] for item in answer.json()["data"]]


def test_embeddings_over_mutual_tls_equal_the_plaintext_path(stacks):
    secure, plain = _embeddings(stacks["secure"]), _embeddings(stacks["plain"])
    assert len(secure) == len(TEXTS) and len(secure[0]) == 384
    assert secure == plain


def test_health_and_reflection_answer_behind_the_same_credentials(stacks, pki):
    address = stacks["server"].address
    assert _tls_serving(address, pki)
    with _channel(address, pki, "cert", "key") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        listed = {s.name for reply in replies for s in reply.list_services_response.service}
    assert "grpc.health.v1.Health" in listed and any("Embedder" in name for name in listed)
    # The kubelet's probe where gRPC speaks mutual TLS: the plaintext HTTP port's /readyz.
    url = f"http://127.0.0.1:{stacks['server'].http_port}/readyz"
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.status == 200


@pytest.mark.parametrize("cert", [None, "other_cert", "expired_cert"],
                         ids=["no-certificate", "another-ca", "expired"])
def test_a_client_without_a_valid_certificate_is_refused_at_the_handshake(stacks, pki, cert):
    key = cert.replace("cert", "key") if cert else None
    with _channel(stacks["server"].address, pki, cert, key) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            embed_pb2_grpc.EmbedderStub(channel).Info(embed_pb2.InfoRequest(), timeout=5)
        with pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
    # The same call with the valid certificate passes: the refusal is the certificate's.
    with _channel(stacks["server"].address, pki, "cert", "key") as channel:
        info = embed_pb2_grpc.EmbedderStub(channel).Info(embed_pb2.InfoRequest(), timeout=5)
    assert info.dimensions == 384


def test_plaintext_is_never_served_beside_tls(stacks):
    assert not server_serving(stacks["server"].address)


def _start_error(*args):
    done = subprocess.run(hedgerow_command(*args), env=child_env(), capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stderr.strip()


@pytest.mark.parametrize("command", ["server", "gateway"])
@pytest.mark.parametrize("break_it, message", [
    (lambda pki: {"cert": pki["cert"].with_name("missing.crt")}, "does not exist"),
    (lambda pki: {"key": pki["other_key"]}, "is not the key of the certificate"),
    (lambda pki: {"cert": pki["expired_cert"], "key": pki["expired_key"]},
     "the certificate has expired"),
    (lambda pki: {"cert": pki["other_cert"], "key": pki["other_key"]},
     "not signed by the CA"),
    (lambda pki: {"ca": pki["key"]}, "is not a PEM certificate"),
], ids=["missing", "wrong-key", "expired", "another-ca", "not-pem"])
def test_a_bad_file_stops_the_process_at_start_with_one_line(pki, command, break_it, message):
    files = {"cert": pki["cert"], "key": pki["key"], "ca": pki["ca"], **break_it(pki)}
    where = ("--servers", "127.0.0.1:1") if command == "gateway" else ()
    code, stderr = _start_error(command, *where, "--tls-cert", str(files["cert"]),
                                "--tls-key", str(files["key"]), "--tls-ca", str(files["ca"]))
    assert code == 2, stderr
    assert stderr.startswith(f"hedgerow {command}: error: ") and "\n" not in stderr, stderr
    assert message in stderr
