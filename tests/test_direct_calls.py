"""The in-process actor path to a server on another loop of this process
(``runtime/actors/in_process.py``): a session reaches the master of the
process's local server, or of any server that ``accept_direct_calls()``, by
direct calls on the server's loop thread: no connection is opened, fed arrays
are copied once (the caller may reuse them), and a server that stops fails the
calls, in flight or later, with ``UnavailableError`` as a lost connection
does. A server that did not ask for it is reached over the wire, as before."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import def_function
from distrib.distribute.functions.local_target import local_server
from distrib.errors import UnavailableError
from distrib.train.replicas.sync_replicas import TokenQueue

BOUND_S = 30


def _clients(server: dt.Server) -> int:
    """Connections open to ``server`` from clients (sessions over the wire)."""
    return sum(1 for c in server._core.system.connections()   # noqa: SLF001 - the test's probe
               if not c.peer.name.startswith("/job:"))


async def test_a_function_reaches_the_local_server_with_no_connection(fresh_graph) -> None:
    w = dt.Variable(np.ones(3, np.float32), name="w")

    @dt.function
    def step(x):
        w.assign_add(x)
        return w.read_value() * 2.0, dt.identity(x)

    x = np.full(3, 0.5, np.float32)
    async with asyncio.timeout(BOUND_S):
        try:
            before = None
            for i in range(3):
                out, echoed = await step(x)
                before = _clients(local_server()) if before is None else before
                np.testing.assert_allclose(out, 2.0 * (1.0 + 0.5 * (i + 1)))
            assert _clients(local_server()) == before == 0
            # the fed array went in as a copy: writing to it now changes nothing there
            assert echoed is not x and not np.shares_memory(echoed, x)
            x[:] = 100.0
            out, _ = await step(np.zeros(3, np.float32))
            np.testing.assert_allclose(out, 2.0 * 2.5)
        finally:
            await def_function.close_sessions()


async def test_a_server_that_did_not_ask_is_reached_over_the_wire(fresh_graph) -> None:
    server = dt.Server.create_local_server()
    try:
        async with asyncio.timeout(BOUND_S), dt.Session(server.target) as sess:
            assert float(await sess.run(dt.constant(2.0) * 3.0)) == 6.0
            assert _clients(server) == 1
    finally:
        server.stop()


async def test_a_stopped_server_fails_direct_calls_unavailable(fresh_graph, monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "0.5")   # the later call's wire retries
    step = dt.Variable(np.int64(0), name="global_step")
    take = TokenQueue(step).dequeue()        # waits: the queue stays empty
    server = dt.Server.create_local_server()
    server.accept_direct_calls()
    try:
        async with asyncio.timeout(BOUND_S), dt.Session(server.target) as sess:
            await sess.run(step.initializer)
            assert _clients(server) == 0
            pending = asyncio.ensure_future(sess.run(take))
            await asyncio.sleep(0.3)
            assert not pending.done()
            await asyncio.to_thread(server.stop)      # in flight: failed, not left hanging
            with pytest.raises(UnavailableError):
                await pending
            with pytest.raises(UnavailableError):     # later: as a lost server over the wire
                await sess.run(step)
    finally:
        server.stop()
