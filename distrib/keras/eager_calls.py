"""Eager calls of Keras objects whose variables a strategy placed.

TF2 lets eager code call a model built in a strategy's scope (``model(x)``
in the parameter-server tutorial's evaluation loop) and read a metric made
there (``train_accuracy.result()`` in the custom-loop tutorial's print).
Here those variables live on servers (the strategy's devices, the ps
tasks), so such a call is a step: it runs as a ``dt.function`` (traced once
per object, argument signature and Python arguments; where the variables
live, as any function outside a strategy runs) on the client's private loop
thread, and the caller waits for it. The result is what TF's is: eager
tensors (``numpy()``), at the price of one step per call.

Waiting is safe because the servers that hold placed variables run on
loop threads of their own (``dt.Server``; the strategies' and the local
server), never on the caller's loop; only the private loop's own thread may
not wait on itself (a RuntimeError names that).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from distrib.client.loop_thread import client_loop
from distrib.distribute.functions.def_function import function
from distrib.eager.context import executing_eagerly
from distrib.eager.tensor import EagerTensor, wrap
from distrib.keras import node
from distrib.ops.eager_variables import EagerVariable

__all__ = ["placed", "run_placed"]

_FUNCTIONS = "_eager_call_functions"


def placed(variables: Iterable[Any]) -> bool:
    """Whether eager code must reach any of ``variables`` through a step: some are
    not this process's eager variables (a strategy placed them), with eager on."""
    return executing_eagerly() and any(not isinstance(v, EagerVariable) for v in variables)


def run_placed(owner: Any, key: Any, body: Callable[..., Any], *args: Any) -> Any:
    """``body(*args)`` run as a step where ``owner``'s variables live, waited for; the
    result's arrays as eager tensors. The function is made once per ``owner`` and
    ``key`` (the Python arguments ``body`` closes over)."""
    functions = owner.__dict__.setdefault(_FUNCTIONS, {})
    fn = functions.get(key)
    if fn is None:
        fn = functions[key] = function(body)
    values = client_loop().run(fn(*[_argument(a) for a in args]))
    return node.map_nest(_eager, values)


def _argument(value: Any) -> Any:
    return node.map_nest(lambda v: np.asarray(v) if isinstance(v, EagerTensor) else v, value)


def _eager(value: Any) -> Any:
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return wrap(np.asarray(value))
    return value
