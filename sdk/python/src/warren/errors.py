"""Exceptions raised by the Warren SDK.

Every error answer of the API is ``{"error": {"code": ..., "message": ...}}``
with a status; the SDK raises the subclass of :class:`WarrenError` for its
code, so callers can catch exactly what they can handle::

    try:
        sb = Sandbox.connect("sb-...")
    except NotFoundError:
        sb = Sandbox.create()
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "WarrenError",
    "InvalidError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "QuotaError",
    "UnavailableError",
    "InternalError",
    "error_for",
]


class WarrenError(Exception):
    """An error answer of the Warren API (or no answer at all).

    Attributes:
        code: the API's error code (``"not_found"``, ``"conflict"``, ...).
        message: what went wrong and, usually, what to do about it.
        status: the HTTP status; 0 when the server could not be reached.
    """

    code = "internal"

    def __init__(self, message: str, *, code: Optional[str] = None, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(code=%r, status=%d, message=%r)" % (type(self).__name__, self.code, self.status, self.message)


class InvalidError(WarrenError):
    """400: the request was malformed or out of bounds; nothing changed."""

    code = "invalid"


class UnauthorizedError(WarrenError):
    """401: no API key, or one the server does not know."""

    code = "unauthorized"


class ForbiddenError(WarrenError):
    """403: the key may not do this."""

    code = "forbidden"


class NotFoundError(WarrenError):
    """404: no such sandbox, snapshot, file, job, shell, ... (or route)."""

    code = "not_found"


class ConflictError(WarrenError):
    """409: the thing is in the wrong state (a paused sandbox, an existing name)."""

    code = "conflict"


class QuotaError(WarrenError):
    """429: a limit was reached."""

    code = "quota"


class UnavailableError(WarrenError):
    """503, or the server could not be reached: retrying later may work."""

    code = "unavailable"


class InternalError(WarrenError):
    """500: the server failed."""

    code = "internal"


_BY_CODE: Dict[str, Type[WarrenError]] = {
    c.code: c
    for c in (
        InvalidError,
        UnauthorizedError,
        ForbiddenError,
        NotFoundError,
        ConflictError,
        QuotaError,
        UnavailableError,
        InternalError,
    )
}

_BY_STATUS: Dict[int, str] = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    429: "quota",
    503: "unavailable",
}


def error_for(status: int, code: Optional[str], message: str) -> WarrenError:
    """Returns the exception for an error answer.

    ``code`` is the body's error code; when the body had none, the status
    decides, as in the Go SDK. An unknown code keeps its value on an
    :class:`InternalError`.
    """
    if not code:
        code = _BY_STATUS.get(status, "internal")
    cls = _BY_CODE.get(code, InternalError)
    return cls(message, code=code, status=status)
