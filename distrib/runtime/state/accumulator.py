"""TF1's ``ConditionalAccumulator`` on the task that owns it (the ps): the
sync replicas' sum of one variable's gradients, a count and a step, with the
bookkeeping a stalled take uses to name the replicas it waits for. The sparse
one (:mod:`distrib.runtime.state.sparse_accumulator`) keeps rows instead of a
sum and shares the rest; :mod:`distrib.runtime.state.resources` runs their ops.
"""
from __future__ import annotations

import asyncio
from collections import Counter, deque
from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError

__all__ = ["ConditionalAccumulator"]


class ConditionalAccumulator:
    """TF1's ``ConditionalAccumulator``: a sum of gradients, a count and a step.

    ``apply_grad`` adds a gradient unless it is stale (its ``local_step`` is
    older than the accumulator's ``global_step``); ``take_grad(n)`` waits for
    at least ``n`` gradients, returns their average, resets the sum and
    advances ``global_step`` by one, so late gradients of the step just taken
    are dropped from then on.

    Each gradient may name its replica (``""`` when the graph did not say):
    ``replicas`` is every replica heard from (in order of first contact),
    ``contributors`` those counted in the current round, ``counted`` and
    ``stale`` how many of each replica's gradients were counted and dropped,
    so a stalled take can say whom it waits for.
    """

    def __init__(self, name: str, dtype: str, shape: list | None) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = None if shape is None else list(shape)
        self.global_step = 0
        self.count = 0
        self.dropped = 0   # stale gradients ignored so far (for tests and tools)
        self.num_replicas = 0   # total_num_replicas, once a take said it (0: unknown)
        self.replicas: dict[str, None] = {}   # an ordered set
        self.contributors: dict[str, int] = {}   # replica -> gradients this round
        self.counted: Counter[str] = Counter()
        self.stale: Counter[str] = Counter()
        self._sum: np.ndarray | None = None
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    def apply_grad(self, local_step: int, grad: Any, replica: str = "") -> bool:
        """Add ``grad`` (from ``replica``); False (and nothing added) when it is stale."""
        grad = self._checked(grad)
        # a stale gradient still shows its replica is alive: it is not "never heard from"
        self.replicas.setdefault(replica, None)
        if local_step < self.global_step:
            self.dropped += 1
            self.stale[replica] += 1
            return False
        self.contributors[replica] = self.contributors.get(replica, 0) + 1
        self.counted[replica] += 1
        self._add(grad)
        self.count += 1
        self._serve()
        return True

    def take_grad(self, num_required: int) -> asyncio.Future:
        """A future of the average of at least ``num_required`` gradients."""
        if num_required < 1:
            raise InvalidArgumentError(
                f"accumulator {self.name}: num_required must be >= 1, got {num_required}")
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((num_required, fut))
        self._serve()
        return fut

    def waiting(self) -> bool:
        """Whether a take is waiting for gradients."""
        return any(not fut.done() for _, fut in self._waiters)

    def missing(self) -> str:
        """The replicas not yet counted in this round, in words (for stall warnings)."""
        absent = [r or "<unnamed>" for r in self.replicas if r not in self.contributors]
        unseen = self.num_replicas - len(self.replicas)
        parts = []
        if absent:
            parts.append(", ".join(absent))
        if unseen > 0:
            parts.append(f"{unseen} replica(s) never heard from")
        return "; ".join(parts) or "none known (every replica seen has contributed)"

    def describe_wait(self, num_required: int) -> str:
        got = ", ".join(f"{r or '<unnamed>'} x{n}" for r, n in self.contributors.items())
        return (f"{num_required} gradients in accumulator {self.name} (step {self.global_step}: "
                f"{self.count} so far{' from ' + got if got else ''}); not yet from: "
                f"{self.missing()}")

    def set_global_step(self, step: int) -> None:
        # TF warns and ignores a step that goes backwards; a restored chief may
        # legitimately do that, so it is allowed here (stale checks follow it)
        self.global_step = int(step)

    def _serve(self) -> None:
        while self._waiters:
            need, fut = self._waiters[0]
            if fut.done():            # cancelled: its step is gone
                self._waiters.popleft()
                continue
            if self.count < need:
                return
            self._waiters.popleft()
            fut.set_result(self._take())

    def _take(self) -> np.ndarray:
        assert self._sum is not None and self.count > 0
        avg = self._sum / self.dtype.type(self.count) if self.dtype.kind == "f" \
            else self._sum // self.count
        self._sum, self.count = None, 0
        self.contributors = {}
        self.global_step += 1
        return np.asarray(avg, dtype=self.dtype)

    def _checked(self, grad: Any) -> Any:
        """``grad`` as this accumulator holds it, its shape checked."""
        grad = np.asarray(grad, dtype=self.dtype)
        self._check_shape(grad)
        return grad

    def _add(self, grad: Any) -> None:
        if self._sum is None:
            self._sum = grad.copy()
        else:
            np.add(self._sum, grad, out=self._sum)

    def _check_shape(self, grad: np.ndarray) -> None:
        shape = self.shape
        if shape is None:
            return
        if len(shape) != grad.ndim or any(d is not None and d != g for d, g in zip(shape, grad.shape)):
            raise InvalidArgumentError(
                f"accumulator {self.name} holds gradients of shape {shape}, got one of shape "
                f"{list(grad.shape)}; every replica must build the same variables")
