"""The gradients of the math ops: elementwise arithmetic, ``MatMul``, the
reductions, and the ops gradients emit to undo broadcasting (TF's
``math_grad.py``).

Like every gradient family (``nn_grad``, ``array_grad``, ``state_grad``), this
module only defines: ``GRADIENTS`` maps an op type to its gradient function,
``fn(op, *output_grads) -> [input_grad or None, ...]``, built from ordinary
ops; ``NOT_DIFFERENTIABLE`` lists the op types gradients stop at. Nothing is
written anywhere when it is imported: :mod:`distrib.ops.gradients` installs
the families' tables into the op catalogue, in one place.

Broadcasting is undone with ``SumToShapeOf`` and reductions with
``BroadcastToShapeOf`` (docs/ops.md), which read the reference shape at run
time, so unknown batch dimensions need no special care. These ops have
gradients too, as do ``SigmoidGrad`` and ``TanhGrad``, so a gradient can be
differentiated again (Hessian terms, gradient penalties). The helpers that
emit them (:func:`sum_to`, :func:`broadcast_to`, :func:`spread_to`) are
public: the other families use them.
"""
from __future__ import annotations

from typing import Any, Callable

from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE", "sum_to", "broadcast_to", "spread_to"]


# -- helpers for gradient functions -------------------------------------------------
def sum_to(grad: Tensor, ref: Tensor, other: Tensor | None = None) -> Tensor:
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


def broadcast_to(grad: Tensor, ref: Tensor, axis: Any, keepdims: bool,
                 mean: bool = False) -> Tensor:
    """``grad`` of a reduction over ``axis`` spread back to ``ref``'s shape;
    ``mean``: also divided by how many elements each output reduced (one op
    where the count would otherwise take ten when the shape is known only at
    run time)."""
    return ops.op_output("BroadcastToShapeOf", [grad, ref],
                         {"axis": axis, "keepdims": keepdims, "mean": mean},
                         "BroadcastToShapeOf")


def spread_to(grad: Tensor, ref: Tensor) -> Tensor:
    """``grad`` broadcast out to ``ref``'s shape by numpy's rules (the adjoint
    of a sum that broadcasting or a bias gradient made)."""
    return ops.add(ops.zeros_like(ref), grad)


def _float_mask(cond: Tensor, like: Tensor) -> Tensor:
    """``cond`` as 1.0 and 0.0 of ``like``'s dtype."""
    return ops.cast(cond, like.dtype)


# -- elementwise ---------------------------------------------------------------------
def _add_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    return [sum_to(g, x, y), sum_to(g, y, x)]


def _sub_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    return [sum_to(g, x, y), sum_to(ops.negative(g), y, x)]


def _mul_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    return [sum_to(ops.multiply(g, y), x, y), sum_to(ops.multiply(x, g), y, x)]


def _div_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    gy = ops.multiply(ops.negative(g), ops.divide(ops.divide(x, y), y))
    return [sum_to(ops.divide(g, y), x), sum_to(gy, y)]


def _maximum_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    mask = _float_mask(ops.greater_equal(x, y), g)  # ties go to x, as in TF
    return [sum_to(ops.multiply(g, mask), x), sum_to(ops.multiply(g, 1.0 - mask), y)]


def _minimum_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    mask = _float_mask(ops.less_equal(x, y), g)
    return [sum_to(ops.multiply(g, mask), x), sum_to(ops.multiply(g, 1.0 - mask), y)]


def _pow_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    z = op.outputs[0]
    gx = ops.multiply(g, ops.multiply(y, ops.pow(x, ops.subtract(y, 1.0))))
    # d/dy x^y = x^y log x, taken as 0 where x <= 0 (TF's convention), without nan:
    positive = _float_mask(ops.greater(x, 0.0), x)
    safe_log = ops.multiply(ops.log(ops.add(ops.multiply(x, positive), 1.0 - positive)), positive)
    gy = ops.multiply(g, ops.multiply(z, safe_log))
    return [sum_to(gx, x), sum_to(gy, y)]


def _neg_grad(op: Operation, g: Tensor) -> list:
    return [ops.negative(g)]


def _log_grad(op: Operation, g: Tensor) -> list:
    return [ops.divide(g, op.inputs[0])]


def _exp_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, op.outputs[0])]


def _square_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, ops.multiply(op.inputs[0], 2.0))]


def _sqrt_grad(op: Operation, g: Tensor) -> list:
    return [ops.divide(g, ops.multiply(op.outputs[0], 2.0))]


def _abs_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, ops.sign(op.inputs[0]))]


def _sign_grad(op: Operation, g: Tensor) -> list:
    # flat almost everywhere: zeros, as TensorFlow gives (None stopped the
    # gradient: x reached only through a Sign got no gradient at all)
    return [ops.zeros_like(op.inputs[0])]


def _sigmoid_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("SigmoidGrad", [op.outputs[0], g], None, "SigmoidGrad")]


def _tanh_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("TanhGrad", [op.outputs[0], g], None, "TanhGrad")]


def _cast_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    if x.dtype.is_floating and op.outputs[0].dtype.is_floating:
        return [ops.cast(g, x.dtype)]
    return [None]


# -- linear algebra ------------------------------------------------------------------
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


# -- reductions -------------------------------------------------------------------------
def _axis_keep(op: Operation) -> tuple[Any, bool]:
    return op.get_attr("axis"), bool(op.get_attr("keepdims"))


def _sum_grad(op: Operation, g: Tensor) -> list:
    axis, keep = _axis_keep(op)
    return [broadcast_to(g, op.inputs[0], axis, keep)]


def _mean_grad(op: Operation, g: Tensor) -> list:
    axis, keep = _axis_keep(op)
    return [broadcast_to(g, op.inputs[0], axis, keep, mean=True)]


def _min_max_grad(op: Operation, g: Tensor) -> list:
    """The gradient goes to the positions that hold the extreme, split evenly on ties."""
    x, y = op.inputs[0], op.outputs[0]
    axis, keep = _axis_keep(op)
    y_full = broadcast_to(y, x, axis, keep)
    hits = _float_mask(ops.equal(x, y_full), g)
    n_hits = broadcast_to(ops.reduce_sum(hits, axis=axis, keepdims=True), x, axis, True)
    return [ops.divide(ops.multiply(broadcast_to(g, x, axis, keep), hits), n_hits)]


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
    return [ops.multiply(broadcast_to(g, x, axis, keep), others)]


# -- gradients of gradient ops (second order: Hessian terms, gradient penalties) --------
def _sum_to_shape_of_grad(op: Operation, g: Tensor) -> list:
    # the reference is read only for its shape
    return [spread_to(g, op.inputs[0]), None]


def _broadcast_to_shape_of_grad(op: Operation, g: Tensor) -> list:
    axis, keep = op.get_attr("axis"), bool(op.get_attr("keepdims"))
    # (graphs from before the attr have no "mean": theirs are sums)
    reduce = ops.reduce_mean if op.attrs.get("mean") else ops.reduce_sum
    return [sum_to(reduce(g, axis=axis, keepdims=keep), op.inputs[0]), None]


def _sigmoid_grad_grad(op: Operation, g: Tensor) -> list:
    # dy * y * (1 - y)
    y, dy = op.inputs
    g_dy = ops.multiply(g, dy)
    return [ops.subtract(g_dy, ops.multiply(ops.multiply(g_dy, y), 2.0)),
            ops.op_output("SigmoidGrad", [y, g], None, "SigmoidGrad")]


def _tanh_grad_grad(op: Operation, g: Tensor) -> list:
    # dy * (1 - y^2)
    y, dy = op.inputs
    return [ops.multiply(ops.multiply(g, dy), ops.multiply(y, -2.0)),
            ops.op_output("TanhGrad", [y, g], None, "TanhGrad")]


# -- the family's table -----------------------------------------------------------------
GRADIENTS: dict[str, Callable[..., list]] = {
    "Add": _add_grad, "Sub": _sub_grad, "Mul": _mul_grad, "RealDiv": _div_grad,
    "Maximum": _maximum_grad, "Minimum": _minimum_grad, "Pow": _pow_grad,
    "Neg": _neg_grad, "Log": _log_grad, "Exp": _exp_grad, "Square": _square_grad,
    "Sqrt": _sqrt_grad, "Abs": _abs_grad, "Sign": _sign_grad,
    "Sigmoid": _sigmoid_grad, "Tanh": _tanh_grad, "Cast": _cast_grad,
    "MatMul": _matmul_grad,
    "Sum": _sum_grad, "Mean": _mean_grad, "Max": _min_max_grad, "Min": _min_max_grad,
    "Prod": _prod_grad,
    "SumToShapeOf": _sum_to_shape_of_grad, "BroadcastToShapeOf": _broadcast_to_shape_of_grad,
    "SigmoidGrad": _sigmoid_grad_grad, "TanhGrad": _tanh_grad_grad,
}

# comparisons, logic and rounding: flat or boolean, nothing flows back (TF's; Floor
# is the learning-rate decays' staircase)
NOT_DIFFERENTIABLE: tuple[str, ...] = (
    "Equal", "NotEqual", "Less", "Greater", "LogicalAnd", "LogicalNot", "ArgMax", "Floor",
)
