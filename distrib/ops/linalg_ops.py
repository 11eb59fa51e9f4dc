"""TF's linear algebra names real programs call: ``dt.einsum``,
``dt.tensordot``, ``dt.norm``, ``dt.linalg.inv``/``det`` (also
``dt.matrix_inverse``/``matrix_determinant``) and ``dt.linalg.matmul``.

``Einsum``, ``MatrixInverse`` and ``MatrixDeterminant`` are TF's ops
(kernels in kernels/cpu/linalg.py) with TF's gradients: an einsum operand's
gradient is the einsum of the output gradient with the other operands
(special_math_ops' rule; its subscripts summed only in that operand are
broadcast back, its broadcast ``...`` dimensions summed), the inverse's
``-A^-T g A^-T``, the determinant's ``g det(A) A^-T``. ``tensordot`` is an
einsum of the two operands (TF's is transposes, reshapes and a matmul: the
same numbers), ``norm`` TF's composite of reductions, ``linalg.matmul`` a
``MatMul`` on matrices and an einsum on batches.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError, UnimplementedError
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.array_extra_ops import squeeze
from distrib.ops.array_ops import expand_dims
from distrib.ops.broadcast_ops import broadcast_to

__all__ = ["einsum", "tensordot", "norm", "inv", "det", "matrix_inverse",
           "matrix_determinant", "matmul", "GRADIENTS", "NOT_DIFFERENTIABLE"]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def einsum(equation: str, *inputs: Any, **kwargs: Any) -> Tensor:
    """TF's ``tf.einsum``: the sum of products ``equation`` names (``"ij,jk->ik"``;
    ``...`` broadcasts; without ``->`` the output is the letters seen once, sorted)."""
    name = kwargs.pop("name", None)
    kwargs.pop("optimize", None)
    if kwargs:
        raise TypeError(f"dt.einsum: unexpected arguments {sorted(kwargs)}")
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    with name_scope(name, "einsum", list(inputs)) as scope:
        tensors = [ops.convert_operand(inputs[0])] if inputs else []
        tensors += [ops.convert_to_tensor(x, dtype=tensors[0].dtype) if not ops.is_tensor(x)
                    else x for x in inputs[1:]]
        return ops.op_output("Einsum", tensors, {"equation": equation.replace(" ", "")},
                             scope)


def _axes(axes: Any, ra: int, rb: int) -> tuple[list[int], list[int]]:
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if not 0 <= n <= min(ra, rb):
            raise InvalidArgumentError(f"'axes' must be at most the rank of a and b ({ra}, "
                                       f"{rb}), got {n}")
        return list(range(ra - n, ra)), list(range(n))
    pair = list(axes)
    if len(pair) != 2:
        raise InvalidArgumentError(f"'axes' must be an int or a pair of axis lists, got {axes}")
    a_ax = [int(v) % ra for v in np.atleast_1d(pair[0])]
    b_ax = [int(v) % rb for v in np.atleast_1d(pair[1])]
    if len(a_ax) != len(b_ax):
        raise InvalidArgumentError(f"'axes' lists must have one length, got {a_ax} and {b_ax}")
    return a_ax, b_ax


def tensordot(a: Any, b: Any, axes: Any, name: str | None = None) -> Tensor:
    """The sum over ``axes`` of ``a``'s and ``b``'s products (TF's ``tf.tensordot``:
    ``axes`` an int N, the last N of a with the first N of b, or two lists)."""
    with name_scope(name, "Tensordot", [a, b]) as scope:
        x, y = ops.convert_pair(a, b)
        ra, rb = x.shape.rank, y.shape.rank
        if ra is None or rb is None:
            raise InvalidArgumentError("dt.tensordot needs the ranks of a and b known")
        a_ax, b_ax = _axes(axes, ra, rb)
        if ra + rb > len(_LETTERS):
            raise InvalidArgumentError("dt.tensordot: too many dimensions")
        sa = list(_LETTERS[:ra])
        sb = list(_LETTERS[ra:ra + rb])
        for i, j in zip(a_ax, b_ax):
            sb[j] = sa[i]
        out = [c for k, c in enumerate(sa) if k not in a_ax] + \
            [c for k, c in enumerate(sb) if k not in b_ax]
        eq = f"{''.join(sa)},{''.join(sb)}->{''.join(out)}"
        return ops.op_output("Einsum", [x, y], {"equation": eq}, scope)


def norm(tensor: Any, ord: Any = "euclidean", axis: Any = None,  # noqa: A002 - TF's name
         keepdims: Any = None, name: str | None = None, keep_dims: Any = None) -> Tensor:
    """TF's ``tf.norm``: a vector norm (``'euclidean'``/2, 1, ``np.inf``) over ``axis``
    (an int, or None: all elements), or a matrix norm (``'fro'``/``'euclidean'``,
    1, ``np.inf``) over a pair of axes."""
    keep = bool(keep_dims if keepdims is None else keepdims)
    with name_scope(name, "norm", [tensor]) as scope:
        x = ops.convert_operand(tensor)
        axes = None if axis is None else [int(v) for v in np.atleast_1d(axis)]
        if axes is not None and len(axes) == 2:
            return _matrix_norm(x, ord, axes, keep, scope)
        if axes is not None and len(axes) != 1:
            raise InvalidArgumentError(f"'axis' must be None, an int or a pair, got {axis}")
        if ord in ("euclidean", "fro", 2, 2.0):
            if ord == "fro" and axes is not None:
                raise InvalidArgumentError("'fro' is a matrix norm: give a pair of axes")
            return ops.sqrt(ops.reduce_sum(ops.square(x), axes, keepdims=keep), name=scope)
        if ord in (1, 1.0):
            return ops.reduce_sum(ops.abs(x), axes, keepdims=keep, name=scope)
        if ord == np.inf:
            return ops.reduce_max(ops.abs(x), axes, keepdims=keep, name=scope)
        if isinstance(ord, (int, float)) and ord > 0:
            p = ops.convert_to_tensor(float(ord), dtype=x.dtype)
            total = ops.reduce_sum(ops.pow(ops.abs(x), p), axes, keepdims=keep)
            return ops.pow(total, ops.divide(ops.ones_like(p), p), name=scope)
        raise InvalidArgumentError(f"'ord' must be a supported vector norm ('euclidean', 1, 2, "
                                   f"np.inf or a positive number), got {ord!r}")


def _matrix_norm(x: Tensor, ord: Any, axes: list[int], keep: bool, scope: str) -> Tensor:  # noqa: A002
    rank = x.shape.rank
    if rank is None:
        raise InvalidArgumentError("a matrix norm needs the rank of the tensor known")
    r0, r1 = axes[0] % rank, axes[1] % rank
    if r0 == r1:
        raise InvalidArgumentError(f"'axis' must name two different dimensions, got {axes}")
    if ord in ("fro", "euclidean"):
        return ops.sqrt(ops.reduce_sum(ops.square(x), [r0, r1], keepdims=keep), name=scope)
    if ord in (1, 1.0, np.inf):
        sum_axis, max_axis = (r0, r1) if ord != np.inf else (r1, r0)
        sums = ops.reduce_sum(ops.abs(x), sum_axis, keepdims=True)
        out = ops.reduce_max(sums, max_axis, keepdims=True)
        return out if keep else squeeze(out, sorted((r0, r1)), name=scope)
    raise UnimplementedError(f"the matrix norm ord={ord!r} is not implemented here: use 'fro', "
                             "1 or np.inf")


def inv(input: Any, adjoint: bool = False, name: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of each square matrix of ``input`` [..., M, M] (of its adjoint
    if ``adjoint``); a singular one is TF's error "Input is not invertible."."""
    return ops.op_output("MatrixInverse", [ops.convert_operand(input)],
                         {"adjoint": bool(adjoint)}, name or "MatrixInverse")


def det(input: Any, name: str | None = None) -> Tensor:  # noqa: A002 - TF's name
    """The determinant of each square matrix of ``input`` [..., M, M]."""
    return ops.op_output("MatrixDeterminant", [ops.convert_operand(input)], None,
                         name or "MatrixDeterminant")


matrix_inverse = inv
matrix_determinant = det


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
           adjoint_a: bool = False, adjoint_b: bool = False, name: str | None = None,
           **kwargs: Any) -> Tensor:
    """TF's ``tf.linalg.matmul``: ``MatMul`` on matrices, an einsum over the
    leading dimensions of batches (real dtypes: adjoint is transpose)."""
    ta, tb = bool(transpose_a or adjoint_a), bool(transpose_b or adjoint_b)
    x, y = ops.convert_pair(a, b)
    if x.shape.rank == 2 and y.shape.rank == 2:
        return ops.matmul(x, y, transpose_a=ta, transpose_b=tb, name=name)
    if x.shape.rank is None or y.shape.rank is None:
        raise InvalidArgumentError("dt.linalg.matmul of batches needs the ranks known")
    eq = f"...{'ji' if ta else 'ij'},...{'kj' if tb else 'jk'}->...ik"
    return ops.op_output("Einsum", [x, y], {"equation": eq}, name or "MatMul")


# -- gradients (TF's special_math_ops and linalg_grad) ----------------------------------------
def _split_equation(op: Operation) -> tuple[list[str], str]:
    eq = op.get_attr("equation")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:
        letters = "".join(t.replace("...", "") for t in terms)
        out = ("..." if any("..." in t for t in terms) else "") + \
            "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, out


def _einsum_grad(op: Operation, grad: Tensor) -> list:
    terms, out = _split_equation(op)
    grads = []
    for i, (term, x) in enumerate(zip(terms, op.inputs)):
        letters = term.replace("...", "")
        if len(set(letters)) != len(letters):
            raise UnimplementedError(f"the gradient of einsum {op.get_attr('equation')!r} "
                                     "(a subscript repeated in one operand) is not "
                                     "implemented here")
        others = [t for k, t in enumerate(terms) if k != i]
        elsewhere = set(out.replace("...", "") + "".join(others).replace("...", ""))
        missing = [c for c in letters if c not in elsewhere]
        kept = "".join(c for c in term if c == "." or c not in missing)
        broadcast = "..." in term or any("..." in t for t in [out] + others)
        if broadcast and "..." not in kept:   # summed over the others' '...' below
            kept = "..." + kept
        eq = ",".join([out] + others) + "->" + kept
        inputs = [grad] + [t for k, t in enumerate(op.inputs) if k != i]
        g = ops.op_output("Einsum", inputs, {"equation": eq}, "Einsum")
        if missing:
            if broadcast:
                raise UnimplementedError(f"the gradient of einsum {op.get_attr('equation')!r} "
                                         "(a subscript summed in one operand beside '...') is "
                                         "not implemented here")
            for pos, c in enumerate(term):   # a 1 where each summed-away subscript sat
                if c in missing:
                    g = expand_dims(g, pos)
            g = broadcast_to(g, ops.shape(x))
        elif broadcast:
            g = ops.op_output("SumToShapeOf", [g, x], None, "SumToShapeOf")
        grads.append(g)
    return grads


def _inverse_grad(op: Operation, grad: Tensor) -> list:
    out = op.outputs[0]
    eq = "...ji,...jk,...lk->...li" if op.get_attr("adjoint") else "...ji,...jk,...lk->...il"
    return [ops.negative(ops.op_output("Einsum", [out, grad, out], {"equation": eq}, "Einsum"))]


def _determinant_grad(op: Operation, grad: Tensor) -> list:
    a, d = op.inputs[0], op.outputs[0]
    scale = expand_dims(expand_dims(ops.multiply(grad, d), -1), -1)
    return [ops.multiply(scale, inv(a, adjoint=True))]


GRADIENTS: dict[str, Any] = {"Einsum": _einsum_grad, "MatrixInverse": _inverse_grad,
                             "MatrixDeterminant": _determinant_grad}
NOT_DIFFERENTIABLE: tuple[str, ...] = ()

