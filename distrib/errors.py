"""Typed errors of distrib, in the model of ``tf.errors``.

Every error a user can see derives from :class:`OpError`. An error carries the
task and op it came from when known, so a failure deep inside a cluster reads
as "what broke, where, and what to do" in the client. Errors cross the wire as
``{"type": name, "message": str, "task": str|None, "op": str|None}``, plus
``"peer"`` when the error names one (see :func:`to_wire` / :func:`from_wire`);
never as pickles.

Some kinds of failure the runtime itself acts on have a class of their own,
a subclass of TF's class for that kind (so ``except AbortedError`` still
catches them, with the same ``error_code``): :class:`FencedError`,
:class:`PartitionUnregisteredError`, :class:`PeerRestartedError`,
:class:`SessionClosedError` and :class:`UninitializedVariableError`. Code
decides on an error's class, never on its message's text: the text is for
people and may change. Such a subclass crosses the wire by its name, with a
``"base"`` field naming the TF class it derives from, so a peer that does not
know the subclass still rebuilds the TF class.

Two ways to build one, so that both distrib's code and ported TF code work:

* distrib's: ``NotFoundError("what is wrong", task="/job:ps/task:0", op="w")``;
* TF's positional ``(node_def, op, message)``, e.g.
  ``NotFoundError(None, None, "msg")``, and ``OpError(node_def, op, message,
  error_code)`` for the base class (keywords of the same names work too).

Either way the error has TF's ``.message``, ``.op``, ``.node_def`` and
``.error_code``, plus distrib's ``.task`` and ``.peer``. ``op`` may be an op
name or an ``Operation``; the wire carries its name.

``task`` is where an error was raised; ``peer`` (keyword only) is the task
whose failure caused it, when that is another one: a peer that could not be
reached, whose connection was lost or that was declared dead, that restarted,
or that failed the step others were aborted for. Code that must decide whom
a failure blames (the coordinator: retry on another worker, or wait for a
ps) reads ``peer``, then ``task``, never the message.
"""
from __future__ import annotations

from typing import Any

__all__ = [
    "OpError", "CancelledError", "UnknownError", "InvalidArgumentError",
    "DeadlineExceededError", "NotFoundError", "AlreadyExistsError",
    "PermissionDeniedError", "ResourceExhaustedError", "FailedPreconditionError",
    "AbortedError", "OutOfRangeError", "UnimplementedError", "InternalError",
    "UnavailableError", "DataLossError", "UnauthenticatedError",
    "FencedError", "PartitionUnregisteredError", "PeerRestartedError", "SessionClosedError",
    "UninitializedVariableError",
    "to_wire", "from_wire",
]


class OpError(Exception):
    """Base of every distrib runtime error.

    ``task`` is the task the error happened on (``/job:J/task:T``) and ``op``
    the op that failed (its name, or the ``Operation``), when known;
    ``peer`` is the task whose failure caused it (``/job:J/task:T``), when
    known (see the module header).
    """

    code = 2

    def __init__(self, *args: Any, task: str | None = None, op: Any = None,
                 node_def: Any = None, message: str | None = None,
                 error_code: int | None = None, peer: str | None = None) -> None:
        message, op, node_def, error_code = _parse_args(type(self), args, message, op,
                                                        node_def, error_code)
        super().__init__(message)
        self.message = message
        self.task = task
        self.peer = peer
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
        # by the class itself (not its name), so that a subclass copies as itself
        return (_rebuild, (type(self), self.message, self.task, self.op_name,
                           self._error_code, self.peer))


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


class FencedError(AbortedError):
    """A chief-only write carrying an older chief term, refused.

    Raised by a ps task's fence (``distrib.runtime.chief.fencing``) when a
    write (initializing or restoring variables, the sync-replicas queue
    runner) carries a chief term lower than one the task has seen, and by a
    checkpoint folder's fence (``distrib.train.chief.checkpoint_fence``) when a
    newer chief saved there. A newer chief was elected, so the writer is no
    longer chief: stop the chief-only work and leave it to the new chief;
    running the write again is refused again.
    """


class PartitionUnregisteredError(NotFoundError):
    """The worker no longer has the partition the master asked it to run.

    Raised by a worker's ``run_partition`` when the step's partition is not
    registered there: the task restarted, or it freed the partitions of a
    master that was gone too long. The master registers the partition again
    once and reruns the step; a user sees this error only when that rerun
    fails the same way: run the step again.
    """


class PeerRestartedError(AbortedError):
    """A tensor came from a task that restarted since the step began.

    Raised by a receive (``distrib.runtime.step.rendezvous``) when the
    sender's incarnation is not the one the step started with: its tensor
    is not mixed in, and the step is aborted. The master forgets what it
    knew of the step's tasks, so the next run contacts them afresh: run the
    step again (a managed or monitored session does so itself).
    """


class SessionClosedError(CancelledError):
    """The session was closed while a step waited.

    Raised for a step of a session that is closed while the step runs or
    waits (a take from an accumulator, a dequeue from a queue): the close
    aborts it, and a waiting op gives up its place. A ``CancelledError``, as
    TF's is: not a failure of the cluster, so what rides through failures
    (a monitored session, the coordinator) does not retry it. Open a new
    session to run more steps.
    """


class UninitializedVariableError(FailedPreconditionError):
    """A variable was read on a task that holds no value for it.

    Raised by a task's variable store when a step reads a variable that was
    never initialized there, or whose ps restarted empty and has not been
    restored yet. Run its initializer or restore a checkpoint; during a ps
    restart a managed session waits for the chief to restore the ps and
    reruns the step.
    """


# TF's classes: every error crosses the wire as one of these or as a named subclass
_STANDARD: dict[str, type[OpError]] = {
    cls.__name__: cls for cls in (
        OpError, CancelledError, UnknownError, InvalidArgumentError,
        DeadlineExceededError, NotFoundError, AlreadyExistsError,
        PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError,
        AbortedError, OutOfRangeError, UnimplementedError, InternalError,
        UnavailableError, DataLossError, UnauthenticatedError,
    )
}

_BY_NAME: dict[str, type[OpError]] = {
    **_STANDARD,
    **{cls.__name__: cls for cls in (FencedError, PartitionUnregisteredError,
                                     PeerRestartedError, SessionClosedError,
                                     UninitializedVariableError)},
}


def _standard_base(cls: type[OpError]) -> type[OpError]:
    """The nearest of TF's classes in ``cls``'s MRO (``cls`` itself if it is one)."""
    return next(c for c in cls.__mro__ if _STANDARD.get(c.__name__) is c)


def _rebuild(kind: str | type[OpError], message: str, task: str | None, op: str | None,
             error_code: int | None = None, peer: str | None = None) -> OpError:
    """An error of class ``kind`` (a class, or a name: unknown names are UnknownError)."""
    cls = kind if isinstance(kind, type) else _BY_NAME.get(kind, UnknownError)
    exc = cls(message, task=task, op=op, peer=peer)
    if cls is OpError:
        exc._error_code = error_code
    return exc


def to_wire(exc: BaseException, *, task: str | None = None) -> dict[str, Any]:
    """Encode any exception as plain data. Non-distrib errors become UnknownError
    (their type name is kept in the message so nothing is lost). A subclass of
    a TF class (``FencedError``, or a user's own) also names that class as
    ``"base"``, which a receiver that does not know the subclass rebuilds. The
    ``"peer"`` key is there only when the error names one."""
    if isinstance(exc, OpError):
        out = {"type": type(exc).__name__, "message": exc.message,
               "task": exc.task or task, "op": exc.op_name}
        base = _standard_base(type(exc)).__name__
        if base != out["type"]:
            out["base"] = base
        if exc.peer is not None:   # only when set: other errors' records stay as they were
            out["peer"] = exc.peer
        return out
    return {"type": "UnknownError", "message": f"{type(exc).__name__}: {exc}",
            "task": task, "op": None}


def from_wire(data: dict[str, Any]) -> OpError:
    """Rebuild the typed error sent by :func:`to_wire`: its class when known here
    (and derived from the ``"base"`` the sender names), else that base class,
    else UnknownError."""
    cls = _BY_NAME.get(str(data.get("type")))
    base = _STANDARD.get(str(data.get("base")))
    if cls is None or (base is not None and not issubclass(cls, base)):
        # a subclass only the sender knows, or a name that means another kind here
        cls = base or UnknownError
    peer = data.get("peer")
    return _rebuild(cls, str(data.get("message", "")), data.get("task"), data.get("op"),
                    peer=None if peer is None else str(peer))
