"""Typed errors of distrib, in the model of ``tf.errors``.

Every error a user can see derives from :class:`OpError`. An error carries the
task and op it came from when known, so a failure deep inside a cluster reads
as "what broke, where, and what to do" in the client. Errors cross the wire as
``{"type": name, "message": str, "task": str|None, "op": str|None}`` (see
:func:`to_wire` / :func:`from_wire`); never as pickles.

Two ways to build one, so that both distrib's code and ported TF code work:

* distrib's: ``NotFoundError("what is wrong", task="/job:ps/task:0", op="w")``;
* TF's positional ``(node_def, op, message)``, e.g.
  ``NotFoundError(None, None, "msg")``, and ``OpError(node_def, op, message,
  error_code)`` for the base class (keywords of the same names work too).

Either way the error has TF's ``.message``, ``.op``, ``.node_def`` and
``.error_code``, plus distrib's ``.task``. ``op`` may be an op name or an
``Operation``; the wire carries its name.
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
    the op that failed (its name, or the ``Operation``), when known.
    """

    code = 2

    def __init__(self, *args: Any, task: str | None = None, op: Any = None,
                 node_def: Any = None, message: str | None = None,
                 error_code: int | None = None) -> None:
        message, op, node_def, error_code = _parse_args(type(self), args, message, op,
                                                        node_def, error_code)
        super().__init__(message)
        self.message = message
        self.task = task
        self.op = op
        self.node_def = node_def
        # only the base class takes a code (TF's OpError does; its subclasses fix theirs)
        self._error_code = error_code

    @property
    def error_code(self) -> int:
        """The canonical error code (TF's ``error_code``): ``NOT_FOUND`` is 5 and so on."""
        return self.code if self._error_code is None else self._error_code

    @property
    def op_name(self) -> str | None:
        """The failed op's name: ``op`` itself when it is a string, else ``op.name``."""
        return _op_name(self.op)

    def __str__(self) -> str:
        where = []
        if self.op_name:
            where.append(f"op {self.op_name!r}")
        if self.task:
            where.append(f"on {self.task}")
        return f"{self.message}" + (f" [{', '.join(where)}]" if where else "")

    def __reduce__(self):  # keep exceptions copyable across threads/loops
        return (_rebuild, (type(self).__name__, self.message, self.task, self.op_name,
                           self._error_code))


def _parse_args(cls: type, args: tuple, message: str | None, op: Any, node_def: Any,
                error_code: int | None) -> tuple[str, Any, Any, int | None]:
    """``(message,)`` (distrib's form) or ``(node_def, op, message[, error_code])`` (TF's)."""
    most = 4 if cls is OpError else 3
    if len(args) == 1 and message is None:
        (message,) = args
    elif len(args) in (3, 4) and len(args) <= most and message is None:
        node_def, op, message = args[0], args[1], args[2]
        if len(args) == 4:
            error_code = args[3]
    elif args:
        tf_form = "(node_def, op, message, error_code)" if most == 4 else "(node_def, op, message)"
        raise TypeError(
            f"{cls.__name__}() takes a message, optionally with task= and op= (distrib), or "
            f"TF's positional {tf_form}; got {len(args)} positional argument(s)")
    if error_code is not None and most == 3:
        raise TypeError(f"{cls.__name__} has the fixed error code {cls.code}; only OpError "
                        "takes error_code (as in TF)")
    if message is None:
        raise TypeError(f"{cls.__name__}() needs a message: {cls.__name__}('what went wrong') "
                        f"or {cls.__name__}(None, None, 'what went wrong')")
    if error_code is not None and (isinstance(error_code, bool) or not isinstance(error_code, int)):
        raise TypeError(f"error_code must be an int code such as 5 (NOT_FOUND), "
                        f"not {error_code!r}")
    return str(message), op, node_def, error_code


def _op_name(op: Any) -> str | None:
    if op is None or isinstance(op, str):
        return op
    name = getattr(op, "name", None)
    return name if isinstance(name, str) else str(op)


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


def _rebuild(name: str, message: str, task: str | None, op: str | None,
             error_code: int | None = None) -> OpError:
    cls = _BY_NAME.get(name, UnknownError)
    exc = cls(message, task=task, op=op)
    if cls is OpError:
        exc._error_code = error_code
    return exc


def to_wire(exc: BaseException, *, task: str | None = None) -> dict[str, Any]:
    """Encode any exception as plain data. Non-distrib errors become UnknownError
    (their type name is kept in the message so nothing is lost)."""
    if isinstance(exc, OpError):
        return {"type": type(exc).__name__, "message": exc.message,
                "task": exc.task or task, "op": exc.op_name}
    return {"type": "UnknownError", "message": f"{type(exc).__name__}: {exc}",
            "task": task, "op": None}


def from_wire(data: dict[str, Any]) -> OpError:
    """Rebuild the typed error sent by :func:`to_wire`; unknown types become UnknownError."""
    return _rebuild(str(data.get("type")), str(data.get("message", "")),
                    data.get("task"), data.get("op"))
