"""Mutual TLS on gRPC between gateways and servers: the certificate files, checked at start.

Owns the three settings both processes declare (`--tls-cert`, `--tls-key`, `--tls-ca`), the
checks that turn a bad file into a one-line error when the settings are read rather than a
failed handshake later (a missing file, a file that is not PEM, a key that does not match its
certificate, a certificate expired or not yet valid, one the CA did not sign, one without the
server-auth and client-auth usages), and the checked PEM bytes, from which the server
(server/app.py) and the gateway (gateway/replicas.py) build their gRPC credentials. Each
process presents the same kind of certificate: servers require a client certificate signed by
the CA, gateways check the server's against it. The checks are the standard library's `ssl`
(OpenSSL's own verification, in a handshake in memory with the certificate on both sides), so
the settings modules stay importable without grpc. Knows nothing about which process uses
them.
"""

import dataclasses
import ssl
from pathlib import Path
from typing import Any

from hedgerow.errors import ConfigError
from hedgerow.settings import setting

FLAGS = ("--tls-cert", "--tls-key", "--tls-ca")
_HANDSHAKE_ROUNDS = 8
# OpenSSL's verification results (X509_V_ERR_*), as a hint each.
_CERT_NOT_YET_VALID, _CERT_HAS_EXPIRED = 9, 10
_HINTS = {
    _CERT_NOT_YET_VALID: "the certificate is not valid yet (its notBefore is in the future: "
                         "a clock behind, or a certificate issued for later)",
    _CERT_HAS_EXPIRED: "the certificate has expired (its notAfter has passed): renew it",
    2: "the CA file does not hold the certificate's issuer",
    7: "the certificate's signature does not verify against the CA",
    18: "the certificate is self-signed and not the CA: give the CA that signed it",
    19: "the certificate was not signed by the CA in the CA file",
    20: "the certificate was not signed by the CA in the CA file",
    21: "the certificate was not signed by the CA in the CA file",
    26: "the certificate lacks a usage both sides need: it must allow server auth and client "
        "auth (extended key usage serverAuth and clientAuth)",
}


def cert_setting(role: str) -> Any:
    return setting(None, f"PEM certificate this {role} presents on gRPC, for mutual TLS "
                         "(with --tls-key and --tls-ca; all three or none). It must be signed "
                         "by the CA and allow both server auth and client auth. Unset: "
                         "plaintext gRPC.", unit="path")


def key_setting(role: str) -> Any:
    return setting(None, f"PEM private key of --tls-cert for this {role}.", unit="path")


def ca_setting(role: str) -> Any:
    peer = "the clients (gateways) must present" if role == "server" \
        else "the servers must present"
    return setting(None, f"PEM CA certificate that signs the certificates {peer}.",
                   unit="path")


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The PEM bytes of a checked certificate, its key and the CA."""

    cert: bytes
    key: bytes = dataclasses.field(repr=False)  # never in a log line
    ca: bytes


def load(cert: Path | None, key: Path | None, ca: Path | None) -> TlsFiles | None:
    """The checked files, None when none is given; ConfigError naming the flag and the file
    when one is missing, not PEM, or does not fit the others."""
    given = [path is not None for path in (cert, key, ca)]
    if not any(given):
        return None
    if not all(given):
        missing = ", ".join(flag for flag, ok in zip(FLAGS, given) if not ok)
        raise ConfigError(f"mutual TLS needs --tls-cert, --tls-key and --tls-ca together; "
                          f"{missing} missing (give all three, or none for plaintext gRPC)")
    assert cert is not None and key is not None and ca is not None
    files = TlsFiles(cert=_read_pem(cert, "--tls-cert", b"CERTIFICATE"),
                     key=_read_pem(key, "--tls-key", b"PRIVATE KEY"),
                     ca=_read_pem(ca, "--tls-ca", b"CERTIFICATE"))
    _check(files, cert, key, ca)
    return files


def _read_pem(path: Path, flag: str, label: bytes) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{flag}: {path} does not exist") from None
    except OSError as error:
        raise ConfigError(f"{flag}: cannot read {path}: {error.strerror or error}") from None
    if b"-----BEGIN " not in data or label not in data.split(b"-----BEGIN ", 1)[1][:40]:
        what = "a certificate" if label == b"CERTIFICATE" else "a private key"
        raise ConfigError(f"{flag}: {path} is not PEM {what} (no -----BEGIN ...{label.decode()}"
                          "----- block)")
    return data


def _check(files: TlsFiles, cert: Path, key: Path, ca: Path) -> None:
    """The key matches the certificate, and a handshake in memory with it on both sides, each
    trusting only the CA, verifies: signed by the CA, within its validity, fit for server and
    client auth."""
    contexts = []
    for side in (ssl.PROTOCOL_TLS_SERVER, ssl.PROTOCOL_TLS_CLIENT):
        context = ssl.SSLContext(side)
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as error:
            if error.reason == "KEY_VALUES_MISMATCH":
                raise ConfigError(f"--tls-key: {key} is not the key of the certificate "
                                  f"{cert} (--tls-cert)") from None
            raise ConfigError(f"--tls-cert/--tls-key: OpenSSL cannot load {cert} with {key}: "
                              f"{error.reason or error}") from None
        try:
            context.load_verify_locations(cafile=ca)
        except ssl.SSLError as error:
            raise ConfigError(f"--tls-ca: OpenSSL cannot load {ca}: {error.reason or error}"
                              ) from None
        context.verify_mode = ssl.CERT_REQUIRED
        contexts.append(context)
    server, client = contexts
    client.check_hostname = False  # the name is the channel's to check (--tls-server-name)
    try:
        _handshake(server, client)
    except ssl.SSLCertVerificationError as error:
        hint = _HINTS.get(error.verify_code, error.verify_message)
        raise ConfigError(f"--tls-cert: {cert} does not verify against --tls-ca {ca}: "
                          f"{hint} (OpenSSL: {error.verify_message})") from None
    except ssl.SSLError as error:
        raise ConfigError(f"--tls-cert: {cert} cannot be used with --tls-ca {ca}: "
                          f"{error.reason or error}") from None


def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> None:
    """A TLS handshake between the two contexts over memory buffers; raises what OpenSSL
    raises on either side (the client judges the server's certificate, the server the
    client's)."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(client_in, client_out, server_side=False)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    done = set()
    for _ in range(_HANDSHAKE_ROUNDS):
        for side, outgoing, peer in ((client, client_out, server_in),
                                     (server, server_out, client_in)):
            if side not in done:
                try:
                    side.do_handshake()
                    done.add(side)
                except ssl.SSLWantReadError:
                    pass
            peer.write(outgoing.read())
        if len(done) == 2:
            return
    raise ConfigError("the certificate check's TLS handshake in memory did not complete")
