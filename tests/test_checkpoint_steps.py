"""The steps ``dt.train.Checkpoint`` runs (``distrib.distribute.functions.checkpoint_steps``):
what its one step of a multi-worker save, the agreement, is cached by.

The agreement's function was cached by ``id(strategy)``: a strategy made after
another was freed can take its id, and then ran the freed one's function, with
its worker count (the collective's group size) and device. It is keyed by
those, what the function depends on; the test frees a strategy and makes
others until one takes its id (CPython reuses a freed object's memory), and
reads the collective the function it gets builds. No server runs: the
function is recorded, not run.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import checkpoint_steps

pytestmark = pytest.mark.usefixtures("fresh_graph")


class Workers:
    """What ``agree`` reads of a multi-worker strategy."""

    def __init__(self, num_workers: int, device: str) -> None:
        self.num_workers = num_workers
        self.replica_devices = (device,)

    def scope(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


def group_of(fn) -> tuple[int, str]:
    """The group size and device of the collective that ``fn`` (an agreement) builds."""
    with dt.Graph().as_default():
        out = fn(dt.constant(np.zeros(2, np.int64)))
    return int(out.op.attrs["group_size"]), out.op.device


def test_a_strategy_at_a_freed_ones_id_gets_an_agreement_of_its_own(monkeypatch) -> None:
    made: list = []   # the Python function behind each dt.function the runner made

    def record(fn):
        made.append(fn)

        async def run(array):
            return array
        return run
    monkeypatch.setattr(checkpoint_steps, "function", record)
    steps = checkpoint_steps.FunctionSteps()
    first = "/job:worker/replica:0/task:0/device:CPU:0"
    other = "/job:worker/replica:0/task:0/device:CPU:1"

    old = Workers(2, first)
    asyncio.run(steps.agree([1, 0], old))
    assert group_of(made[-1]) == (2, first)
    freed = id(old)
    del old
    gc.collect()
    fresh = [Workers(3, other) for _ in range(1000)]   # very likely one at the freed id
    at_freed = [s for s in fresh if id(s) == freed] or fresh[:1]
    asyncio.run(steps.agree([1, 0], at_freed[0]))
    assert group_of(made[-1]) == (3, other)   # the freed one's was (2, first)
    assert len(made) == 2
    asyncio.run(steps.agree([1, 0], fresh[-1]))   # another of the same: the same function
    assert len(made) == 2
