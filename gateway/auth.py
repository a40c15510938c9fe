"""Optional API keys: bearer tokens from a file and/or a setting.

Owns loading the accepted keys and checking an `Authorization: Bearer KEY` header in constant
time. With no keys configured every request is accepted. Knows nothing about routes.
"""

import hmac
from pathlib import Path

from hedgerow.errors import ConfigError
from hedgerow.gateway.errors import AuthenticationError


def load_keys(keys: tuple[str, ...], keys_file: Path | None) -> tuple[str, ...]:
    """Keys from the setting plus one per line of `keys_file` (blank and # lines skipped)."""
    found = [key.strip() for key in keys if key.strip()]
    if keys_file is not None:
        try:
            lines = keys_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"--api-keys-file {keys_file}: cannot read it ({error})") from None
        found += [line.strip() for line in lines
                  if line.strip() and not line.strip().startswith("#")]
        if not found:
            raise ConfigError(f"--api-keys-file {keys_file} holds no keys")
    return tuple(found)


class ApiKeys:
    def __init__(self, keys: tuple[str, ...]) -> None:
        self._keys = tuple(key.encode("utf-8") for key in keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def allows(self, authorization: str | None) -> bool:
        """Whether `authorization` passes `check`."""
        try:
            self.check(authorization)
        except AuthenticationError:
            return False
        return True

    def check(self, authorization: str | None) -> None:
        """Raise AuthenticationError unless `authorization` is `Bearer <an accepted key>`."""
        if not self._keys:
            return
        if not authorization:
            raise AuthenticationError(
                "missing API key: send it as the header 'Authorization: Bearer YOUR_KEY'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("the Authorization header must be 'Bearer YOUR_KEY'")
        given = token.strip().encode("utf-8")
        # compare against every key so the time taken does not reveal which one nearly matched
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(given, key)
        if not matched:
            raise AuthenticationError("incorrect API key provided")
