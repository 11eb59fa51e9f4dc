"""GPU kernels for reductions, softmax and losses, MatMul and the update rules.

Registered beside :mod:`kernels.cuda.elementwise` (kernels.cuda.loader imports both); same
conventions: device arrays in and out, host arrays copied in, uncovered cases
run on a host copy through the CPU kernel.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from kernels.cuda import math as cm
from kernels.cuda.devices import is_device_array, to_host
from kernels.cuda.launch import (
    SIM,
    as_device,
    device_empty,
    flat,
    gpu_kernel,
    host_fallback,
    launch,
    launch_1d,
    repeat_plan,
    run_1d,
    scalar_operand,
)
from kernels.cuda.matmul import matmul_device
from kernels.cuda.memory import device_scalar
from kernels.dtypes import reduction_axes
from kernels.registry import KernelError

__all__: list[str] = []

_reduce_all_kernels: dict[type, Any] = {}


# --- reductions --------------------------------------------------------------------

def _acc(dtype: Any) -> tuple[Any, Any]:
    """(zero, one) scalars of the accumulator type for ``dtype``."""
    acc = cm.accumulator_dtype(dtype)
    return acc(0), acc(1)


def _sum_all(x: Any, mean: bool) -> Any:
    """Sum (or mean) of every element of device array ``x`` into a (1,) array."""
    acc = cm.accumulator_dtype(x.dtype)
    kern = _reduce_all_kernels.get(acc)
    if kern is None:
        kern = _reduce_all_kernels[acc] = cm.reduce_all(acc)
    zero, one = _acc(x.dtype)
    n = x.size
    blocks = max(1, min(math.ceil(n / cm.REDUCE_THREADS), 2 if SIM else 512))
    partial = device_empty((blocks,), acc)
    launch(kern, blocks, cm.REDUCE_THREADS, flat(x), partial, zero, one)
    out = device_empty((1,), x.dtype)
    scale = np.float64(1.0 / n) if mean else one
    launch(kern, 1, cm.REDUCE_THREADS, partial, out, zero, scale)
    return out


def _sum_axis(x: Any, axis: int, mean: bool) -> Any:
    """Sum (or mean) over one axis: x viewed as (outer, n, inner)."""
    n = tuple(x.shape)[axis]
    inner = math.prod(tuple(x.shape)[axis + 1:])
    out = device_empty(tuple(x.shape)[:axis] + tuple(x.shape)[axis + 1:], x.dtype)
    zero, one = _acc(x.dtype)
    scale = np.float64(1.0 / n) if mean else one
    if out.size:
        blocks, threads = launch_1d(out.size)
        launch(cm.reduce_axis, blocks, threads, flat(x), flat(out), n, inner, zero, scale)
    return out


def _reduction(op: str, mean: bool) -> None:
    @gpu_kernel(op)
    def kernel(inputs: list, attrs: dict) -> list:
        x = as_device(inputs[0])
        axes = reduction_axes(attrs.get("axis"), x.ndim, op)
        all_axes = axes is None or len(axes) == x.ndim
        covered = (x.size > 0 and (not mean or np.dtype(x.dtype).kind == "f")
                   and (all_axes or len(axes) == 1))
        if not covered or x.ndim == 0:
            return host_fallback(op, inputs, attrs)
        keep = bool(attrs.get("keepdims", False))
        if all_axes:
            out = _sum_all(x, mean)
            return [out.reshape((1,) * x.ndim if keep else ())]
        out = _sum_axis(x, axes[0], mean)
        if keep:
            out = out.reshape(tuple(x.shape)[:axes[0]] + (1,) + tuple(x.shape)[axes[0] + 1:])
        return [out]


_reduction("Sum", mean=False)
_reduction("Mean", mean=True)


@gpu_kernel("BiasAddGrad")
def bias_add_grad(inputs: list, attrs: dict) -> list:
    dy = as_device(inputs[0])
    if dy.ndim < 1:
        raise KernelError("BiasAddGrad needs a gradient of rank >= 1")
    return [_sum_axis(dy.reshape((dy.size // max(tuple(dy.shape)[-1], 1), tuple(dy.shape)[-1])), 0, False)]


@gpu_kernel("SumToShapeOf")
def sum_to_shape_of(inputs: list, attrs: dict) -> list:
    grad = as_device(inputs[0])
    ref = tuple(inputs[1].shape)
    stripped = ref
    while stripped and stripped[0] == 1:
        stripped = stripped[1:]
    if grad.shape == ref:
        return [grad]
    if grad.size and math.prod(ref) == 1:
        return [_sum_all(grad, False).reshape(ref)]
    if grad.size and len(stripped) == 1 and grad.ndim >= 1 and tuple(grad.shape)[-1] == stripped[0]:
        rows = grad.size // stripped[0]  # the row-vector case: gradient of x + bias
        return [_sum_axis(grad.reshape((rows, stripped[0])), 0, False).reshape(ref)]
    return host_fallback("SumToShapeOf", inputs, attrs)


@cuda.jit(device=True)
def _scaled(x, scale):
    return x * scale


_BROADCAST_SCALED = cm.binary_rep(_scaled)


@gpu_kernel("BroadcastToShapeOf")
def broadcast_to_shape_of(inputs: list, attrs: dict) -> list:
    """A reduction's gradient spread back over the reduced axes (divided by
    their size for a mean): one launch, the gradient read in place."""
    op = "BroadcastToShapeOf"
    grad, ref = as_device(inputs[0]), tuple(inputs[1].shape)
    axes = reduction_axes(attrs.get("axis"), len(ref), op)
    axes = tuple(range(len(ref))) if axes is None else tuple(a % max(len(ref), 1) for a in axes)
    kept = tuple(1 if i in axes else d for i, d in enumerate(ref))
    src = tuple(grad.shape) if attrs.get("keepdims", False) else kept
    mean = bool(attrs.get("mean"))
    if grad.size != math.prod(src) or (mean and np.dtype(grad.dtype).kind != "f"):
        return host_fallback(op, inputs, attrs)   # the CPU kernel says what is wrong
    try:
        fits = tuple(np.broadcast_shapes(src, ref)) == ref
    except ValueError:
        fits = False
    plan = repeat_plan(src, ref) if fits else None
    if plan is None:
        return host_fallback(op, inputs, attrs)
    count = math.prod(ref[a] for a in axes) if mean else 1
    out = device_empty(ref, grad.dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        scale = device_scalar(1.0 / count if mean else 1, grad.dtype)
        launch(_BROADCAST_SCALED, blocks, threads, flat(grad), plan[0], scale, 1, flat(out))
    return [out]


@cuda.jit(cache=True)
def _repeat(a, div, out):  # noqa: ANN001, ANN202 - a CUDA kernel
    """``out[i] = a[(i // div) % a.size]``: ``a`` a block of ``out``'s axes, repeated."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = a.size
    while i < out.size:
        out[i] = a[(i // div) % n]
        i += stride


@gpu_kernel("BroadcastTo")
def broadcast_to(inputs: list, attrs: dict) -> list:
    """``tf.broadcast_to``: the input repeated to the shape (a small vector, read on
    the host) in one launch (any dtype: a copy, no arithmetic); a broadcast that is
    not one block of axes goes to the CPU kernel."""
    op = "BroadcastTo"
    x = as_device(inputs[0])
    target = np.asarray(to_host(inputs[1]))
    if target.ndim != 1 or target.dtype.kind not in "iu":
        return host_fallback(op, inputs, attrs)   # the CPU kernel says what is wrong
    shape = tuple(int(d) for d in target)
    try:
        fits = tuple(np.broadcast_shapes(tuple(x.shape), shape)) == shape
    except ValueError:
        fits = False
    plan = repeat_plan(tuple(x.shape), shape) if fits else None
    if plan is None:
        return host_fallback(op, inputs, attrs)
    out = device_empty(shape, x.dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        launch(_repeat, blocks, threads, flat(x), plan[0], flat(out))
    return [out]


@gpu_kernel("ArgMax")
def arg_max(inputs: list, attrs: dict) -> list:
    x = as_device(inputs[0])
    axis = attrs.get("axis")
    axis = 0 if axis is None else int(axis)
    if x.ndim == 0 or x.size == 0 or not -x.ndim <= axis < x.ndim:
        return host_fallback("ArgMax", inputs, attrs)
    axis %= x.ndim
    out = device_empty(tuple(x.shape)[:axis] + tuple(x.shape)[axis + 1:], np.dtype(attrs.get("output_type") or "int64"))
    if out.size:
        blocks, threads = launch_1d(out.size)
        launch(cm.argmax_axis, blocks, threads, flat(x), flat(out), tuple(x.shape)[axis],
                                        math.prod(tuple(x.shape)[axis + 1:]))
    return [out]


# --- softmax and losses ------------------------------------------------------------

def _logits(op: str, x: Any) -> tuple[int, int]:
    if x.ndim < 1 or np.dtype(x.dtype).kind != "f":
        raise KernelError(f"{op} needs float logits of rank >= 1, got {x.dtype} {list(x.shape)}")
    classes = tuple(x.shape)[-1]
    return (x.size // classes if classes else 0), classes


def _softmax(op: str, log: bool) -> None:
    @gpu_kernel(op)
    def kernel(inputs: list, attrs: dict) -> list:
        x = as_device(inputs[0])
        rows, classes = _logits(op, x)
        out = device_empty(x.shape, x.dtype)
        if rows:
            blocks, threads = launch_1d(rows)
            launch(cm.softmax_rows, blocks, threads, flat(x), flat(out), classes, log)
        return [out]


_softmax("Softmax", log=False)
_softmax("LogSoftmax", log=True)


@gpu_kernel("SoftmaxCrossEntropyWithLogits")
def softmax_xent(inputs: list, attrs: dict) -> list:
    op = "SoftmaxCrossEntropyWithLogits"
    x, labels = as_device(inputs[0]), as_device(inputs[1])
    rows, classes = _logits(op, x)
    if labels.shape != x.shape:
        raise KernelError(f"{op}: logits and labels must have the same shape, got "
                          f"{list(x.shape)} and {list(labels.shape)}")
    loss, backprop = device_empty(tuple(x.shape)[:-1], x.dtype), device_empty(x.shape, x.dtype)
    if rows:
        blocks, threads = launch_1d(rows)
        launch(cm.xent_rows, blocks, threads, flat(x), flat(labels), flat(loss), flat(backprop),
               classes)
    return [loss, backprop]


@gpu_kernel("SparseSoftmaxCrossEntropyWithLogits")
def sparse_softmax_xent(inputs: list, attrs: dict) -> list:
    op = "SparseSoftmaxCrossEntropyWithLogits"
    x, labels = as_device(inputs[0]), as_device(inputs[1])
    rows, classes = _logits(op, x)
    if np.dtype(labels.dtype).kind not in "iu" or labels.shape != tuple(x.shape)[:-1]:
        raise KernelError(f"{op}: labels must be integer class ids shaped like logits without "
                          f"its last axis; got logits {list(x.shape)}, labels "
                          f"{labels.dtype} {list(labels.shape)}")
    loss, backprop = device_empty(tuple(x.shape)[:-1], x.dtype), device_empty(x.shape, x.dtype)
    if rows:
        blocks, threads = launch_1d(rows)
        launch(cm.sparse_xent_rows, blocks, threads, flat(x), flat(labels), flat(loss),
                                             flat(backprop), classes)
    return [loss, backprop]


# --- matmul ------------------------------------------------------------------------

# the kernels, cuBLAS and the choice between them: kernels.cuda.matmul

@gpu_kernel("MatMul")
def matmul(inputs: list, attrs: dict) -> list:
    a, b = as_device(inputs[0]), as_device(inputs[1])
    if a.ndim < 2 or b.ndim < 2:
        raise KernelError(f"MatMul needs matrices (rank >= 2), got shapes {list(a.shape)} "
                          f"and {list(b.shape)}")
    if a.dtype != b.dtype:
        raise KernelError(f"MatMul: operands have different dtypes {a.dtype} and {b.dtype}; "
                          "Cast one of them so both match")
    if a.ndim != 2 or b.ndim != 2 or np.dtype(a.dtype) not in (np.float32, np.float64):
        return host_fallback("MatMul", inputs, attrs)  # batched or integer matmul
    return [matmul_device(a, b, bool(attrs.get("transpose_a")), bool(attrs.get("transpose_b")))]


# --- fused updates -----------------------------------------------------------------

def _state(op: str, name: str, x: Any, like: Any = None) -> Any:
    if not is_device_array(x):
        raise KernelError(f"{op}: {name} must be a device array to update it in place on the "
                          f"GPU, got {type(x).__name__}; keep the variable's storage on the device")
    if np.dtype(x.dtype).kind != "f":
        raise KernelError(f"{op}: {name} has dtype {x.dtype}; update rules need float variables")
    if like is not None and x.shape != like.shape:
        raise KernelError(f"{op}: {name} has shape {list(x.shape)} but the variable has "
                          f"{list(like.shape)}")
    return flat(x)


def _grad(op: str, grad: Any, var: Any) -> Any:
    g = as_device(grad)
    if g.shape != var.shape:
        raise KernelError(f"{op}: gradient shape {list(g.shape)} differs from the variable's "
                          f"{list(var.shape)}")
    return flat(g)


def _launch_update(kern: Any, var: Any, *args: Any) -> None:
    if var.size:
        run_1d(kern, var.size, *args)


@gpu_kernel("ApplyGradientDescent")
def apply_gradient_descent(inputs: list, attrs: dict) -> list:
    op, var = "ApplyGradientDescent", inputs[0]
    flat = _state(op, "var", var)
    lr = scalar_operand(op, "lr", inputs[1], var.dtype)
    _launch_update(cm.apply_gd, var, flat, lr, _grad(op, inputs[2], var))
    return [var]


@gpu_kernel("ApplyMomentum")
def apply_momentum(inputs: list, attrs: dict) -> list:
    op, var = "ApplyMomentum", inputs[0]
    flat, accum = _state(op, "var", var), _state(op, "accum", inputs[1], var)
    lr, mom = (scalar_operand(op, n, x, var.dtype) for n, x in (("lr", inputs[2]), ("momentum", inputs[4])))
    _launch_update(cm.apply_momentum, var, flat, accum, lr, _grad(op, inputs[3], var), mom,
                   bool(attrs.get("use_nesterov")))
    return [var]


@gpu_kernel("ApplyAdagrad")
def apply_adagrad(inputs: list, attrs: dict) -> list:
    op, var = "ApplyAdagrad", inputs[0]
    flat, accum = _state(op, "var", var), _state(op, "accum", inputs[1], var)
    lr = scalar_operand(op, "lr", inputs[2], var.dtype)
    _launch_update(cm.apply_adagrad, var, flat, accum, lr, _grad(op, inputs[3], var))
    return [var]


@gpu_kernel("ApplyAdam")
def apply_adam(inputs: list, attrs: dict) -> list:
    op, var = "ApplyAdam", inputs[0]
    flat = _state(op, "var", var)
    m, v = _state(op, "m", inputs[1], var), _state(op, "v", inputs[2], var)
    names = ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon")
    hyper = [scalar_operand(op, n, x, var.dtype) for n, x in zip(names, inputs[3:9])]
    _launch_update(cm.apply_adam, var, flat, m, v, *hyper, _grad(op, inputs[9], var))
    return [var]


@gpu_kernel("ApplyRMSProp")
def apply_rms_prop(inputs: list, attrs: dict) -> list:
    op, var = "ApplyRMSProp", inputs[0]
    flat = _state(op, "var", var)
    ms, mom = _state(op, "ms", inputs[1], var), _state(op, "mom", inputs[2], var)
    names = ("lr", "rho", "momentum", "epsilon")
    hyper = [scalar_operand(op, n, x, var.dtype) for n, x in zip(names, inputs[3:7])]
    _launch_update(cm.apply_rms_prop, var, flat, ms, mom, *hyper, _grad(op, inputs[7], var))
    return [var]


@gpu_kernel("ApplyCenteredRMSProp")
def apply_centered_rms_prop(inputs: list, attrs: dict) -> list:
    op, var = "ApplyCenteredRMSProp", inputs[0]
    flat = _state(op, "var", var)
    mg, ms, mom = (_state(op, n, x, var) for n, x in zip(("mg", "ms", "mom"), inputs[1:4]))
    names = ("lr", "rho", "momentum", "epsilon")
    hyper = [scalar_operand(op, n, x, var.dtype) for n, x in zip(names, inputs[4:8])]
    _launch_update(cm.apply_centered_rms_prop, var, flat, mg, ms, mom, *hyper,
                   _grad(op, inputs[8], var))
    return [var]
