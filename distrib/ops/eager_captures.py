"""An eager variable inside a ``dt.function``: its twin graph variable.

TF2 lets a ``tf.function`` read and update a variable made eagerly (a Keras
model built outside any strategy, then ``fit``; an optimizer's step count).
Here a function's body is a graph that runs on a server, while an eager
variable's value lives in this process (``distrib.eager.store``), so while
a function traces, the variable stands in for a **twin**: a graph variable
of the same shared name in the trace's graph, outside every collection
(first-use initialization never touches it). Every read, update, gradient
and slot of the trace is the twin's.

The function keeps the two equal (``distrib.distribute.functions.eager_sync``):
before a call it writes the eager value into the twin when the process
changed it since (the store's version of it), and after the call it takes
back the values of the twins the function writes, fetched in the same step.
So a model built eagerly trains with ``fit`` and ``v.numpy()`` shows what
the training did, at the cost of one copy of the written variables per call.
"""
from __future__ import annotations

import weakref
from typing import Any

from distrib.eager.context import graph_mode
from distrib.framework.graph import get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.variables import Variable

__all__ = ["Twin", "twin_of", "twins"]

# graph -> {shared name: Twin}
_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Twin:
    """One eager variable's graph variable in one graph, and how to fill it."""

    __slots__ = ("eager", "variable", "value", "initializer", "__weakref__")

    def __init__(self, eager: Any, variable: Variable, value: Any, initializer: Any) -> None:
        self.eager = weakref.ref(eager)   # the process's variable (its store entry)
        self.variable = variable          # the graph variable the trace uses
        self.value = value                # a placeholder: the eager value, fed
        self.initializer = initializer    # Assign(variable, value): run when stale

    @property
    def shared_name(self) -> str:
        return self.variable.shared_name


def twins(graph: Any) -> dict[str, Twin]:
    """The twins made in ``graph``, by shared name."""
    return _TWINS.get(graph, {})


def twin_of(eager: Any) -> Variable:
    """The graph variable standing for eager variable ``eager`` in the default graph
    (made on first use, outside the trace's control dependencies and collections)."""
    graph = get_default_graph()
    found = _TWINS.setdefault(graph, {}).get(eager.shared_name)
    if found is not None and found.eager() is eager:
        return found.variable
    dtype, shape = eager.dtype, eager.shape
    shared = eager.shared_name
    with graph_mode(), graph.as_default(), graph.control_dependencies(None), \
            graph.name_scope(None), graph.name_scope("eager_capture"):
        value = graph.create_op("Placeholder", [], {"dtype": dtype, "shape": shape.as_list()},
                                shared + "/value", output_specs=[(dtype, shape)]).outputs[0]
        variable = object.__new__(Variable)   # a plain graph variable: no strategy's creator
        variable._trainable = eager.trainable  # noqa: SLF001 - built here as Variable._build does
        variable._variable_op = graph.create_op(  # noqa: SLF001
            "VariableV2", [], {"var": shared, "dtype": dtype, "shape": shape.as_list()},
            shared, output_specs=[(dtype, shape)])
        variable._initial_value = value  # noqa: SLF001
        with graph.colocate_with(variable.op):
            init = variable.assign(value, read_value=False)
            variable._initializer_op = init  # noqa: SLF001
            variable._snapshot = ops.identity(variable.op.outputs[0], name="read")  # noqa: SLF001
    _TWINS[graph][shared] = Twin(eager, variable, value, init)
    return variable
