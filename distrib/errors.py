"""Typed errors of distrib, in the model of ``tf.errors``.

Every error a user can see derives from :class:`OpError`. An error carries the
task and op it came from when known, so a failure deep inside a cluster reads
as "what broke, where, and what to do" in the client. Errors cross the wire as
``{"type": name, "message": str, "task": str|None, "op": str|None}`` (see
:func:`to_wire` / :func:`from_wire`); never as pickles.
"""
from __future__ import annotations

from typing import Any

__all__ = [
    "OpError", "CancelledError", "UnknownError", "InvalidArgumentError",
    "DeadlineExceededError", "NotFoundError", "AlreadyExistsError",
    "PermissionDeniedError", "ResourceExhaustedError", "FailedPreconditionError",
    "AbortedError", "OutOfRangeError", "UnimplementedError", "InternalError",
    "UnavailableError", "DataLossError", "UnauthenticatedError",
    "to_wire", "from_wire",
]


class OpError(Exception):
    """Base of every distrib runtime error.

    ``task`` is the task the error happened on (``/job:J/task:T``) and ``op``
    the name of the op that failed, when known.
    """

    code = 2

    def __init__(self, message: str, *, task: str | None = None, op: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.task = task
        self.op = op

    def __str__(self) -> str:
        where = []
        if self.op:
            where.append(f"op {self.op!r}")
        if self.task:
            where.append(f"on {self.task}")
        return f"{self.message}" + (f" [{', '.join(where)}]" if where else "")

    def __reduce__(self):  # keep exceptions copyable across threads/loops
        return (_rebuild, (type(self).__name__, self.message, self.task, self.op))


class CancelledError(OpError):
    code = 1


class UnknownError(OpError):
    code = 2


class InvalidArgumentError(OpError):
    code = 3


class DeadlineExceededError(OpError):
    code = 4


class NotFoundError(OpError):
    code = 5


class AlreadyExistsError(OpError):
    code = 6


class PermissionDeniedError(OpError):
    code = 7


class ResourceExhaustedError(OpError):
    code = 8


class FailedPreconditionError(OpError):
    code = 9


class AbortedError(OpError):
    code = 10


class OutOfRangeError(OpError):
    code = 11


class UnimplementedError(OpError):
    code = 12


class InternalError(OpError):
    code = 13


class UnavailableError(OpError):
    code = 14


class DataLossError(OpError):
    code = 15


class UnauthenticatedError(OpError):
    code = 16


_BY_NAME: dict[str, type[OpError]] = {
    cls.__name__: cls for cls in (
        OpError, CancelledError, UnknownError, InvalidArgumentError,
        DeadlineExceededError, NotFoundError, AlreadyExistsError,
        PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError,
        AbortedError, OutOfRangeError, UnimplementedError, InternalError,
        UnavailableError, DataLossError, UnauthenticatedError,
    )
}


def _rebuild(name: str, message: str, task: str | None, op: str | None) -> OpError:
    return _BY_NAME.get(name, UnknownError)(message, task=task, op=op)


def to_wire(exc: BaseException, *, task: str | None = None) -> dict[str, Any]:
    """Encode any exception as plain data. Non-distrib errors become UnknownError
    (their type name is kept in the message so nothing is lost)."""
    if isinstance(exc, OpError):
        return {"type": type(exc).__name__, "message": exc.message,
                "task": exc.task or task, "op": exc.op}
    return {"type": "UnknownError", "message": f"{type(exc).__name__}: {exc}",
            "task": task, "op": None}


def from_wire(data: dict[str, Any]) -> OpError:
    """Rebuild the typed error sent by :func:`to_wire`; unknown types become UnknownError."""
    return _rebuild(str(data.get("type")), str(data.get("message", "")),
                    data.get("task"), data.get("op"))
