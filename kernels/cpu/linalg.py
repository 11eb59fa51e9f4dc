"""CPU kernels of TF's linear algebra names real programs call: ``Einsum``
(``tf.einsum``), ``MatrixInverse`` and ``MatrixDeterminant`` (batched over
the leading dimensions), through numpy's LAPACK.

TF's rules: an inverse of a singular matrix is the error "Input is not
invertible." (TF's message); ``adjoint`` inverts the conjugate transpose;
a determinant of a singular matrix is 0, not an error. ``Einsum`` takes
TF's equation (``->`` and ``...`` as numpy), its inputs any number.
"""
from __future__ import annotations

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["KERNELS"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def _square(x: np.ndarray, op: str) -> None:
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise KernelError(f"{op}: Input must be a batch of square matrices ([..., M, M]), got "
                          f"shape {list(x.shape)}")
    if x.dtype.kind not in "fc":
        raise KernelError(f"{op}: needs a float or complex tensor, got {x.dtype}")


@KERNELS("Einsum", CPU)
def einsum(inputs: list, attrs: dict) -> list:
    equation = str(attrs.get("equation", ""))
    try:
        out = np.einsum(equation, *[np.asarray(v) for v in inputs], optimize=len(inputs) > 2)
    except ValueError as e:
        raise KernelError(f"Einsum: equation {equation!r} does not fit the inputs' shapes "
                          f"{[list(np.shape(v)) for v in inputs]}: {e}") from None
    return [np.asarray(out, dtype=np.result_type(*inputs))]


@KERNELS("MatrixInverse", CPU)
def matrix_inverse(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    _square(x, "MatrixInverse")
    if attrs.get("adjoint"):
        x = np.conj(np.swapaxes(x, -1, -2))
    if x.shape[-1] == 0:
        return [x.copy()]
    try:
        out = np.linalg.inv(x)
    except np.linalg.LinAlgError:
        raise KernelError("MatrixInverse: Input is not invertible.") from None
    if not np.all(np.isfinite(out)) and np.all(np.isfinite(x)):
        raise KernelError("MatrixInverse: Input is not invertible.")
    return [out.astype(x.dtype, copy=False)]


@KERNELS("MatrixDeterminant", CPU)
def matrix_determinant(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    _square(x, "MatrixDeterminant")
    return [np.asarray(np.linalg.det(x), dtype=x.dtype)]
