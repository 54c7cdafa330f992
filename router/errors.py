"""OpenAI-style errors: every failure the API returns is `{"error": {"message", "type", "param", "code"}}`."""
from __future__ import annotations

import logging

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable"}


log = logging.getLogger(__name__)


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error" if status >= 500 else
                                                            "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def install_handlers(app) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # OpenAI answers 400 (not FastAPI's 422) for a malformed body; name the first offending field
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        msg = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()) if x != 'body') or 'body'}: {e.get('msg')}"
                        for e in errs[:5])
        return error_response(400, msg or "invalid request", ".".join(loc) or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # a bug, not the client's fault: an OpenAI-style 500 that names the exception type, never its text
        # (which could carry request data); the traceback goes to the server log
        log.error("unhandled %s", type(exc).__name__, exc_info=exc)
        return error_response(500, f"internal server error ({type(exc).__name__})")
