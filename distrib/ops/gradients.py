"""Reverse-mode differentiation over the graph: ``dt.gradients(ys, xs)``.

Each op type's gradient function, as in micrograd and TF:
``@register_gradient("MatMul")`` functions take the forward op and the
gradients of its outputs and return the gradients of its inputs, built from
ordinary ops. They are written here, beside the builders they use, into the
op type's entry of the op catalogue (:mod:`distrib.framework.op_def`), where
they are looked up. ``gradients`` walks the ops between ``xs`` and ``ys`` in reverse
creation order (creation order is topological: an op's inputs exist before
it), sums the gradients that reach a tensor along several paths with Adds, and
builds every gradient op colocated with its forward op, so the backward pass
runs on the devices the forward pass did (no needless copies between tasks).

Broadcasting is undone with ``SumToShapeOf`` and reductions with
``BroadcastToShapeOf`` (docs/ops.md), which read the reference shape at run
time, so unknown batch dimensions need no special care. These and the other
ops gradients emit (``ReluGrad``, ``SigmoidGrad``, ``TanhGrad``,
``BiasAddGrad``) have gradients too, so a gradient can be differentiated again
(Hessian terms, gradient penalties).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework import op_def as catalogue
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.custom_gradient import CustomGradient, custom_gradients

__all__ = ["gradients", "register_gradient", "no_gradient", "NotDifferentiable",
           "get_gradient_function"]

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
        return ops.add_n(grads, name="AddN")


# -- helpers for gradient functions -------------------------------------------------
def _sum_to(grad: Tensor, ref: Tensor, other: Tensor | None = None) -> Tensor:
    """``grad`` summed back to ``ref``'s shape (the adjoint of broadcasting);
    ``other``: the operand ``ref`` was broadcast against, when there was one."""
    if ref.shape.is_fully_defined() and grad.shape == ref.shape:
        return grad
    if other is not None and _keeps_shape(ref, other):
        return grad   # a dense layer's x + bias: nothing to sum, no op
    return ops.op_output("SumToShapeOf", [grad, ref], None, "SumToShapeOf")


def _keeps_shape(ref: Tensor, other: Tensor) -> bool:
    """Whether broadcasting ``other`` against ``ref`` surely gives ``ref``'s own
    shape, known dimensions or not: ``other`` has no more dimensions, and each
    of its dimensions is 1 or meets a known dimension of ``ref`` other than 1
    (which a size 1 cannot stretch). [None, 512] + [512] is [None, 512]."""
    a, b = ref.shape.as_list(), other.shape.as_list()
    if a is None or b is None or len(b) > len(a):
        return False
    return all(db == 1 or (da is not None and da != 1)
               for da, db in zip(a[len(a) - len(b):], b))


def _broadcast_to(grad: Tensor, ref: Tensor, axis: Any, keepdims: bool,
                  mean: bool = False) -> Tensor:
    """``grad`` of a reduction over ``axis`` spread back to ``ref``'s shape;
    ``mean``: also divided by how many elements each output reduced (one op
    where the count would otherwise take ten when the shape is known only at
    run time)."""
    return ops.op_output("BroadcastToShapeOf", [grad, ref],
                    {"axis": axis, "keepdims": keepdims, "mean": mean}, "BroadcastToShapeOf")


def _spread_to(grad: Tensor, ref: Tensor) -> Tensor:
    """``grad`` broadcast out to ``ref``'s shape by numpy's rules (the adjoint
    of a sum that broadcasting or a bias gradient made)."""
    return ops.add(ops.zeros_like(ref), grad)


def _float_mask(cond: Tensor, like: Tensor) -> Tensor:
    return ops.cast(cond, like.dtype)


# -- elementwise ---------------------------------------------------------------------
@register_gradient("Identity")
def _identity_grad(op: Operation, g: Tensor) -> list:
    return [g]


@register_gradient("Add")
def _add_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    return [_sum_to(g, x, y), _sum_to(g, y, x)]


@register_gradient("Sub")
def _sub_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    return [_sum_to(g, x, y), _sum_to(ops.negative(g), y, x)]


@register_gradient("Mul")
def _mul_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    return [_sum_to(ops.multiply(g, y), x, y), _sum_to(ops.multiply(x, g), y, x)]


@register_gradient("RealDiv")
def _div_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    gy = ops.multiply(ops.negative(g), ops.divide(ops.divide(x, y), y))
    return [_sum_to(ops.divide(g, y), x), _sum_to(gy, y)]


@register_gradient("Maximum")
def _maximum_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    mask = _float_mask(ops.greater_equal(x, y), g)  # ties go to x, as in TF
    return [_sum_to(ops.multiply(g, mask), x), _sum_to(ops.multiply(g, 1.0 - mask), y)]


@register_gradient("Minimum")
def _minimum_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    mask = _float_mask(ops.less_equal(x, y), g)
    return [_sum_to(ops.multiply(g, mask), x), _sum_to(ops.multiply(g, 1.0 - mask), y)]


@register_gradient("Pow")
def _pow_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    z = op.outputs[0]
    gx = ops.multiply(g, ops.multiply(y, ops.pow(x, ops.subtract(y, 1.0))))
    # d/dy x^y = x^y log x, taken as 0 where x <= 0 (TF's convention), without nan:
    positive = _float_mask(ops.greater(x, 0.0), x)
    safe_log = ops.multiply(ops.log(ops.add(ops.multiply(x, positive), 1.0 - positive)), positive)
    gy = ops.multiply(g, ops.multiply(z, safe_log))
    return [_sum_to(gx, x), _sum_to(gy, y)]


@register_gradient("Neg")
def _neg_grad(op: Operation, g: Tensor) -> list:
    return [ops.negative(g)]


@register_gradient("Log")
def _log_grad(op: Operation, g: Tensor) -> list:
    return [ops.divide(g, op.inputs[0])]


@register_gradient("Exp")
def _exp_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, op.outputs[0])]


@register_gradient("Square")
def _square_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, ops.multiply(op.inputs[0], 2.0))]


@register_gradient("Sqrt")
def _sqrt_grad(op: Operation, g: Tensor) -> list:
    return [ops.divide(g, ops.multiply(op.outputs[0], 2.0))]


@register_gradient("Abs")
def _abs_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, ops.sign(op.inputs[0]))]


@register_gradient("Relu")
def _relu_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("ReluGrad", [g, op.outputs[0]], None, "ReluGrad")]


@register_gradient("Sigmoid")
def _sigmoid_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("SigmoidGrad", [op.outputs[0], g], None, "SigmoidGrad")]


@register_gradient("Tanh")
def _tanh_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("TanhGrad", [op.outputs[0], g], None, "TanhGrad")]


@register_gradient("Cast")
def _cast_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    if x.dtype.is_floating and op.outputs[0].dtype.is_floating:
        return [ops.cast(g, x.dtype)]
    return [None]


# -- linear algebra / nn -------------------------------------------------------------
@register_gradient("MatMul")
def _matmul_grad(op: Operation, g: Tensor) -> list:
    a, b = op.inputs
    ta, tb = bool(op.get_attr("transpose_a")), bool(op.get_attr("transpose_b"))
    mm = ops.matmul
    if not ta and not tb:
        return [mm(g, b, transpose_b=True), mm(a, g, transpose_a=True)]
    if not ta and tb:
        return [mm(g, b), mm(g, a, transpose_a=True)]
    if ta and not tb:
        return [mm(b, g, transpose_b=True), mm(a, g)]
    return [mm(b, g, transpose_a=True, transpose_b=True),
            mm(g, a, transpose_a=True, transpose_b=True)]


@register_gradient("BiasAdd")
def _bias_add_grad(op: Operation, g: Tensor) -> list:
    return [g, ops.op_output("BiasAddGrad", [g], None, "BiasAddGrad")]


@register_gradient("Softmax")
def _softmax_grad(op: Operation, g: Tensor) -> list:
    y = op.outputs[0]
    inner = ops.reduce_sum(ops.multiply(g, y), axis=-1, keepdims=True)
    return [ops.multiply(ops.subtract(g, inner), y)]


@register_gradient("LogSoftmax")
def _log_softmax_grad(op: Operation, g: Tensor) -> list:
    softmax = ops.exp(op.outputs[0])
    return [ops.subtract(g, ops.multiply(ops.reduce_sum(g, axis=-1, keepdims=True), softmax))]


def _xent_grad(op: Operation, g_loss: Tensor | None, g_backprop: Tensor | None) -> list:
    # labels get no gradient (tf.compat.v1 semantics); the backprop output's own
    # gradient (second order) is not supported and ignored, as TF1 does.
    if g_loss is None:
        return [None, None]
    column = ops.reshape(g_loss, [-1, 1])
    return [ops.multiply(column, op.outputs[1]), None]


register_gradient("SoftmaxCrossEntropyWithLogits")(_xent_grad)
register_gradient("SparseSoftmaxCrossEntropyWithLogits")(_xent_grad)


# -- reductions -------------------------------------------------------------------------
def _axis_keep(op: Operation) -> tuple[Any, bool]:
    return op.get_attr("axis"), bool(op.get_attr("keepdims"))


@register_gradient("Sum")
def _sum_grad(op: Operation, g: Tensor) -> list:
    axis, keep = _axis_keep(op)
    return [_broadcast_to(g, op.inputs[0], axis, keep)]


@register_gradient("Mean")
def _mean_grad(op: Operation, g: Tensor) -> list:
    axis, keep = _axis_keep(op)
    return [_broadcast_to(g, op.inputs[0], axis, keep, mean=True)]


def _min_max_grad(op: Operation, g: Tensor) -> list:
    """The gradient goes to the positions that hold the extreme, split evenly on ties."""
    x, y = op.inputs[0], op.outputs[0]
    axis, keep = _axis_keep(op)
    y_full = _broadcast_to(y, x, axis, keep)
    hits = _float_mask(ops.equal(x, y_full), g)
    n_hits = _broadcast_to(ops.reduce_sum(hits, axis=axis, keepdims=True), x, axis, True)
    return [ops.divide(ops.multiply(_broadcast_to(g, x, axis, keep), hits), n_hits)]


register_gradient("Max")(_min_max_grad)
register_gradient("Min")(_min_max_grad)


@register_gradient("Prod")
def _prod_grad(op: Operation, g: Tensor) -> list:
    """d prod / d x_i is the product of the other elements of x_i's group.

    Not ``y / x_i``, which is 0/0 where x_i is 0: with no zero in a group it
    is ``p / x_i`` (``p``: the product of the group's nonzero elements), with
    exactly one zero it is ``p`` at the zero and 0 elsewhere, and with two or
    more zeros it is 0 everywhere (as TensorFlow's exclusive cumprods give)."""
    x = op.inputs[0]
    axis, keep = _axis_keep(op)
    zero = _float_mask(ops.equal(x, 0), x)
    nonzero = ops.add(x, zero)   # each 0 replaced by 1
    # per group (kept dims, so they broadcast back over x's elements)
    zeros = ops.reduce_sum(zero, axis=axis, keepdims=True)
    p = ops.reduce_prod(nonzero, axis=axis, keepdims=True)
    others = ops.multiply(p, ops.add(
        ops.divide(_float_mask(ops.equal(zeros, 0), x), nonzero),
        ops.multiply(_float_mask(ops.equal(zeros, 1), x), zero)))
    return [ops.multiply(_broadcast_to(g, x, axis, keep), others)]


# -- shape ops -------------------------------------------------------------------------
@register_gradient("Reshape")
def _reshape_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    dims = x.shape.as_list()
    if dims is not None and sum(d is None for d in dims) <= 1:
        back = ops.reshape(g, [-1 if d is None else d for d in dims])
    else:
        back = ops.reshape(g, ops.shape(x))  # several unknown dims: the shape at run time
    return [back] + [None] * (len(op.inputs) - 1)


@register_gradient("Transpose")
def _transpose_grad(op: Operation, g: Tensor) -> list:
    perm = op.get_attr("perm")
    inverse = None if perm is None else [int(i) for i in np.argsort(perm)]
    return [ops.transpose(g, inverse)]


# -- gradients of gradient ops (second order: Hessian terms, gradient penalties) --------
@register_gradient("SumToShapeOf")
def _sum_to_shape_of_grad(op: Operation, g: Tensor) -> list:
    # the reference is read only for its shape
    return [_spread_to(g, op.inputs[0]), None]


@register_gradient("BroadcastToShapeOf")
def _broadcast_to_shape_of_grad(op: Operation, g: Tensor) -> list:
    axis, keep = op.get_attr("axis"), bool(op.get_attr("keepdims"))
    # (graphs from before the attr have no "mean": theirs are sums)
    reduce = ops.reduce_mean if op.attrs.get("mean") else ops.reduce_sum
    return [_sum_to(reduce(g, axis=axis, keepdims=keep), op.inputs[0]), None]


@register_gradient("Sign")
def _sign_grad(op: Operation, g: Tensor) -> list:
    # flat almost everywhere: zeros, as TensorFlow gives (None stopped the
    # gradient: x reached only through a Sign got no gradient at all)
    return [ops.zeros_like(op.inputs[0])]


@register_gradient("ReluGrad")
def _relu_grad_grad(op: Operation, g: Tensor) -> list:
    # dy * (y > 0): linear in dy, piecewise constant in y
    return [ops.op_output("ReluGrad", [g, op.inputs[1]], None, "ReluGrad"), None]


@register_gradient("SigmoidGrad")
def _sigmoid_grad_grad(op: Operation, g: Tensor) -> list:
    # dy * y * (1 - y)
    y, dy = op.inputs
    g_dy = ops.multiply(g, dy)
    return [ops.subtract(g_dy, ops.multiply(ops.multiply(g_dy, y), 2.0)),
            ops.op_output("SigmoidGrad", [y, g], None, "SigmoidGrad")]


@register_gradient("TanhGrad")
def _tanh_grad_grad(op: Operation, g: Tensor) -> list:
    # dy * (1 - y^2)
    y, dy = op.inputs
    return [ops.multiply(ops.multiply(g, dy), ops.multiply(y, -2.0)),
            ops.op_output("TanhGrad", [y, g], None, "TanhGrad")]


@register_gradient("BiasAddGrad")
def _bias_add_grad_grad(op: Operation, g: Tensor) -> list:
    # the sum over every axis but the last, spread back over them
    return [_spread_to(g, op.inputs[0])]


for _op_type in ("Equal", "NotEqual", "Less", "Greater", "LogicalAnd", "LogicalNot", "ArgMax",
                 "Shape", "ZerosLike", "OnesLike", "Const", "Placeholder", "Zeros",
                 "Ones", "RandomStandardNormal", "RandomUniform", "NoOp", "VariableV2",
                 "IsVariableInitialized", "Assign", "AssignAdd", "AssignSub", "StopGradient"):
    no_gradient(_op_type)
