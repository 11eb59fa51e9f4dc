"""CPU update kernels that write rows of a variable in place: TF's
``ScatterAdd``/``ScatterSub``/``ScatterUpdate``/``ScatterNdUpdate`` and the
sparse optimizer rules ``SparseApplyMomentum``, ``SparseApplyAdagrad``,
``SparseApplyRMSProp``, ``SparseApplyCenteredRMSProp``, ``SparseApplyFtrl``/
``SparseApplyFtrlV2`` (the dense FTRL rule of :mod:`kernels.cpu.update_extra`
on the rows of the indices).

Called as the dense ``Apply*`` kernels are (:mod:`kernels.cpu.update`): the
variable's storage first, its slots after it, then the op's inputs; they
update those arrays in place and return ``[var]``. A step that touches k rows
reads and writes k rows of the variable and its slots, never the table.

Duplicate indices: the scatter adds sum them (``np.add.at``), as TF's do;
the ``SparseApply*`` rules first sum the rows of a repeated index and apply
each index once, which is what TF's optimizers do before calling their
sparse kernels (``_deduplicate_indexed_slices``), so the op and the
optimizer agree (TF's kernel alone would apply a repeated index twice).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.cpu import update_extra
from kernels.cpu.gather import check_indices
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["deduplicate"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def _state(op: str, name: str, x: Any, like: np.ndarray | None = None) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelError(f"{op}: {name} must be the variable store's ndarray, got "
                          f"{type(x).__name__}")
    if not x.flags.writeable:
        raise KernelError(f"{op}: {name} is read-only; the variable store must own a "
                          "writable copy of the value (copy it on Assign)")
    if like is not None and x.shape != like.shape:
        raise KernelError(f"{op}: {name} has shape {list(x.shape)} but the variable has "
                          f"{list(like.shape)}")
    return x


def _scalar(op: str, name: str, x: Any, dtype: np.dtype) -> np.generic:
    a = np.asarray(x)
    if a.size != 1:
        raise KernelError(f"{op}: {name} must be a scalar, got shape {list(a.shape)}")
    return dtype.type(a.reshape(()).item())


def _rows(op: str, var: np.ndarray, indices: Any, updates: Any) -> tuple[np.ndarray, np.ndarray]:
    """Indices checked against the variable's rows; updates of their shape (a scalar broadcast)."""
    idx = np.asarray(indices)
    check_indices(op, idx, var.shape[0] if var.ndim else 0)
    upd = np.asarray(updates)
    want = idx.shape + var.shape[1:]
    if upd.shape != want:
        if upd.ndim != 0:
            raise KernelError(f"{op}: updates of shape {list(upd.shape)} do not fit indices of "
                              f"shape {list(idx.shape)} into a variable of shape "
                              f"{list(var.shape)} (want {list(want)})")
        upd = np.broadcast_to(upd, want)
    return idx, upd.astype(var.dtype, copy=False)


@KERNELS("ScatterAdd", CPU)
def scatter_add(inputs: list, attrs: dict) -> list:
    var = _state("ScatterAdd", "ref", inputs[0])
    idx, upd = _rows("ScatterAdd", var, inputs[1], inputs[2])
    np.add.at(var, idx, upd)
    return [var]


@KERNELS("ScatterSub", CPU)
def scatter_sub(inputs: list, attrs: dict) -> list:
    var = _state("ScatterSub", "ref", inputs[0])
    idx, upd = _rows("ScatterSub", var, inputs[1], inputs[2])
    np.subtract.at(var, idx, upd)
    return [var]


@KERNELS("ScatterUpdate", CPU)
def scatter_update(inputs: list, attrs: dict) -> list:
    var = _state("ScatterUpdate", "ref", inputs[0])
    idx, upd = _rows("ScatterUpdate", var, inputs[1], inputs[2])
    var[idx] = upd   # a repeated index: the last update wins
    return [var]


@KERNELS("ScatterNdUpdate", CPU)
def scatter_nd_update(inputs: list, attrs: dict) -> list:
    op = "ScatterNdUpdate"
    var = _state(op, "ref", inputs[0])
    idx = np.asarray(inputs[1])
    if idx.ndim < 1 or idx.shape[-1] > var.ndim:
        raise KernelError(f"{op}: indices of shape {list(idx.shape)} must end in at most "
                          f"rank(ref) = {var.ndim} coordinates")
    k = idx.shape[-1]
    coords = idx.reshape(-1, k)
    for d in range(k):
        check_indices(op, coords[:, d], var.shape[d], f"indices[..., {d}]")
    upd = np.asarray(inputs[2])
    want = idx.shape[:-1] + var.shape[k:]
    if upd.shape != want:
        if upd.ndim:
            raise KernelError(f"{op}: updates of shape {list(upd.shape)}; want {list(want)}")
        upd = np.broadcast_to(upd, want)
    var[tuple(coords.T)] = upd.reshape((coords.shape[0],) + var.shape[k:]).astype(var.dtype)
    return [var]


def deduplicate(grad: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows summed per index, unique indices)``; as given when none repeats."""
    uniq, inverse = np.unique(idx, return_inverse=True)
    if len(uniq) == len(idx):
        return grad, idx
    summed = np.zeros((len(uniq),) + grad.shape[1:], grad.dtype)
    np.add.at(summed, inverse.reshape(-1), grad)
    return summed, uniq


def _sparse_grad(op: str, var: np.ndarray, grad: Any, indices: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
    idx = np.asarray(indices)
    if idx.ndim != 1:
        raise KernelError(f"{op}: indices must be a vector, got shape {list(idx.shape)}")
    g = np.asarray(grad)
    if g.shape != (len(idx),) + var.shape[1:]:
        raise KernelError(f"{op}: grad of shape {list(g.shape)} needs one row of "
                          f"{list(var.shape[1:])} per index ({len(idx)})")
    check_indices(op, idx, var.shape[0])
    return deduplicate(g.astype(var.dtype, copy=False), idx)


@KERNELS("SparseApplyMomentum", CPU)
def sparse_apply_momentum(inputs: list, attrs: dict) -> list:
    op = "SparseApplyMomentum"
    var = _state(op, "var", inputs[0])
    accum = _state(op, "accum", inputs[1], var)
    lr = _scalar(op, "lr", inputs[2], var.dtype)
    g, idx = _sparse_grad(op, var, inputs[3], inputs[4])
    momentum = _scalar(op, "momentum", inputs[5], var.dtype)
    a = accum[idx] * momentum + g
    accum[idx] = a
    if attrs.get("use_nesterov"):
        var[idx] -= lr * g + lr * momentum * a
    else:
        var[idx] -= lr * a
    return [var]


@KERNELS("SparseApplyAdagrad", CPU)
def sparse_apply_adagrad(inputs: list, attrs: dict) -> list:
    op = "SparseApplyAdagrad"
    var = _state(op, "var", inputs[0])
    accum = _state(op, "accum", inputs[1], var)
    lr = _scalar(op, "lr", inputs[2], var.dtype)
    g, idx = _sparse_grad(op, var, inputs[3], inputs[4])
    a = accum[idx] + g * g
    accum[idx] = a
    var[idx] -= lr * g / np.sqrt(a)
    return [var]


def _rms(op: str, inputs: list, centered: bool) -> list:
    n = 3 if centered else 2
    var = _state(op, "var", inputs[0])
    names = ("mg", "ms", "mom") if centered else ("ms", "mom")
    slots = [_state(op, s, x, var) for s, x in zip(names, inputs[1:1 + n])]
    lr, rho, momentum, eps = (_scalar(op, k, inputs[1 + n + i], var.dtype)
                              for i, k in enumerate(("lr", "rho", "momentum", "epsilon")))
    g, idx = _sparse_grad(op, var, inputs[5 + n], inputs[6 + n])
    ms, mom = slots[-2], slots[-1]
    ms_rows = ms[idx] + (g * g - ms[idx]) * (1 - rho)
    ms[idx] = ms_rows
    denom = ms_rows + eps
    if centered:
        mg = slots[0]
        mg_rows = mg[idx] + (g - mg[idx]) * (1 - rho)
        mg[idx] = mg_rows
        denom = denom - mg_rows * mg_rows
    mom_rows = mom[idx] * momentum + lr * g / np.sqrt(denom)
    mom[idx] = mom_rows
    var[idx] -= mom_rows
    return [var]


@KERNELS("SparseApplyRMSProp", CPU)
def sparse_apply_rms_prop(inputs: list, attrs: dict) -> list:
    return _rms("SparseApplyRMSProp", inputs, centered=False)


@KERNELS("SparseApplyCenteredRMSProp", CPU)
def sparse_apply_centered_rms_prop(inputs: list, attrs: dict) -> list:
    return _rms("SparseApplyCenteredRMSProp", inputs, centered=True)


def _ftrl(op: str, inputs: list, attrs: dict, dense: Any) -> list:
    """The rows of ``indices`` (summed per index) taken out of the variable and its
    ``accum`` and ``linear`` slots, updated by the dense rule, written back."""
    var = _state(op, "var", inputs[0])
    accum, linear = _state(op, "accum", inputs[1], var), _state(op, "linear", inputs[2], var)
    g, idx = _sparse_grad(op, var, inputs[3], inputs[4])
    rows = [var[idx], accum[idx], linear[idx]]   # fancy indexing: writable copies
    dense([*rows, g, *inputs[5:]], attrs)
    var[idx], accum[idx], linear[idx] = rows
    return [var]


@KERNELS("SparseApplyFtrl", CPU)
def sparse_apply_ftrl(inputs: list, attrs: dict) -> list:
    """inputs: var, accum, linear, grad, indices, lr, l1, l2, lr_power."""
    return _ftrl("SparseApplyFtrl", inputs, attrs, update_extra.apply_ftrl)


@KERNELS("SparseApplyFtrlV2", CPU)
def sparse_apply_ftrl_v2(inputs: list, attrs: dict) -> list:
    """inputs: var, accum, linear, grad, indices, lr, l1, l2, l2_shrinkage, lr_power."""
    return _ftrl("SparseApplyFtrlV2", inputs, attrs, update_extra.apply_ftrl_v2)
