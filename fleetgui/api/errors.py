"""OpenAI-style error objects: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP
status OpenAI's own API answers the same mistake with."""

from __future__ import annotations

from typing import Any

from fleetgui.errors import FleetguiError

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
RATE_LIMIT = "rate_limit_error"
SERVER_ERROR = "server_error"


class ApiError(FleetguiError):
    """A request the API refuses; ``body()`` is what the client gets."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        kind: str = INVALID_REQUEST,  # OpenAI's "type"
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.param = param
        self.code = code
        self.logged = False  # the server logged it already (its log line need not repeat it)

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(message, status=400, param=param, code=code)


def invalid_key(message: str) -> ApiError:
    return ApiError(message, status=401, kind=AUTHENTICATION, code="invalid_api_key")


def too_many_streams(limit: int, queued: int) -> ApiError:
    return ApiError(
        f"the server is generating {limit} streams and {queued} more requests wait: "
        "retry in a moment",
        status=429,
        kind=RATE_LIMIT,
        code="rate_limit_exceeded",
    )
