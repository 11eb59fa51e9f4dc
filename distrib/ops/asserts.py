"""``dt.print`` and the ``dt.debugging`` asserts (``assert_equal``,
``assert_greater``, ``assert_less``, ``assert_rank``,
``assert_non_negative``, ``assert_positive``, also as ``dt.assert_*``).

TF's rules: an assert whose inputs' values are known where it is called
(eager tensors, a dataset function's values, a graph's constants) is
decided there, and a failure is an ``InvalidArgumentError`` at once (TF2
raises it eagerly; in a graph TF raises it at build time when the
condition is static); otherwise it adds an ``Assert`` op (condition, then
the data the error shows), which fails the step that runs it. Eager calls
return None, graph calls the op (a control dependency, as TF1 programs use
it). ``dt.print`` formats its inputs as TF's ``StringFormat`` does
(``[0 1 2 ... 7 8 9]`` at ``summarize=3``) and writes them with
``PrintV2``: to stderr by default, stdout, or ``logging`` (``log(info)``
...), in the task that runs it; eager and dataset-function calls print at
once. Kernels: kernels/cpu/everyday_array.py.
"""
from __future__ import annotations

import logging
import pprint
import sys
from typing import Any

import numpy as np

from distrib.eager.tensor import EagerTensor
from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops import value_mode
from distrib.ops.everyday_ops import rank as rank_op
from distrib.ops.math_extra_ops import reduce_all

__all__ = ["print_v2", "StaticRankError", "assert_equal", "assert_greater", "assert_less", "assert_rank",
           "assert_non_negative", "assert_positive", "assert_greater_equal", "assert_less_equal",
           "assert_none_equal", "assert_negative", "assert_non_positive", "Assert", "GRADIENTS",
           "NOT_DIFFERENTIABLE"]


def _static(x: Any) -> np.ndarray | None:
    """``x``'s value when it is known now (eager, a value, a graph constant), else None."""
    if isinstance(x, EagerTensor):
        return np.asarray(x.numpy())
    if isinstance(x, Tensor):
        return np.asarray(x.op.get_attr("value")) if x.op.type == "Const" else None
    if hasattr(x, "_as_tensor"):
        return None
    return np.asarray(x)


def _eager_or_values(*xs: Any) -> bool:
    return all(isinstance(x, EagerTensor) for x in xs if ops.is_tensor(x)) and \
        not any(isinstance(x, Tensor) for x in xs)


def _label(x: Any, default: str) -> str:
    name = getattr(x, "name", None) if isinstance(x, Tensor) else None
    return name or default


def _fmt(v: np.ndarray, summarize: int) -> str:
    from kernels.cpu.everyday_array import format_tensor
    return format_tensor(v, summarize)


def _check(condition: Any, x: Any, y: Any, what: str, message: Any, summarize: Any,
           name: str | None, default: str) -> Any:
    """The assert of ``condition`` (a bool tensor built on x and y) that ``what`` holds."""
    n = 3 if summarize is None else int(summarize)
    head = (str(message) + "\n") if message else ""
    xv, yv = _static(x), None if y is None else _static(y)
    if xv is not None and (y is None or yv is not None):
        cond = _static(condition) if condition is not None else None
        if cond is not None and not bool(np.all(cond)):
            detail = f"x ({_label(x, 'x')}) = {_fmt(xv, n)}"
            if y is not None:
                detail += f"\ny ({_label(y, 'y')}) = {_fmt(yv, n)}"
            raise InvalidArgumentError(f"{head}Condition {what} did not hold element-wise:\n"
                                       f"{detail}")
        if _eager_or_values(x, y):
            return None
    with name_scope(name, default, [x, y]) as scope:
        data: list[Any] = []
        if message:
            data.append(ops.constant(str(message)))
        data += [ops.constant(f"Condition {what} did not hold element-wise:"),
                 ops.constant(f"x ({_label(x, 'x')}) = "), ops.convert_to_tensor(x)]
        if y is not None:
            data += [ops.constant(f"y ({_label(y, 'y')}) = "), ops.convert_to_tensor(y)]
        return Assert(reduce_all(condition), data, summarize=n, name=scope)


def Assert(condition: Any, data: Any, summarize: int | None = None,  # noqa: N802 - TF's
           name: str | None = None) -> Any:
    """An op that fails with ``data`` when ``condition`` (a bool scalar) is false
    (TF's ``tf.debugging.Assert``); eager: checked at once, returns None."""
    cond = ops.convert_to_tensor(condition)
    tensors = [ops.convert_to_tensor(d) for d in data]
    attrs = {"summarize": 3 if summarize is None else int(summarize)}
    op = ops.make_op("Assert", [cond] + tensors, attrs, name or "Assert")
    return op if isinstance(op, Operation) else None


def _binary(x: Any, y: Any, compare: Any, what: str, message: Any, summarize: Any,
            name: str | None, default: str) -> Any:
    xt = ops.convert_to_tensor(x) if not isinstance(x, (Tensor, EagerTensor)) else x
    yt = ops.convert_to_tensor(y, dtype=xt.dtype) if not ops.is_tensor(y) else y
    xv, yv = _static(xt), _static(yt)
    if xv is not None and yv is not None:
        try:
            ok = compare(xv, yv)
        except ValueError as e:
            raise InvalidArgumentError(f"{default}: x {list(xv.shape)} and y "
                                       f"{list(yv.shape)} do not broadcast: {e}") from None
        return _check(np.asarray(ok), xt, yt, what, message, summarize, name, default)
    compare_op = _COMPARE_OPS[what.split(" ")[1]]
    return _check(compare_op(xt, yt), xt, yt, what, message, summarize, name, default)


_COMPARE_OPS = {"==": ops.equal, ">": ops.greater, "<": ops.less, ">=": ops.greater_equal,
                "<=": ops.less_equal, "!=": ops.not_equal}


def assert_equal(x: Any, y: Any, message: Any = None, summarize: Any = None,
                 name: str | None = None) -> Any:
    """Assert ``x == y`` element-wise (TF's ``tf.debugging.assert_equal``)."""
    return _binary(x, y, np.equal, "x == y", message, summarize, name, "assert_equal")


def assert_greater(x: Any, y: Any, message: Any = None, summarize: Any = None,
                   name: str | None = None) -> Any:
    """Assert ``x > y`` element-wise."""
    return _binary(x, y, np.greater, "x > y", message, summarize, name, "assert_greater")


def assert_less(x: Any, y: Any, message: Any = None, summarize: Any = None,
                name: str | None = None) -> Any:
    """Assert ``x < y`` element-wise."""
    return _binary(x, y, np.less, "x < y", message, summarize, name, "assert_less")


def assert_non_negative(x: Any, message: Any = None, summarize: Any = None,
                        name: str | None = None) -> Any:
    """Assert ``x >= 0`` element-wise."""
    xt = ops.convert_to_tensor(x) if not ops.is_tensor(x) else x
    return _binary(xt, 0, np.greater_equal, "x >= 0", message, summarize, name,
                   "assert_non_negative")


def assert_positive(x: Any, message: Any = None, summarize: Any = None,
                    name: str | None = None) -> Any:
    """Assert ``x > 0`` element-wise."""
    xt = ops.convert_to_tensor(x) if not ops.is_tensor(x) else x
    return _binary(xt, 0, np.greater, "x > 0", message, summarize, name, "assert_positive")


def assert_greater_equal(x: Any, y: Any, message: Any = None, summarize: Any = None,
                         name: str | None = None) -> Any:
    """Assert ``x >= y`` element-wise."""
    return _binary(x, y, np.greater_equal, "x >= y", message, summarize, name,
                   "assert_greater_equal")


def assert_less_equal(x: Any, y: Any, message: Any = None, summarize: Any = None,
                      name: str | None = None) -> Any:
    """Assert ``x <= y`` element-wise."""
    return _binary(x, y, np.less_equal, "x <= y", message, summarize, name, "assert_less_equal")


def assert_none_equal(x: Any, y: Any, message: Any = None, summarize: Any = None,
                      name: str | None = None) -> Any:
    """Assert ``x != y`` element-wise."""
    return _binary(x, y, np.not_equal, "x != y", message, summarize, name, "assert_none_equal")


def assert_negative(x: Any, message: Any = None, summarize: Any = None,
                    name: str | None = None) -> Any:
    """Assert ``x < 0`` element-wise."""
    xt = ops.convert_to_tensor(x) if not ops.is_tensor(x) else x
    return _binary(xt, 0, np.less, "x < 0", message, summarize, name, "assert_negative")


def assert_non_positive(x: Any, message: Any = None, summarize: Any = None,
                        name: str | None = None) -> Any:
    """Assert ``x <= 0`` element-wise."""
    xt = ops.convert_to_tensor(x) if not ops.is_tensor(x) else x
    return _binary(xt, 0, np.less_equal, "x <= 0", message, summarize, name,
                   "assert_non_positive")


class StaticRankError(InvalidArgumentError, ValueError):
    """A rank known where ``assert_rank`` is called that is not the one asked
    for: TF raises ``ValueError`` there; this is also an ``InvalidArgumentError``."""


def assert_rank(x: Any, rank: Any, message: Any = None, name: str | None = None) -> Any:
    """Assert ``x`` has rank ``rank``: decided at once when the rank is known
    (TF raises ``ValueError`` there: :class:`StaticRankError`, both a
    ``ValueError`` and an ``InvalidArgumentError``), else an ``Assert`` op."""
    xt = ops.convert_to_tensor(x) if not ops.is_tensor(x) else x
    want = _static(rank)
    known = xt.shape.rank
    if want is not None and known is not None:
        if known != int(want):
            head = (str(message) + " ") if message else ""
            raise StaticRankError(f"{head}Tensor {_label(xt, 'x')} must have rank "
                                       f"{int(want)}. Received rank {known}, shape {xt.shape}")
        if isinstance(xt, EagerTensor) or value_mode.in_dataset_function():
            return None
    with name_scope(name, "assert_rank", [xt, rank]) as scope:
        r = rank_op(xt)
        target = ops.convert_to_tensor(rank, dtype=dtypes.int32)
        data = ([ops.constant(str(message))] if message else []) + [
            ops.constant(f"Tensor {_label(xt, 'x')} must have rank"), target,
            ops.constant("Received shape: "), ops.shape(xt)]
        return Assert(ops.equal(r, target), data, name=scope)


# -- dt.print -----------------------------------------------------------------------------------
def _stream(output_stream: Any) -> str:
    if output_stream is sys.stderr:
        return "stderr"
    if output_stream is sys.stdout:
        return "stdout"
    levels = {logging.info: "log(info)", logging.warning: "log(warning)",
              logging.error: "log(error)"}
    if callable(output_stream) and output_stream in levels:
        return levels[output_stream]
    if isinstance(output_stream, str) and output_stream in ("stderr", "stdout", "log(info)",
                                                            "log(warning)", "log(error)"):
        return output_stream
    raise InvalidArgumentError(f"dt.print: output_stream {output_stream!r} is not supported: "
                               "use sys.stderr, sys.stdout, logging.info, logging.warning or "
                               "logging.error")


def print_v2(*inputs: Any, output_stream: Any = None, summarize: int = 3, sep: str = " ",
             end: str = "\n", name: str | None = None) -> Any:
    """TF's ``tf.print``: the inputs (tensors formatted as TF's ``StringFormat``,
    strings as they are, other Python objects and nested lists, tuples and
    dicts of tensors as ``pprint`` writes them) joined by ``sep``, then ``end``,
    written to ``output_stream`` (default stderr) when the op runs; eager: at once."""
    stream = _stream(sys.stderr if output_stream is None else output_stream)
    free = sep.join(i if isinstance(i, str) else pprint.pformat(_packed(i, "", []))
                    for i in inputs)   # the text without tensors: the placeholder is not in it
    placeholder = "{}"
    while placeholder in free:
        placeholder = "{" + placeholder + "}"
    parts: list[str] = []
    tensors: list[Any] = []
    for item in inputs:
        if isinstance(item, str):
            parts.append(item)
        elif _tensorish(item):
            parts.append(placeholder)
            tensors.append(item)
        else:   # TF's: a nested structure printed as Python does, its tensors formatted
            text = pprint.pformat(_packed(item, placeholder, tensors))
            parts.append(text.replace(repr(placeholder), placeholder))
    template = sep.join(parts)
    graph_input = any(isinstance(t, Tensor) or (hasattr(t, "_as_tensor") and not hasattr(t, "numpy"))
                      for t in tensors)
    if not graph_input and (value_mode.in_dataset_function() or _executing_eagerly()):
        from kernels.cpu.everyday_array import format_template, write_line
        values = [np.asarray(t.numpy() if hasattr(t, "numpy") else t) for t in tensors]
        write_line(format_template(template, placeholder, values,
                                   int(summarize)), stream, end)
        return None
    with name_scope(name, "PrintV2", tensors) as scope:
        text = ops.op_output("StringFormat", [ops.convert_to_tensor(t) for t in tensors],
                             {"template": template, "placeholder": placeholder,
                              "summarize": int(summarize)}, "StringFormat")
        return ops.make_op("PrintV2", [text], {"output_stream": stream, "end": end}, scope)


def _tensorish(x: Any) -> bool:
    """A tensor, or a numpy value (what a dataset function's tensors are)."""
    return ops.is_tensor(x) or isinstance(x, (np.ndarray, np.generic))


def _packed(item: Any, placeholder: str, tensors: list) -> Any:
    """``item`` (lists, tuples, dicts nested) with each tensor replaced by
    ``placeholder`` and appended to ``tensors`` in order (TF's nest order:
    a dict's values by sorted key, as ``pprint`` prints them)."""
    if _tensorish(item):
        tensors.append(item)
        return placeholder
    if isinstance(item, dict):
        return {k: _packed(item[k], placeholder, tensors) for k in sorted(item)}
    if isinstance(item, (list, tuple)):
        packed = [_packed(v, placeholder, tensors) for v in item]
        return packed if isinstance(item, list) else tuple(packed)
    return item


def _executing_eagerly() -> bool:
    from distrib.eager.context import executing_eagerly
    return executing_eagerly()


GRADIENTS: dict[str, Any] = {}
NOT_DIFFERENTIABLE: tuple[str, ...] = ("Assert", "StringFormat", "PrintV2")
