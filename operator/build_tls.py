"""spec.tls in the pods: the Secret mounted, the processes' --tls-* flags, and the Secret's check.

Pure functions; no I/O. With `spec.tls.secretName` both Deployments mount the Secret read-only
at /etc/hedgerow/tls and pass `--tls-cert`, `--tls-key` and `--tls-ca` (the gateways also
`--tls-server-name <name>-server.<namespace>.svc`, the name their server certificates are
checked for: they dial pod IPs). `check_secret` judges a Secret as read from the API with the
same checks the processes make at start (hedgerow/tls.py), so a bad one is a condition on the
resource before any pod is written, and returns its content digest, a pod-template annotation:
a rotated certificate rolls the pods, which read the files once at start. Knows nothing about
the API server.
"""

import base64
import binascii
import hashlib
from typing import Any, Mapping

from hedgerow import tls
from hedgerow.errors import ConfigError
from hedgerow.operator import names
from hedgerow.operator.spec import Service

VOLUME = "tls"
DIR = "/etc/hedgerow/tls"
# The keys of a kubernetes.io/tls Secret, and the CA cert-manager adds beside them.
KEYS = ("tls.crt", "tls.key", "ca.crt")
HASH_ANNOTATION = "hedgerow.dev/tls-hash"


def enabled(service: Service) -> bool:
    return "tls" in service.spec


def server_name(service: Service) -> str:
    """The name the servers' certificate must hold: their headless Service's."""
    return f"{names.server_name(service)}.{service.namespace}.svc"


def volumes(service: Service) -> list[dict]:
    if not enabled(service):
        return []
    return [{"name": VOLUME, "secret": {"secretName": service.spec["tls"]["secretName"],
                                        "items": [{"key": key, "path": key} for key in KEYS],
                                        "defaultMode": 0o440}}]


def mounts(service: Service) -> list[dict]:
    return [{"name": VOLUME, "mountPath": DIR, "readOnly": True}] if enabled(service) else []


def args(service: Service, component: names.Component) -> list[str]:
    """The process's --tls-* flags (none without spec.tls)."""
    if not enabled(service):
        return []
    flags = [f"{flag}={DIR}/{key}" for flag, key in zip(tls.FLAGS, KEYS)]
    if component == "gateway":
        flags.append(f"--tls-server-name={server_name(service)}")
    return flags


def annotations(digest: str | None) -> dict[str, str]:
    return {HASH_ANNOTATION: digest} if digest else {}


def check_secret(secret: Mapping[str, Any], service: Service) -> str:
    """The Secret's content digest; ConfigError saying what is wrong with it: a key missing,
    not base64, not PEM, certificates that the processes would refuse at start, or a
    certificate without the name the gateways check the servers' for."""
    name = service.spec["tls"]["secretName"]
    data = secret.get("data") or {}
    missing = [key for key in KEYS if not data.get(key)]
    if missing:
        raise ConfigError(f"Secret {name!r} (spec.tls.secretName) has no "
                          f"{', '.join(missing)}: it needs {', '.join(KEYS)} (a "
                          "kubernetes.io/tls Secret with the CA, as cert-manager writes it)")
    try:
        decoded = [base64.b64decode(data[key], validate=True) for key in KEYS]
    except (binascii.Error, ValueError):
        raise ConfigError(f"Secret {name!r}: a value is not base64") from None
    tls.check(tls.TlsFiles(*decoded), tuple(f"Secret {name!r} key {key}" for key in KEYS),
              server_name(service))
    digest = hashlib.sha256()
    for value in decoded:
        digest.update(hashlib.sha256(value).digest())
    return digest.hexdigest()[:16]
