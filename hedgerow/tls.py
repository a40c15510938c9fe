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
import tempfile
from pathlib import Path
from typing import Any

from hedgerow.errors import ConfigError
from hedgerow.settings import setting

FLAGS = ("--tls-cert", "--tls-key", "--tls-ca")
_HANDSHAKE_ROUNDS = 8
# OpenSSL's verification results (X509_V_ERR_*) and what each means here.
_HOSTNAME_MISMATCH = 62
_NOT_SIGNED_BY_THE_CA = "the certificate was not signed by the CA"
_HINTS = {
    2: _NOT_SIGNED_BY_THE_CA,  # UNABLE_TO_GET_ISSUER_CERT
    7: "the certificate's signature does not verify against the CA",  # CERT_SIGNATURE_FAILURE
    9: "the certificate is not valid yet (its notBefore is in the future: a clock behind, or "
       "a certificate issued for later)",  # CERT_NOT_YET_VALID
    10: "the certificate has expired (its notAfter has passed): renew it",  # CERT_HAS_EXPIRED
    18: "the certificate is self-signed and not the CA: give the CA that signed it",
    19: _NOT_SIGNED_BY_THE_CA,  # SELF_SIGNED_CERT_IN_CHAIN
    20: _NOT_SIGNED_BY_THE_CA,  # UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    21: _NOT_SIGNED_BY_THE_CA,  # UNABLE_TO_VERIFY_LEAF_SIGNATURE
    26: "the certificate lacks a usage both sides need: it must allow server auth and client "
        "auth (extended key usage serverAuth and clientAuth)",  # INVALID_PURPOSE
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
    paths = (cert, key, ca)
    if not any(paths):
        return None
    if not all(paths):
        missing = ", ".join(flag for flag, path in zip(FLAGS, paths) if path is None)
        raise ConfigError(f"mutual TLS needs --tls-cert, --tls-key and --tls-ca together; "
                          f"{missing} missing (give all three, or none for plaintext gRPC)")
    data = [_read(path, flag) for path, flag in zip(paths, FLAGS)]
    files = TlsFiles(*data)
    check(files, tuple(f"{flag} {path}" for flag, path in zip(FLAGS, paths)))
    return files


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{flag}: {path} does not exist") from None
    except OSError as error:
        raise ConfigError(f"{flag}: cannot read {path}: {error.strerror or error}") from None


def _pem(data: bytes, label: bytes, name: str) -> None:
    begin = b"-----BEGIN "
    if begin not in data or label not in data.split(begin, 1)[1][:40]:
        what = "certificate" if label == b"CERTIFICATE" else "private key"
        raise ConfigError(f"{name} is not a PEM {what} (no -----BEGIN ...{label.decode()}----- "
                          "block)")


def check(files: TlsFiles, names: tuple[str, str, str], server_name: str | None = None) -> None:
    """ConfigError unless the certificate, key and CA (`names` says where each came from, for
    the message) are PEM, the key is the certificate's, and a handshake in memory with the
    certificate on both sides, each trusting only the CA, verifies: signed by the CA, within
    its validity, fit for server and client auth and, given `server_name`, naming it."""
    cert_name, key_name, ca_name = names
    _pem(files.cert, b"CERTIFICATE", cert_name)
    _pem(files.key, b"PRIVATE KEY", key_name)
    _pem(files.ca, b"CERTIFICATE", ca_name)
    # OpenSSL loads a certificate chain from files only: a private directory for a moment.
    with tempfile.TemporaryDirectory(prefix="hedgerow-tls-") as scratch:
        cert, key = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
        cert.write_bytes(files.cert)
        key.touch(mode=0o600)
        key.write_bytes(files.key)
        contexts = [_context(side, cert, key, files.ca, names)
                    for side in (ssl.PROTOCOL_TLS_SERVER, ssl.PROTOCOL_TLS_CLIENT)]
    server, client = contexts
    client.check_hostname = server_name is not None
    try:
        _handshake(server, client, server_name)
    except ssl.SSLCertVerificationError as error:
        hint = _HINTS.get(error.verify_code, error.verify_message)
        if error.verify_code == _HOSTNAME_MISMATCH:
            hint = f"the certificate does not name {server_name} (add it to its DNS names)"
        raise ConfigError(f"{cert_name} does not verify against {ca_name}: {hint} (OpenSSL: "
                          f"{error.verify_message})") from None
    except ssl.SSLError as error:
        raise ConfigError(f"{cert_name} cannot be used with {ca_name}: "
                          f"{error.reason or error}") from None


def _context(side: int, cert: Path, key: Path, ca: bytes,
             names: tuple[str, str, str]) -> ssl.SSLContext:
    cert_name, key_name, ca_name = names
    context = ssl.SSLContext(side)
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{key_name} is not the key of the certificate {cert_name}"
                              ) from None
        raise ConfigError(f"OpenSSL cannot load {cert_name} with {key_name}: "
                          f"{error.reason or error}") from None
    try:
        context.load_verify_locations(cadata=ca.decode("ascii", "replace"))
    except ssl.SSLError as error:
        raise ConfigError(f"OpenSSL cannot load {ca_name}: {error.reason or error}") from None
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext,
               server_name: str | None) -> None:
    """A TLS handshake between the two contexts over memory buffers; raises what OpenSSL
    raises on either side (the client judges the server's certificate, the server the
    client's)."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(client_in, client_out, server_side=False,
                                     server_hostname=server_name)
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
