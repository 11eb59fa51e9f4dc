"""A variable that lives on a task, read from eager code: ``await v.read_value()``.

With eager values on, a variable a strategy's scope made is still a graph
variable whose value lives on a server (the local one, a ps task, every
worker of a collective strategy). Reading it takes a step on its target,
which is awaited, so ``v.read_value()`` outside a ``dt.function`` returns a
:class:`RemoteRead` to await (an ``EagerTensor`` then), and ``v.numpy()``
raises an error naming that form rather than blocking the event loop.

The step itself is the checkpoints' step runner (``client.step_runner``:
``dt.function`` steps with TF2's first-use initialization), which sits
above this layer; the process runtime hands its ``read`` here
(:func:`register_remote_reader`).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator, Sequence

import numpy as np

from distrib.eager.tensor import EagerTensor, wrap
from distrib.errors import FailedPreconditionError

__all__ = ["RemoteRead", "register_remote_reader", "numpy_unavailable"]

Reader = Callable[[Sequence[Any]], Awaitable[list]]
_reader: list[Reader] = []


def register_remote_reader(read: Reader) -> None:
    """``read(variables)``: their values, in a step on their target."""
    _reader[:] = [read]


class RemoteRead:
    """``await v.read_value()`` of a variable on a task: its value as an EagerTensor."""

    __slots__ = ("_variable",)

    def __init__(self, variable: Any) -> None:
        self._variable = variable

    def __await__(self) -> Generator[Any, None, EagerTensor]:
        return self._read().__await__()

    async def _read(self) -> EagerTensor:
        if not _reader:
            raise RuntimeError("no step runner: `import distrib` makes the process runtime")
        values = await _reader[0]([self._variable])
        return wrap(np.array(values[0]))

    def __repr__(self) -> str:
        return f"<read of {self._variable!r}: await it>"


def numpy_unavailable(variable: Any) -> FailedPreconditionError:
    """The error ``numpy()`` of a variable on a task raises: it names the awaited read."""
    name = getattr(variable, "name", repr(variable))
    return FailedPreconditionError(
        f"variable {name} lives on a task (a strategy's scope placed it there), so its value "
        "is read in a step: use `await v.read_value()` (then .numpy()), or read it inside a "
        "dt.function; eager variables made outside every strategy scope have numpy()")
