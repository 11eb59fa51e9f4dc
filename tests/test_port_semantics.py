"""Semantics a TF program relies on when ported, seen while trying the
strategies; also ``ClusterCoordinator.schedule`` of a plain Python function.

Two strategies made one after the other in one process (a notebook, a test
suite): each ``dt.function`` initializes on first use only the variables of
its own strategy (and those made outside every strategy), never those of an
earlier strategy.

TF's behaviour: in TF2 a variable belongs to its object and is initialized
when it is made; a later strategy never touches an earlier one's variables
(``parameter_server_strategy_v2_test`` builds many strategies in one process).
Ours initializes on first use (see ``def_function``), so the rule is spelled
out here: a ParameterServerStrategy over two ps tasks, then another over one
ps task, used to fail the second's first step with ``op 'Variable_1/initial_value'
is pinned to /job:ps/task:1, which is not in the cluster``; and a second
strategy sharing a ps task with the first used to reset the first's trained
variables on it.

The ps, worker and chief tasks are real servers in this process (loopback)."""
from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import def_function
from tests.peers.cli_cluster import cluster_spec

BOUND_S = 60


pytestmark = pytest.mark.usefixtures("fresh_graph")


@contextlib.contextmanager
def ps_strategy(spec: dict, own: tuple = ("ps", "worker")):
    """A ParameterServerStrategy whose chief is this process; the tasks of the
    jobs in ``own`` are served here too (the others are served by someone else)."""
    servers = [dt.Server(spec, job_name=job, task_index=i)
               for job in own for i in range(len(spec[job]))]
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec(spec), task_type="chief", task_id=0)
    strategy = dt.distribute.ParameterServerStrategy(resolver)
    try:
        yield strategy
    finally:
        strategy._server.stop()
        for s in servers:
            s.stop()


def counter_model(strategy):
    """Two variables (round robin over the ps tasks) and a step that adds 1 to each."""
    with strategy.scope():
        w = dt.Variable(np.zeros(2, np.float32), name="w")
        b = dt.Variable(np.zeros(1, np.float32), name="b")

    @dt.function
    def step():
        def replica_fn():
            with dt.control_dependencies([w.assign_add(np.ones(2, np.float32)),
                                          b.assign_add(np.ones(1, np.float32))]):
                return dt.reduce_sum(w.read_value()) + dt.reduce_sum(b.read_value())
        return strategy.run(replica_fn)
    return (w, b), step


async def train(strategy, steps: int) -> tuple:
    coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
    (w, b), step = counter_model(strategy)
    for _ in range(steps):
        coord.schedule(step)
    await coord.join()
    await coord.shutdown()
    return w, b


async def read(strategy, var) -> np.ndarray:
    @dt.function
    def read_fn():
        return var.read_value()
    with strategy.scope():
        return await read_fn()


async def test_a_second_ps_strategy_over_fewer_ps_tasks_runs_its_first_step() -> None:
    async with asyncio.timeout(BOUND_S):
        with ps_strategy(cluster_spec(chief=1, ps=2, worker=1)) as first:
            w1, b1 = await train(first, 2)
            assert b1.device.startswith("/job:ps/task:1")
            np.testing.assert_allclose(await read(first, w1), [2.0, 2.0])
            await def_function.close_sessions()
        with ps_strategy(cluster_spec(chief=1, ps=1, worker=1)) as second:
            # failed: "op 'Variable_1/initial_value' is pinned to /job:ps/task:1, which is
            # not in the cluster" (the second strategy initialized the first's variables)
            w2, _ = await train(second, 3)
            np.testing.assert_allclose(await read(second, w2), [3.0, 3.0])
            await def_function.close_sessions()


async def test_a_later_strategy_never_resets_an_earlier_ones_variables() -> None:
    first_spec = cluster_spec(chief=1, ps=1, worker=1)
    # the second strategy's cluster shares the first's ps task (same server)
    second_spec = dict(cluster_spec(chief=1, worker=1), ps=list(first_spec["ps"]))
    async with asyncio.timeout(BOUND_S):
        with ps_strategy(first_spec) as first:
            w1, _ = await train(first, 4)
            with ps_strategy(second_spec, own=("worker",)) as second:
                w2, _ = await train(second, 1)
                np.testing.assert_allclose(await read(second, w2), [1.0, 1.0])
                # the second's first step initialized its own variables only: the first's
                # w on the shared ps keeps its four steps (it was reset to zeros)
                np.testing.assert_allclose(await read(first, w1), [4.0, 4.0])
            await def_function.close_sessions()


async def test_a_function_outside_every_strategy_still_initializes_plain_variables() -> None:
    """Variables made outside every strategy belong to no strategy: any function
    that runs first on a target initializes them (TF2's eager variables)."""
    v = dt.Variable(np.array([5.0], np.float32), name="plain")

    @dt.function
    def bump():
        return v.assign_add(np.ones(1, np.float32))
    async with asyncio.timeout(BOUND_S):
        np.testing.assert_allclose(await bump(), [6.0])
        np.testing.assert_allclose(await bump(), [7.0])


async def test_a_dropped_strategys_variables_are_initialized_where_it_ran() -> None:
    """``with dt.distribute.MirroredStrategy().scope(): ...``: the strategy object
    is gone, its variables are still its own and live on the local server, where
    a function outside every strategy runs: TF2 made them at creation."""
    with dt.distribute.MirroredStrategy().scope():
        v = dt.Variable(np.array([1.0, 2.0], np.float32), name="kept")
    assert dt.distribute.core.distribute_lib.variable_owner(v) is not None

    @dt.function
    def double():
        return v.read_value() * 2.0
    async with asyncio.timeout(BOUND_S):
        np.testing.assert_allclose(await double(), [2.0, 4.0])


async def test_schedule_takes_a_plain_python_function() -> None:
    """TF's ``schedule`` raises TypeError for anything but a ``tf.function``; ours
    wraps a plain function in a ``dt.function`` (once per callable) and runs it,
    a documented difference (README)."""
    async with asyncio.timeout(BOUND_S):
        with ps_strategy(cluster_spec(chief=1, ps=1, worker=1)) as strategy:
            coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
            with strategy.scope():
                v = dt.Variable(0.0, name="v")

            def plain():
                return v.assign_add(1.0)
            results = [coord.schedule(plain) for _ in range(3)]
            await coord.join()
            assert sorted([float(await r.fetch()) for r in results]) == [1.0, 2.0, 3.0]
            await coord.shutdown()
            await def_function.close_sessions()
