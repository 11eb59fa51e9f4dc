"""CPU kernels of ``PyFunc`` and ``EagerPyFunc`` (``tf.numpy_function`` and
``tf.py_function``): the op calls a Python callable of the process that
built it.

TF keeps the callable in a process-local registry and puts only a token
(a string attr) in the graph; the op then runs only in that process, and
anywhere else fails saying so. This module is that registry: the builders
(``distrib.ops.py_func_ops``) register a callable under a fresh token with
:func:`register_callable`, the kernel looks the token up at run time.
Nothing is pickled: a graph shipped to another process carries the token and
the function's name, and the kernel there raises a ``KernelError`` naming
the function and saying it runs only where it was built. The table holds its
callables weakly, as TF's ``FuncRegistry`` does: the graph that uses one
keeps it alive, so a function that refers to its own graph (a closure over a
model, a tensor) goes with that graph instead of keeping it forever.

The registered callable takes the inputs' numpy arrays and returns a list
of arrays (the builder wraps the user's function to convert them: eager
tensors for ``py_function``, numpy for ``numpy_function``, then to the
declared ``Tout``), so this module stays free of ``distrib``.
"""
from __future__ import annotations

import itertools
import os
import threading
import weakref
from typing import Any, Callable

import numpy as np

from kernels.dtypes import as_dtype
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["register_callable", "callable_for", "forget_callable", "KERNELS"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

_TABLE: weakref.WeakValueDictionary[str, Callable[..., list]] = \
    weakref.WeakValueDictionary()
_LOCK = threading.Lock()
_COUNTER = itertools.count()


def register_callable(fn: Callable[..., list]) -> str:
    """Name ``fn`` in this process's table; returns its token (process id and
    a counter, so a token read in another process never finds a function).
    The table holds ``fn`` weakly: the caller keeps it alive while the op can run."""
    token = f"pyfunc_{os.getpid()}_{next(_COUNTER)}"
    with _LOCK:
        _TABLE[token] = fn
    return token


def callable_for(token: str) -> Callable[..., list] | None:
    """The callable registered under ``token`` in this process, or None."""
    with _LOCK:
        return _TABLE.get(token)


def forget_callable(token: str) -> None:
    """Drop ``token``'s callable (TF drops it when its graph goes)."""
    with _LOCK:
        _TABLE.pop(token, None)


def _run(inputs: list, attrs: dict) -> list:
    token = str(attrs.get("token", ""))
    fn = callable_for(token)
    label = attrs.get("func_name") or "<unknown>"
    if fn is None:
        raise KernelError(
            f"the Python function {label!r} of this py_function/numpy_function (token "
            f"{token!r}) is not registered in process {os.getpid()}: such an op runs only in "
            "the process that built it (as TF's); place it on that process (the client's "
            "in-process session, eager execution or a dt.data map) or replace it with ops")
    outs = fn(*[np.asarray(v) for v in inputs])
    touts = list(attrs.get("Tout") or [])
    if len(outs) != len(touts):
        raise KernelError(f"the Python function {label!r} returned {len(outs)} values, "
                          f"Tout declares {len(touts)}")
    return [convert_result(o, t) for o, t in zip(outs, touts)]


@KERNELS("PyFunc", CPU)
def py_func(inputs: list, attrs: dict) -> list:
    return _run(inputs, attrs)


@KERNELS("EagerPyFunc", CPU)
def eager_py_func(inputs: list, attrs: dict) -> list:
    return _run(inputs, attrs)


def callable_names() -> list[str]:
    """The tokens registered in this process (for tests and debugging)."""
    with _LOCK:
        return sorted(_TABLE)


def convert_result(value: Any, dtype: Any) -> np.ndarray:
    """``value`` as an array of ``dtype`` (a ``KernelError`` when it does not convert)."""
    try:
        return np.asarray(value, dtype=as_dtype(dtype))
    except (TypeError, ValueError) as e:
        raise KernelError(f"cannot convert the Python function's result to {dtype}: {e}") \
            from None
