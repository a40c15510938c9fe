"""Every error the HTTP API answers, translated in this one place into OpenAI's error shape.

`{"error": {"message", "type", "param", "code"}}` with the right status: client errors are
4xx with a specific message, never a 500 and never a traceback; 503 and 429 carry Retry-After.
Knows nothing about how requests are handled.
"""

import math
import orjson

from hedgerow.errors import HedgerowError, InvalidInputError, NotReadyError, OverloadedError
from hedgerow.gateway.errors import (
    AuthenticationError,
    DeadlineError,
    ModelNotFoundError,
    UpstreamError,
)

RETRY_AFTER_S = 1

# Most specific first: the first class an error is an instance of decides.
_STATUS: tuple[tuple[type[HedgerowError], int, str, str | None], ...] = (
    (ModelNotFoundError, 404, "invalid_request_error", "model_not_found"),
    (AuthenticationError, 401, "invalid_request_error", "invalid_api_key"),
    (InvalidInputError, 400, "invalid_request_error", None),
    (OverloadedError, 429, "overloaded_error", "overloaded"),
    (NotReadyError, 503, "service_unavailable_error", "no_ready_replica"),
    (DeadlineError, 504, "timeout_error", "deadline_exceeded"),
    (UpstreamError, 502, "server_error", "upstream_error"),
    (HedgerowError, 500, "server_error", None),
)


class RouteError(HedgerowError):
    """No route for the path (404), or not for the method (405)."""

    def __init__(self, status: int, message: str, headers: tuple = ()) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None
               ) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param,
                                   "code": code}})


# The codes of the answers the connection protocol makes itself, by status.
PROTOCOL_CODES = {400: "malformed_http", 408: "request_timeout", 413: "body_too_large",
                  431: "head_too_large", 503: "too_many_connections"}


Answer = tuple[int, bytes, tuple[tuple[bytes, bytes], ...]]  # status, body, extra headers


def answer_for(error: HedgerowError) -> Answer:
    """How to answer `error`."""
    if isinstance(error, RouteError):
        return error.status, error_body(str(error), "invalid_request_error"), error.headers
    for cls, status, type_, code in _STATUS:
        if isinstance(error, cls):
            break
    param = getattr(error, "param", None)
    code = getattr(error, "code", None) or code
    headers: tuple[tuple[bytes, bytes], ...] = ()
    if status in (429, 503):
        retry = getattr(error, "retry_after", None) or RETRY_AFTER_S
        headers = ((b"retry-after", b"%d" % max(1, math.ceil(retry))),)
    elif status == 401:
        headers = ((b"www-authenticate", b"Bearer"),)
    return status, error_body(str(error), type_, param, code), headers


INTERNAL_ERROR: Answer = (500, error_body("internal error in the gateway; see its log",
                                          "server_error", code="internal_error"), ())
