"""Every error the HTTP API answers, translated in this one place into OpenAI's error shape.

`{"error": {"message", "type", "param", "code"}}` with the right status: client errors are
4xx with a specific message (request validation and JSON problems included), never a 500 and
never a traceback; 503 and 429 carry Retry-After. Knows nothing about how requests are handled.
"""

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from hedgerow.errors import HedgerowError, InvalidInputError, NotReadyError, OverloadedError
from hedgerow.gateway.errors import (
    AuthenticationError,
    BodyTooLargeError,
    DeadlineError,
    ModelNotFoundError,
    UpstreamError,
)

log = logging.getLogger("hedgerow.gateway.http")

RETRY_AFTER_S = "1"

# Most specific first: the first class an error is an instance of decides.
_STATUS: tuple[tuple[type[HedgerowError], int, str, str | None], ...] = (
    (BodyTooLargeError, 413, "invalid_request_error", "body_too_large"),
    (ModelNotFoundError, 404, "invalid_request_error", "model_not_found"),
    (AuthenticationError, 401, "invalid_request_error", "invalid_api_key"),
    (InvalidInputError, 400, "invalid_request_error", None),
    (OverloadedError, 429, "overloaded_error", "overloaded"),
    (NotReadyError, 503, "service_unavailable_error", "no_ready_replica"),
    (DeadlineError, 504, "timeout_error", "deadline_exceeded"),
    (UpstreamError, 502, "server_error", "upstream_error"),
    (HedgerowError, 500, "server_error", None),
)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None
               ) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_response(status: int, message: str, type_: str, param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None
                   ) -> JSONResponse:
    return JSONResponse(error_body(message, type_, param, code), status_code=status,
                        headers=headers)


MALFORMED_HTTP = json.dumps(error_body(
    "the HTTP request is malformed (its framing or headers, e.g. a Content-Length that is not "
    "a number, cannot be parsed)", "invalid_request_error", None, "malformed_http")).encode()


def _from_hedgerow(error: HedgerowError) -> JSONResponse:
    for cls, status, type_, code in _STATUS:
        if isinstance(error, cls):
            break
    param = getattr(error, "param", None)
    code = getattr(error, "code", None) or code
    headers = None
    if status in (429, 503):
        headers = {"Retry-After": RETRY_AFTER_S}
    elif status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    return error_response(status, str(error), type_, param, code, headers)


def _validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """One line per problem, `field: what is wrong (got value)`; param is the first field."""
    lines, param = [], None
    for item in errors:
        loc = [str(part) for part in item.get("loc", ()) if part != "body"]
        where = ".".join(loc) or "request body"
        param = param or (loc[0] if loc else None)
        message = f"{where}: {item.get('msg', 'invalid')}"
        if not loc and item.get("type") in ("model_type", "model_attributes_type", "dict_type"):
            message = "request body: must be a JSON object"  # not pydantic's class name
        if item.get("type") != "missing" and "input" in item:
            message += f" (got {json.dumps(item['input'], default=str)[:60]})"
        lines.append(message)
    return "; ".join(lines), param


def install(app: FastAPI) -> None:
    """Register the translation of every error class on `app`."""

    @app.exception_handler(HedgerowError)
    async def hedgerow_error(request: Request, error: HedgerowError) -> JSONResponse:
        return _from_hedgerow(error)

    @app.exception_handler(ValidationError)
    async def pydantic_error(request: Request, error: ValidationError) -> JSONResponse:
        message, param = _validation_message(error.errors(include_url=False))
        return error_response(400, message, "invalid_request_error", param, "invalid_value")

    @app.exception_handler(RequestValidationError)
    async def request_validation_error(request: Request,
                                       error: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(list(error.errors()))
        return error_response(400, message, "invalid_request_error", param, "invalid_value")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = error.detail if isinstance(error.detail, str) else json.dumps(error.detail)
        if error.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        elif error.status_code == 405:
            message = f"{request.url.path} does not accept {request.method}"
        return error_response(error.status_code, message, "invalid_request_error",
                              headers=getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error handling %s %s", request.method, request.url.path)
        return error_response(500, "internal error in the gateway; see its log",
                              "server_error", code="internal_error")

