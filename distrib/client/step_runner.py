"""Where checkpoints get their steps: a *step runner* reads and assigns plain
variables in steps on their target (with TF2's first-use initialization), and
joins a step every worker of a strategy runs. ``dt.function`` (one of
``distrib.distribute``'s) is the one distrib has; the checkpoint code
(``distrib.train.checkpoints``, Keras' saves, the preemption handler) runs
below it, so the process runtime (``distrib.process``) hands it here with
:func:`register_step_runner`, and they ask :func:`step_runner`.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np

from distrib.errors import FailedPreconditionError

__all__ = ["StepRunner", "register_step_runner", "step_runner"]


class StepRunner(Protocol):
    """Reads and assigns plain variables in steps on their target."""

    async def read(self, variables: Sequence[Any], strategy: Any = None,
                   bump: Any = None) -> list[np.ndarray]:
        """The variables' values in one step per graph; ``bump`` (one of them)
        is incremented by one first, in the same step."""

    async def assign(self, pairs: Sequence[tuple[Any, np.ndarray]],
                     strategy: Any = None) -> None:
        """Assign each variable its value, one step per graph."""

    async def agree(self, values: Sequence[int], strategy: Any) -> np.ndarray:
        """The element-wise max of ``values`` (int64) over ``strategy``'s workers,
        in one step every worker runs: it returns once all of them have called
        it (``worker_saves``: a save returns once the chief's copy is whole)."""


_runner_factory: Callable[[], StepRunner] | None = None


def register_step_runner(factory: Callable[[], StepRunner]) -> None:
    """Where checkpoints get their steps (the process runtime registers ``dt.function``'s)."""
    global _runner_factory
    _runner_factory = factory


def step_runner() -> StepRunner:
    if _runner_factory is None:
        raise FailedPreconditionError(
            "dt.train.Checkpoint moves values with dt.function steps, and none are "
            "registered: `import distrib` makes the process runtime that registers them")
    return _runner_factory()
