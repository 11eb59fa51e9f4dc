"""``dt.py_function`` and ``dt.numpy_function``: a Python function as an op
(TF's ``tf.py_function(func, inp, Tout)``, ``tf.numpy_function(func, inp,
Tout, stateful=True)``).

Where it runs:

* In a dataset function (a ``dt.data`` map, :mod:`distrib.ops.value_mode`)
  on values: ``func`` is called at once on the element's values.
* Otherwise it adds an op, ``EagerPyFunc`` (``py_function``: ``func`` gets
  eager tensors) or ``PyFunc`` (``numpy_function``: numpy arrays), whose
  kernel (kernels/cpu/py_func.py) calls ``func`` from a process-local table
  under a token attr, as TF does (``py_function``'s ``func`` runs as a
  dataset function does, so the ops it builds on its eager tensors run at
  once, graph or not): the op runs only in the process that built
  it (eager execution, the client's in-process session, a map); a task of
  another process fails with a typed error naming the function. Nothing is
  pickled. With eager execution on, the op runs at once and its entry is
  dropped; in a graph the graph holds the entry (the table only names it
  weakly, as TF's), so it lives as long as the graph, and a function that
  refers to its graph goes with it.

Results convert to ``Tout`` (one dtype: one tensor; a list: a list); their
shapes are unknown to the graph (``set_shape`` them). Both ops have side
effects (TF marks them stateful): a traced function runs them, the graph
optimizer never folds them. ``numpy_function`` has no gradient (TF's);
``py_function``'s gradient (TF's tape inside the function) is not
implemented here: asking for it is an ``UnimplementedError`` saying so.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from distrib.eager.tensor import EagerTensor, wrap
from distrib.errors import InvalidArgumentError, UnimplementedError
from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops
from distrib.ops import value_mode

__all__ = ["py_function", "numpy_function", "py_func", "eager_py_func", "GRADIENTS",
           "NOT_DIFFERENTIABLE"]


def _touts(Tout: Any) -> tuple[list[dtypes.DType], bool]:  # noqa: N803 - TF's name
    """The output dtypes, and whether the result is one tensor (Tout not a list)."""
    if Tout is None:
        return [], False
    if isinstance(Tout, (list, tuple)):
        return [dtypes.as_dtype(t) for t in Tout], False
    return [dtypes.as_dtype(Tout)], True


def _name_of(func: Callable) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


def _to_array(value: Any, dtype: dtypes.DType, label: str) -> np.ndarray:
    if isinstance(value, EagerTensor):
        value = value.numpy()
    try:
        return np.asarray(value, dtype=dtype.as_numpy_dtype)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"the Python function {label!r} returned {value!r}, which "
                                   f"does not convert to {dtype.name}: {e}") from None


def _results(out: Any, touts: list[dtypes.DType], single: bool, label: str) -> list:
    if single:
        out = [out]
    elif out is None:
        out = []
    elif not isinstance(out, (list, tuple)):
        out = [out]
    if len(out) != len(touts):
        raise InvalidArgumentError(f"the Python function {label!r} returned {len(out)} values, "
                                   f"Tout declares {len(touts)} ({[t.name for t in touts]})")
    return [_to_array(v, t, label) for v, t in zip(out, touts)]


def _table_entry(func: Callable, eager_inputs: bool, touts: list, single: bool,
                 label: str) -> Callable[..., list]:
    """The callable the kernel calls: numpy arrays in, ``Tout``'s arrays out."""
    def call(*arrays: np.ndarray) -> list:
        if not eager_inputs:
            return _results(func(*arrays), touts, single, label)
        with value_mode.dataset_function():   # the ops func builds on its values run now
            return _results(func(*[wrap(a) for a in arrays]), touts, single, label)
    return call


def _build(op_type: str, func: Callable, inp: Any, Tout: Any, name: str | None,  # noqa: N803
           eager_inputs: bool) -> Any:
    if not callable(func):
        raise InvalidArgumentError(f"{op_type}: func must be callable, got {func!r}")
    touts, single = _touts(Tout)
    inputs = list(inp) if isinstance(inp, (list, tuple)) else ([] if inp is None else [inp])
    label = _name_of(func)
    if value_mode.values_now(*inputs):   # a dataset function on values: call it now
        args = [wrap(np.asarray(value_mode.as_value(v))) if eager_inputs
                else np.asarray(value_mode.as_value(v)) for v in inputs]
        outs = [wrap(v) for v in _results(func(*args), touts, single, label)]
        return outs[0] if single else outs
    from kernels.cpu.py_func import forget_callable, register_callable
    entry = _table_entry(func, eager_inputs, touts, single, label)   # alive while built
    token = register_callable(entry)
    with name_scope(name, op_type, inputs) as scope:
        tensors = [ops.convert_to_tensor(v) for v in inputs]
        attrs = {"token": token, "func_name": label, "Tout": [t.name for t in touts],
                 "Tin": [t.dtype.name for t in tensors]}
        graph = tensors[0].graph if tensors else ops.get_default_graph()
        try:
            op = graph.create_op(op_type, tensors, attrs, scope,
                                 output_specs=[(t, TensorShape(None)) for t in touts])
        except BaseException:
            forget_callable(token)
            raise
    _keep_while(op, token, entry)
    outs = list(op.outputs)
    return outs[0] if single else outs


def _keep_while(op: Any, token: str, entry: Callable[..., list]) -> None:
    """Keep ``entry`` alive while something can run the op: dropped at once for
    an op eager execution ran, else held by its graph (TF's rule: the table
    holds it weakly, the graph strongly, so a function that refers to its own
    graph does not keep that graph, and itself, alive for ever)."""
    from kernels.cpu.py_func import forget_callable
    graph = getattr(op, "graph", None)
    if graph is None or isinstance(op.outputs[0] if op.outputs else None, EagerTensor) \
            or not isinstance(op, Operation):
        forget_callable(token)
        return
    held = graph.__dict__.setdefault("_py_funcs_used_in_graph", [])
    held.append(entry)


def py_function(func: Callable, inp: Any = None, Tout: Any = None,  # noqa: N803 - TF's names
                name: str | None = None) -> Any:
    """``func`` (taking eager tensors) as an op on ``inp``, its results of ``Tout``
    (TF's ``tf.py_function``: an ``EagerPyFunc`` op)."""
    return _build("EagerPyFunc", func, inp, Tout, name, eager_inputs=True)


def numpy_function(func: Callable, inp: Any, Tout: Any, stateful: bool = True,  # noqa: N803
                   name: str | None = None) -> Any:
    """``func`` (taking numpy arrays) as an op on ``inp``, its results of ``Tout``
    (TF's ``tf.numpy_function``: a ``PyFunc`` op; always treated as stateful)."""
    return _build("PyFunc", func, inp, Tout, name, eager_inputs=False)


py_func = numpy_function          # TF1's tf.py_func
eager_py_func = py_function       # TF's alias


def _eager_py_func_grad(op: Operation, *grads: Tensor) -> Sequence[Any]:
    raise UnimplementedError(
        f"the gradient of py_function {op.get_attr('func_name')!r} (op {op.name!r}) is not "
        "implemented here (TF records the function's ops on a tape); compute it with dt ops, "
        "or wrap the call in dt.custom_gradient, or stop it with dt.stop_gradient")


GRADIENTS: dict[str, Any] = {"EagerPyFunc": _eager_py_func_grad}
NOT_DIFFERENTIABLE: tuple[str, ...] = ("PyFunc",)
