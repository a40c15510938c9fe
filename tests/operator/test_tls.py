"""spec.tls: both pods mount the Secret and pass the --tls-* flags, server probes move to
/readyz, the Secret's digest rolls the pods when it is rotated; a missing or malformed Secret
is Ready=False with its reason and no pod is written. Builders pure, then the real operator on
kmock, with certificates made in the test."""

import base64
import copy

import kubernetes_validate
import pytest

from hedgerow.errors import ConfigError
from hedgerow.operator import build_tls, handlers
from hedgerow.operator.manifests import build_all
from hedgerow.operator.spec import parse
from tests.certs import DAY, NOW, Authority

SECRET = "emb-tls"
SERVER_NAME = "emb-server.ml.svc"
BASE = {
    "apiVersion": "hedgerow.dev/v1alpha1", "kind": "EmbeddingService",
    "metadata": {"name": "emb", "namespace": "ml", "uid": "1234", "generation": 1},
    "spec": {"model": {"path": "/models/m"}, "server": {"image": "s:1"},
             "gateway": {"image": "g:1"}, "tls": {"secretName": SECRET}},
}


def _by_kind(manifests):
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def _container(deployment):
    return deployment["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("version", ("1.30.0", "1.33.0"))
def test_both_pods_mount_the_secret_and_pass_the_flags(version):
    children = _by_kind(build_all(parse(copy.deepcopy(BASE)), tls_digest="0123abcd"))
    for kind_name in (("Deployment", "emb-server"), ("Deployment", "emb-gateway")):
        deployment = children[kind_name]
        kubernetes_validate.validate(deployment, version, strict=True)
        pod = deployment["spec"]["template"]
        assert pod["metadata"]["annotations"]["hedgerow.dev/tls-hash"] == "0123abcd"
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "tls")
        assert volume["secret"]["secretName"] == SECRET
        assert {"name": "tls", "mountPath": "/etc/hedgerow/tls", "readOnly": True} in \
            _container(deployment)["volumeMounts"]
    tls_flags = ["--tls-cert=/etc/hedgerow/tls/tls.crt", "--tls-key=/etc/hedgerow/tls/tls.key",
                 "--tls-ca=/etc/hedgerow/tls/ca.crt"]
    server = _container(children[("Deployment", "emb-server")])
    gateway = _container(children[("Deployment", "emb-gateway")])
    assert server["args"] == ["server", *tls_flags]
    assert gateway["args"] == ["gateway", *tls_flags, f"--tls-server-name={SERVER_NAME}"]
    for probe in ("startupProbe", "readinessProbe"):
        assert server[probe]["httpGet"] == {"path": "/readyz", "port": 9090}
        assert "grpc" not in server[probe]


def test_without_tls_the_probes_stay_grpc():
    body = copy.deepcopy(BASE)
    del body["spec"]["tls"]
    server = _container(_by_kind(build_all(parse(body)))[("Deployment", "emb-server")])
    assert server["args"] == ["server"]
    assert server["readinessProbe"]["grpc"] == {"port": 50051}


def _secret_data(pem, ca_pem):
    return {"tls.crt": base64.b64encode(pem.cert).decode(),
            "tls.key": base64.b64encode(pem.key).decode(),
            "ca.crt": base64.b64encode(ca_pem).decode()}


def _secret(data):
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET, "namespace": "ml", "resourceVersion": "1"},
            "data": data}


@pytest.fixture(scope="module")
def ca():
    return Authority()


def test_check_secret_names_what_is_wrong(ca):
    service = parse(copy.deepcopy(BASE))
    good = _secret_data(ca.issue((SERVER_NAME,)), ca.pem)
    assert len(build_tls.check_secret(_secret(good), service)) == 16
    with pytest.raises(ConfigError, match="has no ca.crt"):
        build_tls.check_secret(_secret({**good, "ca.crt": ""}), service)
    with pytest.raises(ConfigError, match="key tls.crt is not a PEM certificate"):
        build_tls.check_secret(_secret({**good, "tls.crt": good["tls.key"]}), service)
    with pytest.raises(ConfigError, match="not base64"):
        build_tls.check_secret(_secret({**good, "ca.crt": "%%%"}), service)
    # The gateways check the servers' certificate for <name>-server.<namespace>.svc.
    other_name = _secret_data(ca.issue(("emb.example.com",), loopback=False), ca.pem)
    with pytest.raises(ConfigError, match=f"does not name {SERVER_NAME}"):
        build_tls.check_secret(_secret(other_name), service)


# ---- the real operator on kmock --------------------------------------------------------------

SECRETS = "/api/v1/namespaces/ml/secrets"


async def _deployment(cluster, name):
    return await cluster.get(cluster.child_path("apps/v1", "deployments", name))


async def _reason(cluster, reason):
    body = await cluster.get(f"{cluster.cr_path}/emb")
    for cond in (body or {}).get("status", {}).get("conditions", []):
        if cond["type"] == "Ready" and cond.get("reason") == reason:
            return cond
    return None


def _tls_resource(cluster):
    body = cluster.resource("emb")
    body["spec"]["tls"] = {"secretName": SECRET}
    return body


def _digests(server, gateway):
    return tuple(d["spec"]["template"]["metadata"]["annotations"].get(build_tls.HASH_ANNOTATION)
                 for d in (server, gateway))


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_rotated_secret_rolls_both_deployments(cluster, ca):
    await cluster.post(SECRETS, _secret(_secret_data(ca.issue((SERVER_NAME,)), ca.pem)))
    await cluster.post(cluster.cr_path, _tls_resource(cluster))
    server = await cluster.eventually(lambda: _deployment(cluster, "emb-server"), "servers")
    gateway = await cluster.eventually(lambda: _deployment(cluster, "emb-gateway"), "gateways")
    first = _digests(server, gateway)
    assert first[0] and first[0] == first[1]
    assert "--tls-server-name=emb-server.ml.svc" in _container(gateway)["args"]
    assert _container(server)["readinessProbe"]["httpGet"]["path"] == "/readyz"

    # cert-manager renews the certificate: the next resync writes the new digest.
    renewed = _secret_data(ca.issue((SERVER_NAME,)), ca.pem)
    await cluster.patch(f"{SECRETS}/{SECRET}", {"data": renewed})

    async def rolled():
        now = _digests(await _deployment(cluster, "emb-server"),
                       await _deployment(cluster, "emb-gateway"))
        return now if now[0] != first[0] and now[0] == now[1] else None

    await cluster.eventually(rolled, "both pod templates carry the renewed Secret's digest")


@pytest.mark.asyncio
@pytest.mark.slow
async def test_a_missing_secret_is_ready_false_and_no_pod_is_written(cluster):
    await cluster.post(cluster.cr_path, _tls_resource(cluster))
    cond = await cluster.eventually(lambda: _reason(cluster, handlers.TLS_SECRET_MISSING),
                                    "Ready=False TLSSecretNotFound")
    assert f"Secret '{SECRET}' (spec.tls.secretName) does not exist" in cond["message"]
    assert await _deployment(cluster, "emb-server") is None
    assert await _deployment(cluster, "emb-gateway") is None


@pytest.mark.asyncio
@pytest.mark.slow
@pytest.mark.parametrize("spoil, message", [
    (lambda ca, data: data.pop("ca.crt"), "has no ca.crt"),
    (lambda ca, data: data.update(_secret_data(ca.issue(
        (SERVER_NAME,), not_before=NOW - 10 * DAY, not_after=NOW - DAY), ca.pem)),
     "the certificate has expired"),
    (lambda ca, data: data.update({"tls.key": _secret_data(ca.issue(), ca.pem)["tls.key"]}),
     "key tls.key is not the key of the certificate"),
    (lambda ca, data: data.update(_secret_data(Authority("other").issue((SERVER_NAME,)),
                                               ca.pem)),
     "not signed by the CA"),
], ids=["no-ca", "expired", "wrong-key", "another-ca"])
async def test_a_malformed_secret_is_ready_false_and_no_pod_is_written(cluster, ca, spoil,
                                                                       message):
    data = _secret_data(ca.issue((SERVER_NAME,)), ca.pem)
    spoil(ca, data)
    await cluster.post(SECRETS, _secret(data))
    await cluster.post(cluster.cr_path, _tls_resource(cluster))
    cond = await cluster.eventually(lambda: _reason(cluster, handlers.TLS_SECRET_INVALID),
                                    "Ready=False TLSSecretInvalid")
    assert message in cond["message"], cond["message"]
    assert await _deployment(cluster, "emb-server") is None
    assert await _deployment(cluster, "emb-gateway") is None
