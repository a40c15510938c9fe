"""Every error the HTTP API answers, translated in this one place, in the shape of the API the
route belongs to.

OpenAI's routes answer `{"error": {"message", "type", "param", "code"}}`; TEI's routes answer
TEI's `{"error": message, "error_type": ...}` with TEI's statuses (422 for invalid input, 400
for an empty one, 424 for a failed backend); Cohere's routes answer `{"message": ...}`. Client
errors are 4xx with a specific message, never a 500 and never a traceback; 503 and 429 carry
Retry-After. A request that would mix two embedding spaces is 409 on every route (TEI has no
such answer; a retry lands in one space). Knows nothing about how requests are handled.
"""

import enum
import math

import orjson

from hedgerow.errors import HedgerowError, InvalidInputError, NotReadyError, OverloadedError
from hedgerow.gateway.errors import (
    AuthenticationError,
    DeadlineError,
    ModelNotFoundError,
    SpaceConflictError,
    UpstreamError,
)

RETRY_AFTER_S = 1


class Style(enum.Enum):
    """Whose error shape a route answers in."""

    OPENAI = "openai"
    TEI = "tei"
    COHERE = "cohere"


# Most specific first: the first class an error is an instance of decides. Columns: the
# status, OpenAI's error type and default code, TEI's error type.
_STATUS: tuple[tuple[type[HedgerowError], int, str, str | None, str], ...] = (
    (ModelNotFoundError, 404, "invalid_request_error", "model_not_found", "Validation"),
    (AuthenticationError, 401, "invalid_request_error", "invalid_api_key", "Unauthorized"),
    (InvalidInputError, 400, "invalid_request_error", None, "Validation"),
    (OverloadedError, 429, "overloaded_error", "overloaded", "Overloaded"),
    (NotReadyError, 503, "service_unavailable_error", "no_ready_replica", "Unhealthy"),
    (DeadlineError, 504, "timeout_error", "deadline_exceeded", "Backend"),
    (SpaceConflictError, 409, "conflict_error", "embedding_space_changed", "Backend"),
    (UpstreamError, 502, "server_error", "upstream_error", "Backend"),
    (HedgerowError, 500, "server_error", None, "Backend"),
)
# TEI answers invalid input 422, an empty input 400 and a failed backend 424.
_TEI_STATUS = {"Validation": 422, "Backend": 424}
_TEI_EMPTY_CODE = "empty_input"


class RouteError(HedgerowError):
    """No route for the path (404), or not for the method (405)."""

    def __init__(self, status: int, message: str, headers: tuple = ()) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None
               ) -> bytes:
    """OpenAI's error shape."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param,
                                   "code": code}})


# The codes of the answers the connection protocol makes itself, by status.
PROTOCOL_CODES = {400: "malformed_http", 408: "request_timeout", 413: "body_too_large",
                  431: "head_too_large", 503: "too_many_connections"}


Answer = tuple[int, bytes, tuple[tuple[bytes, bytes], ...]]  # status, body, extra headers


def answer_for(error: HedgerowError, style: Style = Style.OPENAI) -> Answer:
    """How to answer `error` on a route of `style`."""
    if isinstance(error, RouteError):
        status, type_, code, tei_type = error.status, "invalid_request_error", None, "Validation"
        headers = error.headers
    else:
        for cls, status, type_, code, tei_type in _STATUS:
            if isinstance(error, cls):
                break
        code = getattr(error, "code", None) or code
        headers = ()
        if status in (429, 503):
            retry = getattr(error, "retry_after", None) or RETRY_AFTER_S
            headers = ((b"retry-after", b"%d" % max(1, math.ceil(retry))),)
        elif status == 401:
            headers = ((b"www-authenticate", b"Bearer"),)
    message = str(error)
    if style is Style.TEI:
        if status == 400 and code == _TEI_EMPTY_CODE:
            tei_type = "Empty"
        elif not isinstance(error, (RouteError, SpaceConflictError)):
            status = _TEI_STATUS.get(tei_type, status)
        return status, orjson.dumps({"error": message, "error_type": tei_type}), headers
    if style is Style.COHERE:
        return status, orjson.dumps({"message": message}), headers
    return status, error_body(message, type_, getattr(error, "param", None), code), headers


def internal_error(style: Style) -> Answer:
    """The answer to a bug: 500, and the traceback only in the gateway's log."""
    if style is Style.OPENAI:
        return 500, error_body("internal error in the gateway; see its log", "server_error",
                               code="internal_error"), ()
    status, body, headers = answer_for(HedgerowError("internal error in the gateway; see its "
                                                     "log"), style)
    return 500, body, headers
