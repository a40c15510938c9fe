"""The gateway's client errors, as subclasses of the project's error set.

Each carries what OpenAI's error shape needs beyond the message: the offending `param` and a
machine-readable `code`. The HTTP status and error `type` are chosen in one place,
`gateway/http_errors.py`; nothing here knows about HTTP.
"""

from hedgerow.errors import HedgerowError, InvalidInputError, NotReadyError, OverloadedError


class RequestError(InvalidInputError):
    """A malformed or out-of-range request (400)."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


class ModelNotFoundError(RequestError):
    """The request names a model this gateway does not serve (404)."""


class AuthenticationError(HedgerowError):
    """A missing or wrong API key (401)."""


class NoReplicaError(NotReadyError):
    """No server is SERVING right now (503 with Retry-After)."""


class StoppingError(NotReadyError):
    """The gateway stopped before the request was answered (503 with Retry-After)."""

    code = "gateway_stopping"


class UpstreamOverloadedError(OverloadedError):
    """The servers are too busy for this request: refused at admission, or every server that
    was tried answered RESOURCE_EXHAUSTED (429, with Retry-After `retry_after` seconds)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SpaceConflictError(HedgerowError):
    """Finishing the request would mix two embedding spaces in one answer: the servers of its
    space left while its chunks were out, during a rollout (409; retrying lands in one)."""


class UpstreamError(HedgerowError):
    """A server failed in a way that is not the client's fault (502)."""


class DeadlineError(HedgerowError):
    """The request's deadline passed before every chunk came back (504)."""
