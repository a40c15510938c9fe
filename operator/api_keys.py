"""The gateway's API-key Secret (`spec.gateway.apiKeySecret`) as the operator sees it.

The gateway reads its keys file once at start, so a rotated Secret reaches the pods only when
they restart: the digest of the key's content is a gateway pod-template annotation, and a
changed Secret rolls the gateways (the rolling update keeps serving). The handlers read the
Secret on every reconcile (the resync timer included), so a rotation rolls within one resync
interval. Pure; the handlers do the reading. Knows nothing else about the gateway.
"""

import hashlib
from typing import Any, Mapping

from hedgerow.operator.spec import Service

SECRET_MISSING = "ApiKeySecretNotFound"
KEY_MISSING = "ApiKeySecretInvalid"


class SecretProblem(Exception):
    """The Secret cannot serve as written; `reason` is one CamelCase word."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def secret_ref(service: Service) -> Mapping[str, str] | None:
    """spec.gateway.apiKeySecret (name and key), None when the API is open."""
    return service.spec["gateway"].get("apiKeySecret")


def digest(service: Service, secret: Mapping[str, Any] | None) -> str:
    """Short digest of the keys in `secret` (the Secret spec.gateway.apiKeySecret names, as
    read; None when it does not exist), or SecretProblem saying what to fix."""
    ref = secret_ref(service)
    assert ref is not None
    name, key = ref["name"], ref["key"]
    if secret is None:
        raise SecretProblem(SECRET_MISSING,
                            f"Secret {name!r} (spec.gateway.apiKeySecret.name) does not exist "
                            f"in namespace {service.namespace!r}")
    value = (secret.get("data") or {}).get(key)
    if value is None:
        raise SecretProblem(KEY_MISSING, f"Secret {name!r} has no key {key!r} "
                                         "(spec.gateway.apiKeySecret.key)")
    return hashlib.sha256(value.encode()).hexdigest()[:16]
