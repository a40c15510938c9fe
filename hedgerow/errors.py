"""The small set of errors every public interface translates in one place.

HTTP maps them to 400/422, 429 and 503; gRPC to INVALID_ARGUMENT, RESOURCE_EXHAUSTED and
UNAVAILABLE; the CLI prints the message and exits non-zero. Messages are written for the
user: they say what was wrong and what to change.
"""


class HedgerowError(Exception):
    """Base of every error that carries a message meant for the user."""


class InvalidInputError(HedgerowError):
    """The caller sent something malformed or out of range."""


class OverloadedError(HedgerowError):
    """Admission is full; the caller should retry later."""


class NotReadyError(HedgerowError):
    """The process cannot serve yet (model loading, warmup) or is shutting down."""


class ModelLoadError(HedgerowError):
    """A model directory is missing, incomplete or of an unsupported architecture."""


class ConfigError(HedgerowError):
    """A setting (flag or environment variable) has a value that cannot be used."""
