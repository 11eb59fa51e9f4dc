"""A big Assign on a ps (a table's initial value: 1.28 GB is ~2 s of copying into
shared memory) copies off the event loop, which meanwhile answers pings and
heartbeats; only the swap into the variable store runs on the loop.

The value here is small but says it is big (its ``nbytes``), and its conversion
to an array waits until the server has answered three pings over a real
connection: the assign finishes only if the loop stayed responsive while it
ran (counted, not timed; the gate's own wait only bounds a failure).
"""
from __future__ import annotations

import asyncio
import threading

import numpy as np

from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.state.stateful import run_stateful
from distrib.runtime.step.doors import WorkerDoor
from distrib.server.server_lib import serve

PINGS = 3


class _Gate:
    """An array-like of ``value`` that claims 2 GiB and converts only once ``open``."""

    nbytes = 1 << 31

    def __init__(self, value: np.ndarray) -> None:
        self.value = value
        self.open = threading.Event()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if not self.open.wait(20):
            raise RuntimeError(f"the loop answered fewer than {PINGS} pings while the "
                               "assign's copy ran")
        return self.value if dtype is None else self.value.astype(dtype)


async def test_a_big_assign_copies_off_the_loop_which_answers_pings_meanwhile():
    value = np.arange(12.0).reshape(3, 4)
    gate = _Gate(value)
    node = {"op": "Assign", "name": "table/Assign",
            "attrs": {"var": "table", "dtype": "float64", "shape": [3, 4]}}
    async with serve({"local": ["127.0.0.1:0"]}, "local", 0) as core:
        system = await ActorSystem("/job:probe/task:0", listen=False).start()
        try:
            door = WorkerDoor.at(system, core.system.address)
            assert await door.ping(timeout=30) == core.task   # connected before
            store = core.worker.variables
            out = run_stateful(node, [gate], store, True, ("CPU", 0))
            assert asyncio.isfuture(out)
            pings = 0
            while not out.done() and pings < 1000:
                assert await door.ping(timeout=30) == core.task
                pings += 1
                if pings == PINGS:
                    gate.open.set()
            assert await out == [gate]
            assert pings >= PINGS
            np.testing.assert_array_equal(store.get("table"), value)
            # a small assign still runs at once, on the loop
            assert run_stateful(node, [value + 1], store, True, ("CPU", 0))[0] is not None
            np.testing.assert_array_equal(store.get("table"), value + 1)
        finally:
            gate.open.set()
            await system.shutdown()
