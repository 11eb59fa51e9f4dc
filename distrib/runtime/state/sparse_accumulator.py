"""TF1's ``SparseConditionalAccumulator``: the sync-replicas aggregation of
sparse gradients (an embedding's ``IndexedSlices``), kept as rows.

Each replica's gradient arrives as ``(indices, values)``: only its rows cross
the wire and only they are kept (one row per index and gradient); a take sums
the rows of each index and divides each by the number of gradients that had
that index (TF's element-wise average, ``DivideAccumGradByCounter``: a row one
replica of two touched is that replica's row, not half of it), and returns
``(indices, values, shape)`` with the indices sorted. Staleness, replicas and the waiting take follow the dense
accumulator's rules (:class:`distrib.runtime.state.resources.ConditionalAccumulator`):
a gradient older than the accumulator's step is dropped, a take waits for
``num_required`` gradients and advances the step.

Ops (``is_resource`` in the op catalogue; attrs ``acc``, ``dtype``, ``shape``):
``SparseAccumulatorApplyGradient`` (local_step, indices, values) and
``SparseAccumulatorTakeGradient`` (num_required) -> (indices, values, shape).
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.runtime.state.accumulator import ConditionalAccumulator

__all__ = ["SparseConditionalAccumulator", "SPARSE_ACCUMULATOR_OPS",
           "run_sparse_accumulator_op"]

SPARSE_ACCUMULATOR_OPS = frozenset({"SparseAccumulatorApplyGradient",
                                    "SparseAccumulatorTakeGradient"})

Wait = Callable[[asyncio.Future, str, Callable[[], str]], Awaitable[list]]


class SparseConditionalAccumulator(ConditionalAccumulator):
    """Rows by index, the gradients that had each index, and the dense
    accumulator's count, step and replica bookkeeping (which a stalled take
    and the token queue's stall warning read)."""

    def __init__(self, name: str, dtype: str, shape: list | None) -> None:
        super().__init__(name, dtype, shape)
        self._indices: list[np.ndarray] = []
        self._values: list[np.ndarray] = []

    def apply_grad(self, local_step: int, grad: Any, replica: str = "") -> bool:
        """Add ``grad``, a pair ``(indices, values)``; False when it is stale."""
        return super().apply_grad(local_step, grad, replica)

    def _checked(self, grad: Any) -> tuple[np.ndarray, np.ndarray]:
        indices, values = grad
        idx = np.asarray(indices).astype(np.int64, copy=False).reshape(-1)
        vals = np.asarray(values, dtype=self.dtype)
        if vals.shape[:1] != idx.shape or (self.shape is not None and (
                len(self.shape) != vals.ndim or any(
                    d is not None and d != v for d, v in zip(self.shape[1:], vals.shape[1:])))):
            raise InvalidArgumentError(
                f"accumulator {self.name} holds rows of a variable of shape {self.shape}; got "
                f"{list(vals.shape)} values for {idx.size} indices")
        if idx.size and self.shape and self.shape[0] is not None and (
                idx.min() < 0 or idx.max() >= self.shape[0]):
            raise InvalidArgumentError(f"accumulator {self.name}: an index is outside "
                                       f"[0, {self.shape[0]})")
        return idx, vals

    def _add(self, grad: tuple[np.ndarray, np.ndarray]) -> None:
        idx, vals = grad
        uniq, inverse = np.unique(idx, return_inverse=True)   # one row per index
        if len(uniq) < len(idx):
            summed = np.zeros((len(uniq),) + vals.shape[1:], self.dtype)
            np.add.at(summed, inverse.reshape(-1), vals)
            idx, vals = uniq, summed
        self._indices.append(idx)
        self._values.append(vals)

    def _take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = np.concatenate(self._indices)
        vals = np.concatenate(self._values)
        uniq, inverse = np.unique(idx, return_inverse=True)
        inverse = inverse.reshape(-1)
        summed = np.zeros((len(uniq),) + vals.shape[1:], self.dtype)
        np.add.at(summed, inverse, vals)
        # TF's element-wise average: each row over the gradients that had its index
        had = np.bincount(inverse, minlength=len(uniq)).astype(self.dtype)
        summed /= had.reshape((-1,) + (1,) * (summed.ndim - 1))
        shape = np.asarray([-1 if d is None else d for d in (self.shape or [])], np.int64)
        self._indices, self._values, self.count = [], [], 0
        self.contributors = {}
        self.global_step += 1
        return uniq, summed, shape


def run_sparse_accumulator_op(node: dict[str, Any], args: list[Any], accumulators: dict,
                              wait: Wait) -> list[Any] | asyncio.Future:
    """Run one sparse accumulator op against the task's ``accumulators`` (by
    shared name); a take returns a future the dataflow loop waits on."""
    op, attrs = node["op"], node["attrs"]
    acc = accumulators.get(attrs["acc"])
    if not isinstance(acc, SparseConditionalAccumulator):
        fresh = SparseConditionalAccumulator(attrs["acc"], attrs["dtype"], attrs.get("shape"))
        if acc is not None:   # made by a set_global_step before any sparse op: its step holds
            fresh.global_step, fresh.num_replicas = acc.global_step, acc.num_replicas
        acc = accumulators[attrs["acc"]] = fresh
    if op == "SparseAccumulatorApplyGradient":
        acc.apply_grad(int(args[0]), (args[1], args[2]), str(attrs.get("replica") or ""))
        return []
    need = int(args[0])
    if attrs.get("num_replicas"):
        acc.num_replicas = int(attrs["num_replicas"])

    async def take() -> list[Any]:
        (out,) = await wait(acc.take_grad(need), f"{need} gradients in accumulator {acc.name}",
                            lambda: acc.describe_wait(need))
        return list(out)
    return asyncio.ensure_future(take())
