"""Reverse-mode differentiation over the graph: ``dt.gradients(ys, xs)``, and
the registry of gradient functions in the op catalogue (TF's
``gradients_impl``/``gradients_util``).

Each op type's gradient, as in micrograd and TF, takes the forward op and the
gradients of its outputs and returns the gradients of its inputs, built from
ordinary ops. It lives in its op type's entry of the op catalogue
(:mod:`distrib.framework.op_def`), where the walk looks it up. The built-in
ones are defined by family, beside nothing else, in ``math_grad``,
``nn_grad``, ``conv_grad``, ``array_grad``, ``slicing_grad`` and ``state_grad``: each exposes a table
(``GRADIENTS``: op type -> function; ``NOT_DIFFERENTIABLE``: op types
gradients stop at), and :func:`install_builtin_gradients` is the one place
that writes them into the catalogue (the process runtime, ``distrib.process``,
calls it before anything can build a gradient). Users add or
replace one with TF's decorator, ``@dt.register_gradient("MatMul")``, or
stop gradients at a type with ``dt.no_gradient``.

``gradients`` walks the ops between ``xs`` and ``ys`` in reverse creation
order (creation order is topological: an op's inputs exist before it), sums
the gradients that reach a tensor along several paths with Adds, and builds
every gradient op colocated with its forward op, so the backward pass runs
on the devices the forward pass did (no needless copies between tasks).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Mapping, Sequence

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework import op_def as catalogue
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.ops import (
    array_grad,
    array_ops,
    conv_grad,
    gather_grad,
    image_grad,
    math_grad,
    nn_grad,
    slicing_grad,
    state_grad,
    vocabulary_grad,
)
from distrib.ops import math_ops as ops
from distrib.ops.custom_gradient import CustomGradient, custom_gradients
from distrib.ops.indexed_slices import IndexedSlices

__all__ = ["gradients", "register_gradient", "no_gradient", "NotDifferentiable",
           "get_gradient_function", "install_gradients", "install_builtin_gradients",
           "BUILTIN_FAMILIES"]

GradFn = Callable[..., Sequence[Any]]


def register_gradient(op_type: str) -> Callable[[GradFn], GradFn]:
    """Decorator: ``fn(op, *output_grads) -> [input_grad or None, ...]`` for
    ``op_type``, written into its op catalogue entry (``NotFoundError`` for a
    type the catalogue does not have)."""
    def register(fn: GradFn) -> GradFn:
        catalogue.set_gradient(op_type, fn)
        return fn
    return register


def no_gradient(op_type: str) -> None:
    """Declare ``op_type`` not differentiable: gradients stop there (inputs get None)."""
    catalogue.set_gradient(op_type, None, no_gradient=True)


NotDifferentiable = no_gradient


def install_gradients(table: Mapping[str, GradFn], not_differentiable: Iterable[str] = ()
                      ) -> None:
    """Write a family's gradients (op type -> function) into the op catalogue,
    and declare ``not_differentiable``'s op types not differentiable."""
    for op_type, fn in table.items():
        register_gradient(op_type)(fn)
    for op_type in not_differentiable:
        no_gradient(op_type)


def get_gradient_function(op: Operation) -> GradFn | None:
    """The gradient of ``op``'s type from its catalogue entry; None where it
    is declared not differentiable."""
    entry = catalogue.find_op_def(op.type)
    if entry is None or (entry.gradient is None and not entry.no_gradient):
        raise NotFoundError(
            f"no gradient is defined for op {op.name!r} (type {op.type}), which lies between "
            "ys and xs; register one with @dt.register_gradient(\"" + op.type + "\") "
            "or keep the op off the differentiated path")
    return entry.gradient


def _stops_gradients(op_type: str) -> bool:
    entry = catalogue.find_op_def(op_type)
    return entry is not None and entry.no_gradient


# -- the walk -------------------------------------------------------------------
def gradients(ys: Any, xs: Any, grad_ys: Any = None, name: str = "gradients",
              colocate_gradients_with_ops: bool = True, gate_gradients: bool = False,
              aggregation_method: Any = None, stop_gradients: Any = None) -> list[Tensor | None]:
    """d(sum of ys)/d(x) for each x in xs; None for an x that ys do not depend on.

    ``grad_ys`` (default ones) weights each y. Variables in xs are differentiated
    at their ``VariableV2`` output, i.e. through every read of them.
    """
    ys = [ops.convert_to_tensor(y) for y in _as_list(ys)]
    # a variable is every VariableV2 node reading it (its snapshot and fresh reads);
    # ``_reads`` is a hook any variable-like object (a mirrored one) has, named
    # privately as TF's ``_as_graph_element``, so no unrelated attribute matches it
    groups = [x._reads() if hasattr(x, "_reads")  # noqa: SLF001 - the variables' hook
              else [ops.convert_to_tensor(x)] for x in _as_list(xs)]
    xs = [t for group in groups for t in group]
    grad_ys = [None] * len(ys) if grad_ys is None else _as_list(grad_ys)
    if len(grad_ys) != len(ys):
        raise InvalidArgumentError(f"gradients: {len(grad_ys)} grad_ys for {len(ys)} ys")
    stops = {ops.convert_to_tensor(s).op for s in _as_list(stop_gradients or [])}
    graph = ys[0].graph
    with graph.as_default(), name_scope(name, "gradients", ys + xs):
        pending = _seed(ys, grad_ys)
        custom = custom_gradients(graph)   # ops with their own gradient (custom_gradient.py)
        between = _ops_between(graph, xs, ys, stops, custom)
        for op in sorted(between, key=_creation_index(graph), reverse=True):
            _backprop_op(op, pending, colocate_gradients_with_ops, custom.get(op))
        return [_aggregate(group[0], [g for x in group for g in pending.get(x, ())],
                           colocate_gradients_with_ops) for group in groups]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _creation_index(graph: Any) -> Callable[[Operation], int]:
    index = {op: i for i, op in enumerate(graph.get_operations())}
    return index.__getitem__


def _seed(ys: list[Tensor], grad_ys: list[Any]) -> dict[Tensor, list[Tensor]]:
    pending: dict[Tensor, list[Tensor]] = {}
    for y, gy in zip(ys, grad_ys):
        with y.graph.colocate_with(y.op), name_scope(y.op.name + "_grad"):
            seed = ops.ones_like(y, name="grad_ys") if gy is None else ops.convert_to_tensor(
                gy, dtype=y.dtype, name="grad_ys")
        pending.setdefault(y, []).append(seed)
    return pending


def _ops_between(graph: Any, xs: list[Tensor], ys: list[Tensor], stops: set,
                 custom: dict[Operation, CustomGradient] | None = None) -> set[Operation]:
    """Ops on some data path from an x to a y (the only ops that need a gradient).
    A path ends at a stop and at a non-differentiable op (``no_gradient``: a
    ``OnesLike`` of the loss, say): nothing past it can carry a gradient back.
    An op with a custom gradient is reached through the inputs its entry names."""
    custom = custom or {}
    consumers: dict[Tensor, list[Operation]] = {}
    for op in graph.get_operations():
        for t in _inputs(op, custom):
            consumers.setdefault(t, []).append(op)
    reached: set[Operation] = set()
    frontier = [c for x in xs for c in consumers.get(x, ())]
    while frontier:
        op = frontier.pop()
        if op in reached or op in stops or _stops_gradients(op.type):
            continue
        reached.add(op)
        frontier.extend(c for t in op.outputs for c in consumers.get(t, ()))
    between: set[Operation] = set()
    frontier = [y.op for y in ys]
    while frontier:
        op = frontier.pop()
        if op in between or op not in reached:
            continue
        between.add(op)
        frontier.extend(t.op for t in _inputs(op, custom))
    return between


def _inputs(op: Operation, custom: dict[Operation, CustomGradient]) -> tuple[Tensor, ...]:
    entry = custom.get(op)
    return op.inputs if entry is None else entry.inputs


def _backprop_op(op: Operation, pending: dict[Tensor, list[Tensor]], colocate: bool,
                 custom: CustomGradient | None = None) -> None:
    out_grads = [_aggregate(t, pending.get(t), colocate) for t in op.outputs]
    if all(g is None for g in out_grads):
        return
    fn = get_gradient_function(op) if custom is None else custom.fn
    if fn is None:
        return
    inputs = op.inputs if custom is None else custom.inputs
    graph = op.graph
    with _maybe_colocate(graph, op, colocate), name_scope(op.name + "_grad"):
        in_grads = list(fn(op, *out_grads))
    if len(in_grads) != len(inputs):
        raise InvalidArgumentError(f"the gradient function of {op.type} returned {len(in_grads)} "
                                   f"gradients for {len(inputs)} inputs (op {op.name!r})")
    for t, g in zip(inputs, in_grads):
        if g is not None and t.dtype.is_floating:
            pending.setdefault(t, []).append(g)


def _maybe_colocate(graph: Any, op: Operation, colocate: bool) -> Any:
    return graph.colocate_with(op) if colocate else contextlib.nullcontext()


def _aggregate(t: Tensor, grads: list[Tensor] | None, colocate: bool) -> Tensor | None:
    """The sum of the gradients that reached ``t`` (Adds, next to t's producer)."""
    if not grads:
        return None
    if len(grads) == 1:
        return grads[0]
    with _maybe_colocate(t.graph, t.op, colocate), name_scope(t.op.name + "_grad"):
        if all(isinstance(g, IndexedSlices) for g in grads):
            return _join_slices(grads)
        return ops.add_n(grads, name="AddN")   # (an IndexedSlices among tensors densifies)


def _join_slices(grads: list[IndexedSlices]) -> IndexedSlices:
    """Sparse gradients that meet stay sparse: values and indices concatenated
    (TF's ``AggregateIndexedSlicesGradients``); repeated rows add later."""
    indices = [g.indices if g.indices.dtype == grads[0].indices.dtype
               else ops.cast(g.indices, grads[0].indices.dtype) for g in grads]
    return IndexedSlices(array_ops.concat([g.values for g in grads], 0, name="values"),
                         array_ops.concat(indices, 0, name="indices"), grads[0].dense_shape)


# -- the built-in gradients --------------------------------------------------------------
BUILTIN_FAMILIES = (math_grad, nn_grad, conv_grad, array_grad, slicing_grad, state_grad,
                    gather_grad, vocabulary_grad, image_grad)
# the bounding-box crop's ops and BroadcastTo (issue 40), appended
from distrib.ops import broadcast_ops, image_boxes  # noqa: E402

BUILTIN_FAMILIES += (broadcast_ops, image_boxes)
# TF's everyday names (issue 39's remainder), appended
from distrib.ops import asserts, everyday_ops, linalg_ops, nd_ops, py_func_ops  # noqa: E402

BUILTIN_FAMILIES += (py_func_ops, everyday_ops, asserts, nd_ops, linalg_ops)


def install_builtin_gradients() -> None:
    """Write every built-in family's table into the op catalogue (again: a
    gradient a user registered for a built-in op type is replaced)."""
    for family in BUILTIN_FAMILIES:
        install_gradients(family.GRADIENTS, family.NOT_DIFFERENTIABLE)
