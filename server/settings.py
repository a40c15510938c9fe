"""The server's settings, defined in `hedgerow.server_settings` (the operator reads them too)."""

from hedgerow.server_settings import MAX_TOKENS, ServerSettings

__all__ = ["MAX_TOKENS", "ServerSettings"]
