"""CPU kernels for the neural-network ops: MatMul, BiasAdd, softmax and losses.

MatMul goes to BLAS through ``np.matmul``, a matrix product split over the
task's intra-op threads (:func:`kernels.cpu.jit_loader.split_matmul`); a transposed operand is passed as a
transposed *view*, which numpy hands to BLAS as a transpose flag instead of
copying. The softmax family subtracts the row maximum before ``exp`` so large
logits cannot overflow (the loss of a 1000-logit row is finite).
"""
from __future__ import annotations

import numpy as np

from kernels.cpu.jit_loader import split_matmul
from kernels.registry import CPU, KernelError, KernelTable, get_kernel

__all__ = ["softmax", "log_softmax"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def _check_same_dtype(op: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.dtype != b.dtype:
        raise KernelError(f"{op}: operands have different dtypes {a.dtype} and {b.dtype}; "
                          "Cast one of them so both match")


@KERNELS("MatMul", CPU)
def matmul(inputs: list, attrs: dict) -> list:
    a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
    if a.ndim < 2 or b.ndim < 2:
        raise KernelError(f"MatMul needs matrices (rank >= 2), got shapes {list(a.shape)} "
                          f"and {list(b.shape)}")
    _check_same_dtype("MatMul", a, b)
    if attrs.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if attrs.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise KernelError(f"MatMul: inner dimensions differ: {list(a.shape)} @ "
                          f"{list(b.shape)} (after transpose_a={bool(attrs.get('transpose_a'))}, "
                          f"transpose_b={bool(attrs.get('transpose_b'))})")
    if a.ndim == 2 and b.ndim == 2:
        # the executor's allocator (shared memory, for a result that goes to
        # another process on this host); split over the intra-op threads
        alloc = attrs.get("_alloc")
        out = alloc((a.shape[0], b.shape[1]), a.dtype) if alloc is not None else None
        return [split_matmul(a, b, out)]
    return [np.matmul(a, b)]


def _check_bias(op: str, x: np.ndarray, bias: np.ndarray) -> None:
    if bias.ndim != 1 or x.ndim < 1 or bias.shape[0] != x.shape[-1]:
        raise KernelError(f"{op}: bias must be a vector as long as the last dimension of "
                          f"x; got x {list(x.shape)} and bias {list(bias.shape)}")


@KERNELS("BiasAdd", CPU)
def bias_add(inputs: list, attrs: dict) -> list:
    x, bias = np.asarray(inputs[0]), np.asarray(inputs[1])
    _check_bias("BiasAdd", x, bias)
    _check_same_dtype("BiasAdd", x, bias)
    return [x + bias]


@KERNELS("_FusedBiasRelu", CPU)
def fused_bias_relu(inputs: list, attrs: dict) -> list:
    """``Relu(BiasAdd(x, b))`` or ``Relu(Add(x, b))`` (the GPU fusion's op,
    kernels.cuda.fusion; here for a partition whose GPU op fell back to CPU)."""
    add = bias_add if attrs.get("bias_add") else get_kernel("Add", CPU)
    y = add([inputs[0], inputs[1]], {})[0]
    return [np.maximum(y, np.zeros((), y.dtype), out=y) if y.dtype.kind in "fiu" else y]


@KERNELS("BiasAddGrad", CPU)
def bias_add_grad(inputs: list, attrs: dict) -> list:
    dy = np.asarray(inputs[0])
    if dy.ndim < 1:
        raise KernelError("BiasAddGrad needs a gradient of rank >= 1")
    return [np.sum(dy, axis=tuple(range(dy.ndim - 1)), dtype=dy.dtype)]


def _shifted(logits: np.ndarray) -> np.ndarray:
    if logits.ndim < 1:
        raise KernelError("softmax needs logits of rank >= 1 (classes on the last axis)")
    if logits.dtype.kind != "f":
        raise KernelError(f"softmax needs float logits, got {logits.dtype}: Cast them first")
    if logits.shape[-1] == 0:
        return logits.copy()
    # (the ufunc's own reduce: np.max's Python wrapper costs as much as the
    # reduction itself on a small batch of logits)
    return logits - np.maximum.reduce(logits, axis=-1, keepdims=True)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax over the last axis, stable for large logits."""
    e = np.exp(_shifted(logits))
    return e / np.sum(e, axis=-1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row log-softmax over the last axis, stable for large logits."""
    z = _shifted(logits)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


@KERNELS("Softmax", CPU)
def softmax_kernel(inputs: list, attrs: dict) -> list:
    return [softmax(np.asarray(inputs[0]))]


@KERNELS("LogSoftmax", CPU)
def log_softmax_kernel(inputs: list, attrs: dict) -> list:
    return [log_softmax(np.asarray(inputs[0]))]


@KERNELS("SoftmaxCrossEntropyWithLogits", CPU)
def softmax_xent(inputs: list, attrs: dict) -> list:
    logits, labels = np.asarray(inputs[0]), np.asarray(inputs[1])
    if labels.shape != logits.shape:
        raise KernelError("SoftmaxCrossEntropyWithLogits: logits and labels must have the "
                          f"same shape, got {list(logits.shape)} and {list(labels.shape)}")
    labels = labels.astype(logits.dtype, copy=False)
    # TF's kernel: loss = sum(labels * (log(sum(exp(z))) - z)) and backprop =
    # exp(z) / sum(exp(z)) - labels, with z the logits less their row max.
    # One exp serves both, and every temporary is overwritten in place.
    z = _shifted(logits)
    e = np.exp(z)
    total = np.add.reduce(e, axis=-1, keepdims=True)
    np.subtract(np.log(total), z, out=z)                    # -log_softmax
    loss = np.add.reduce(np.multiply(labels, z, out=z), axis=-1)
    np.divide(e, total, out=e)
    return [loss, np.subtract(e, labels, out=e)]


@KERNELS("SparseSoftmaxCrossEntropyWithLogits", CPU)
def sparse_softmax_xent(inputs: list, attrs: dict) -> list:
    logits, labels = np.asarray(inputs[0]), np.asarray(inputs[1])
    if labels.dtype.kind not in "iu":
        raise KernelError(f"SparseSoftmaxCrossEntropyWithLogits: labels must be integer "
                          f"class ids, got {labels.dtype}")
    if logits.ndim < 1 or labels.shape != logits.shape[:-1]:
        raise KernelError("SparseSoftmaxCrossEntropyWithLogits: labels must have the shape "
                          f"of logits without its last axis; got logits {list(logits.shape)}, "
                          f"labels {list(labels.shape)}")
    classes = logits.shape[-1]
    bad = (labels < 0) | (labels >= classes)
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise KernelError(f"SparseSoftmaxCrossEntropyWithLogits: label {int(labels[where])} at "
                          f"index {list(where)} is outside the valid range [0, {classes})")
    logp = log_softmax(logits)
    picked = np.take_along_axis(logp, labels[..., None].astype(np.intp), axis=-1)[..., 0]
    backprop = np.exp(logp)
    np.put_along_axis(backprop, labels[..., None].astype(np.intp),
                      np.take_along_axis(backprop, labels[..., None].astype(np.intp), -1) - 1,
                      axis=-1)
    return [-picked, backprop]
