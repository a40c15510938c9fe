"""Certificates made in the test, with `cryptography`: a CA and leaves signed by it, as
cert-manager would issue them (server auth and client auth, DNS names and 127.0.0.1), and the
bad ones (expired, not yet valid, from another CA, without client auth)."""

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)
DAY = datetime.timedelta(days=1)
BOTH_USAGES = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)


@dataclasses.dataclass(frozen=True)
class Pem:
    cert: bytes
    key: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert.write_bytes(self.cert)
        key.write_bytes(self.key)
        return cert, key


class Authority:
    """A self-signed CA that issues leaves."""

    def __init__(self, name: str = "hedgerow-test-ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(NOW - DAY).not_valid_after(NOW + 30 * DAY)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                     .add_extension(x509.KeyUsage(
                         digital_signature=True, key_cert_sign=True, crl_sign=True,
                         content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False), True)
                     .sign(self.key, hashes.SHA256()))

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.pem)
        return path

    def issue(self, names: tuple[str, ...] = ("localhost",), *,
              not_before: datetime.datetime = NOW - DAY,
              not_after: datetime.datetime = NOW + 30 * DAY,
              usages: tuple = BOTH_USAGES, loopback: bool = True) -> Pem:
        """A leaf for `names` (and 127.0.0.1 with `loopback`)."""
        key = ec.generate_private_key(ec.SECP256R1())
        alt = [x509.DNSName(n) for n in names]
        if loopback:
            alt.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                   .issuer_name(self.name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(not_before).not_valid_after(not_after)
                   .add_extension(x509.SubjectAlternativeName(alt), False)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), True))
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Pem(cert=cert.public_bytes(serialization.Encoding.PEM),
                   key=key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
