"""hedgerow/tls.py: the certificate checks at start, each bad file with its own message, on
certificates made here with `cryptography`."""

import pytest

from hedgerow import tls
from hedgerow.errors import ConfigError
from tests.certs import DAY, NOW, Authority


@pytest.fixture(scope="module")
def ca():
    return Authority()


def _files(tmp_path, ca, pem=None, authority=None):
    cert, key = (pem or ca.issue()).write(tmp_path, "leaf")
    return cert, key, (authority or ca).write(tmp_path / "ca.crt")


def test_good_files_load(tmp_path, ca):
    cert, key, ca_path = _files(tmp_path, ca)
    files = tls.load(cert, key, ca_path)
    assert files.cert == cert.read_bytes() and files.ca == ca_path.read_bytes()
    assert tls.load(None, None, None) is None


def test_all_three_or_none(tmp_path, ca):
    cert, key, _ = _files(tmp_path, ca)
    with pytest.raises(ConfigError, match="--tls-ca missing"):
        tls.load(cert, key, None)


def test_missing_file(tmp_path, ca):
    cert, key, ca_path = _files(tmp_path, ca)
    with pytest.raises(ConfigError, match=r"--tls-key: .*nope.key does not exist"):
        tls.load(cert, tmp_path / "nope.key", ca_path)


def test_not_pem(tmp_path, ca):
    cert, key, ca_path = _files(tmp_path, ca)
    ca_path.write_bytes(b"not a certificate\n")
    with pytest.raises(ConfigError, match="--tls-ca .* is not a PEM certificate"):
        tls.load(cert, key, ca_path)
    cert.write_bytes(key.read_bytes())
    with pytest.raises(ConfigError, match="--tls-cert .* is not a PEM certificate"):
        tls.load(cert, key, ca_path)


def test_key_of_another_certificate(tmp_path, ca):
    cert, _, ca_path = _files(tmp_path, ca)
    _, other_key = ca.issue().write(tmp_path, "other")
    with pytest.raises(ConfigError, match="is not the key of the certificate"):
        tls.load(cert, other_key, ca_path)


@pytest.mark.parametrize("window, message", [
    ((NOW - 10 * DAY, NOW - DAY), "the certificate has expired"),
    ((NOW + DAY, NOW + 10 * DAY), "the certificate is not valid yet"),
])
def test_outside_its_validity(tmp_path, ca, window, message):
    pem = ca.issue(not_before=window[0], not_after=window[1])
    with pytest.raises(ConfigError, match=message):
        tls.load(*_files(tmp_path, ca, pem))


def test_signed_by_another_ca(tmp_path, ca):
    with pytest.raises(ConfigError, match="not signed by the CA"):
        tls.load(*_files(tmp_path, ca, Authority("other-ca").issue()))


def test_a_certificate_for_server_auth_only(tmp_path, ca):
    from cryptography.x509.oid import ExtendedKeyUsageOID

    pem = ca.issue(usages=(ExtendedKeyUsageOID.SERVER_AUTH,))
    with pytest.raises(ConfigError, match="server auth and client auth"):
        tls.load(*_files(tmp_path, ca, pem))


def test_the_settings_refuse_half_a_configuration(tmp_path, ca):
    from hedgerow.gateway_settings import GatewaySettings
    from hedgerow.server_settings import ServerSettings

    cert, key, ca_path = _files(tmp_path, ca)
    with pytest.raises(ConfigError, match="--tls-key, --tls-ca missing"):
        ServerSettings(tls_cert=cert)
    with pytest.raises(ConfigError, match="--tls-server-name is for mutual TLS"):
        GatewaySettings(servers=("127.0.0.1:50051",), tls_server_name="emb-server.ml.svc")
    settings = GatewaySettings(servers=("127.0.0.1:50051",), tls_cert=cert, tls_key=key,
                               tls_ca=ca_path, tls_server_name="emb-server.ml.svc")
    assert settings.tls_files().ca == ca_path.read_bytes()
