"""``dt.debugging``: TF's ``tf.debugging`` (re-exports and small checks):
``check_numerics``, ``is_numeric_tensor``, ``assert_all_finite``, and
``add_check_numerics_ops`` (TF1's ``tf.add_check_numerics_ops``: a
``CheckNumerics`` on every floating-point output of the default graph, grouped
into one op that a step runs to find the first inf or NaN).
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Operation, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.math_extra_ops import check_numerics, is_finite, is_inf, is_nan

__all__ = ["check_numerics", "assert_all_finite", "add_check_numerics_ops", "is_numeric_tensor",
           "is_finite", "is_inf", "is_nan"]


def assert_all_finite(t: Any, msg: str, name: str | None = None, x: Any = None,
                      message: str | None = None) -> Any:
    """``t`` checked for inf and NaN when a step runs (``check_numerics``)."""
    return check_numerics(t if x is None else x, msg if message is None else message, name)


def is_numeric_tensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a tensor of a numeric dtype."""
    return ops.is_tensor(tensor) and tensor.dtype.is_numeric


def add_check_numerics_ops() -> Operation:
    """A group of ``CheckNumerics`` ops, one per floating-point output of every op
    in the default graph so far (TF1's ``tf.add_check_numerics_ops``)."""
    graph = get_default_graph()
    checks = []
    for op in list(graph.get_operations()):
        if op.type == "CheckNumerics":
            continue
        for out in op.outputs:
            if out.dtype.is_floating:
                message = f"{op.name}:{out.value_index}"
                with graph.control_dependencies(checks[-1:]):   # one at a time, in order
                    checks.append(check_numerics(out, message))
    return ops.group(*checks, name="CheckNumerics")
