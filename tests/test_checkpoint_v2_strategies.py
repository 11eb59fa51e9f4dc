"""dt.train.Checkpoint under the strategies and across processes: a Keras
model and its optimizer saved from two mirrored replicas restore into one and
back (each copy, each slot), continuing with the loss the saved run reaches;
a ShardedVariable saved from 2 shards restores into 3 (ParameterServerStrategy
on in-process ps servers); a model restored in a fresh process (a child,
stopped by its pid) continues with the same loss as the process that saved it;
and under MultiWorkerMirroredStrategy (two worker processes) every worker
writes its own folder, the chief's first, and every worker restores from the
chief's file.

TF's behaviour stated: a MirroredVariable is saved once, under its one-replica
path, and restored into every copy; a ShardedVariable is saved whole; an
optimizer's slots made after the restore (by the first train step) start from
the checkpoint (restore on create), so the next step's loss is the one the
saving program computes."""
from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.core.values import local_results
from distrib.distribute.functions import def_function
from tests import helpers
from tests.helpers import ROOT, child_env, run_workers
from tests.peers.cli_cluster import cluster_spec

keras = dt.keras
BOUND_S = 90


pytestmark = pytest.mark.usefixtures("fresh_keras")


def linear_data(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return helpers.linear_data(n, seed)


def small_model(strategy=None) -> keras.Sequential:
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = keras.Sequential([keras.layers.Dense(4, activation="relu", input_shape=(3,)),
                                  keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


async def one_epoch(model) -> float:
    x, y = linear_data()
    history = await model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    return history.history["loss"][0]


async def copies(variable) -> list[np.ndarray]:
    """Every replica copy's value of a (mirrored) variable."""
    return [np.asarray(v) for v in
            await dt.function(lambda: [c.read_value() for c in local_results(variable)])()]


async def test_two_replicas_restore_into_one_and_back(two_cpus, tmp_path) -> None:
    async with asyncio.timeout(BOUND_S):
        mirrored = dt.distribute.MirroredStrategy()
        two = small_model(mirrored)
        await one_epoch(two)
        await one_epoch(two)
        path = await dt.train.Checkpoint(model=two, optimizer=two.optimizer).save(
            str(tmp_path / "two" / "ckpt"))
        keys = dict(dt.train.list_variables(path))
        # saved once per variable: no replica in any key
        assert not any("replica" in k for k in keys)
        assert keys["model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"] == [3, 4]
        assert "model/layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/" \
            "VARIABLE_VALUE" in keys
        assert keys["optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"] == []
        want = await one_epoch(two)

        dt.reset_default_graph()
        one = small_model()
        ckpt = dt.train.Checkpoint(model=one, optimizer=one.optimizer)
        status = await ckpt.restore(path)
        status.assert_existing_objects_matched()
        with pytest.raises(AssertionError, match="optimizer's state 'm'"):
            status.assert_consumed()          # the slots wait for the first train step
        got = await one_epoch(one)
        status.assert_consumed()
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert int(np.asarray(await copies(one.optimizer.iterations))[0]) == 3 * 4
        path_one = await ckpt.save(str(tmp_path / "one" / "ckpt"))
        want_next = await one_epoch(one)
        saved_kernel = dt.train.load_checkpoint(path_one).get_tensor(
            "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE")

        dt.reset_default_graph()
        again = small_model(dt.distribute.MirroredStrategy())
        status = await dt.train.Checkpoint(model=again, optimizer=again.optimizer).restore(
            path_one)
        kernel = again.layers[0].kernel
        assert len(local_results(kernel)) == 2
        for value in await copies(kernel):           # restored into every copy
            np.testing.assert_array_equal(value, saved_kernel)
        got_next = await one_epoch(again)
        status.assert_consumed()
        np.testing.assert_allclose(got_next, want_next, rtol=1e-5)
        slot = again.optimizer.tf1_optimizer
        m = [slot.get_slot(c, "m") for c in local_results(kernel)]
        first, second = [np.asarray(v) for v in await dt.function(
            lambda: [s.read_value() for s in m])()]
        np.testing.assert_array_equal(first, second)   # the copies' slots stay equal


@pytest.fixture
def ps_cluster():
    """Three ps and one worker server in this process, and the chief's address."""
    spec = cluster_spec(chief=1, ps=3, worker=1)
    servers = [dt.Server(spec, job_name=j, task_index=i)
               for j, n in (("ps", 3), ("worker", 1)) for i in range(n)]
    try:
        yield spec
    finally:
        for s in servers:
            s.stop()


@contextlib.asynccontextmanager
async def ps_strategy(spec, shards: int):
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec(spec), task_type="chief", task_id=0)
    strategy = dt.distribute.ParameterServerStrategy(
        resolver, dt.distribute.experimental.partitioners.FixedShardsPartitioner(shards))
    try:
        yield strategy
    finally:
        await def_function.close_sessions()
        strategy._server.stop()          # the next strategy's chief takes its port
        from distrib.distribute.functions.local_target import set_default_target
        set_default_target(None)


async def test_a_sharded_variable_saved_from_two_shards_restores_into_three(ps_cluster,
                                                                           tmp_path) -> None:
    whole = np.arange(12, dtype=np.float32).reshape(6, 2)
    async with asyncio.timeout(BOUND_S):
        async with ps_strategy(ps_cluster, 2) as strategy:
            with strategy.scope():
                emb = dt.Variable(whole, name="emb")
                assert [s.shape.as_list() for s in emb.variables] == [[3, 2], [3, 2]]
                path = await dt.train.Checkpoint(emb=emb).save(str(tmp_path / "ckpt"))
        assert dict(dt.train.list_variables(path))["emb/.ATTRIBUTES/VARIABLE_VALUE"] == [6, 2]

        dt.reset_default_graph()
        async with ps_strategy(ps_cluster, 3) as strategy:
            with strategy.scope():
                emb3 = dt.Variable(np.zeros((6, 2), np.float32), name="emb")
                assert [s.shape.as_list() for s in emb3.variables] == [[2, 2]] * 3
                status = await dt.train.Checkpoint(emb=emb3).restore(path)
                status.assert_existing_objects_matched()
                shards = await dt.function(lambda: [s.read_value() for s in emb3.variables])()
        for i, shard in enumerate(shards):
            np.testing.assert_array_equal(shard, whole[2 * i:2 * i + 2])


CHILD = r"""
import asyncio, sys
import distrib as dt
from tests.test_checkpoint_v2_strategies import small_model, one_epoch

async def main():
    model = small_model()
    ckpt = dt.train.Checkpoint(model=model, optimizer=model.optimizer)
    manager = dt.train.CheckpointManager(ckpt, sys.argv[1], max_to_keep=2)
    restored = await manager.restore_or_initialize()
    print("restored", restored, flush=True)
    print("loss", repr(await one_epoch(model)), flush=True)

asyncio.run(main())
"""


async def test_a_model_restored_in_a_fresh_process_continues_with_the_same_loss(tmp_path) -> None:
    async with asyncio.timeout(BOUND_S):
        model = small_model()
        await one_epoch(model)
        await one_epoch(model)
        ckpt = dt.train.Checkpoint(model=model, optimizer=model.optimizer)
        manager = dt.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
        saved = await manager.save()
        want = await one_epoch(model)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT,
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        out, _ = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    lines = dict(line.split(" ", 1) for line in out.splitlines()
                 if line.startswith(("restored ", "loss ")))
    assert lines["restored"] == saved
    np.testing.assert_allclose(float(lines["loss"]), want, rtol=1e-6)


MWMS_WORKER = r"""
import asyncio, os, sys
import distrib as dt
from tests.test_checkpoint_v2_strategies import small_model, one_epoch

async def main():
    own_dir, chief_dir = sys.argv[1], sys.argv[2]
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    model = small_model(strategy)
    await one_epoch(model)
    ckpt = dt.train.Checkpoint(model=model, optimizer=model.optimizer)
    manager = dt.train.CheckpointManager(ckpt, own_dir, max_to_keep=1)
    print("saved", await manager.save(), flush=True)
    print("after_save", repr(await one_epoch(model)), flush=True)
    print("files", sorted(os.listdir(own_dir)) if os.path.isdir(own_dir) else [], flush=True)
    status = await ckpt.restore(dt.train.latest_checkpoint(chief_dir))
    status.assert_existing_objects_matched()
    print("after_restore", repr(await one_epoch(model)), flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
def test_under_multi_worker_mirrored_every_worker_writes_and_restores_the_chiefs(
        tmp_path) -> None:
    """Every worker saves (the read step is theirs too) and, as TF's, writes its
    own folder (the chief's first); restored from the chief's file, each
    worker's next epoch has the loss the one after the save had."""
    dirs = [str(tmp_path / f"worker{i}") for i in range(2)]
    lines = []
    for out in run_workers(["-c", MWMS_WORKER], 2, BOUND_S,
                           args_of=lambda i: [dirs[i], dirs[0]]):
        lines.append(dict(line.split(" ", 1) for line in out.splitlines()
                          if line.split(" ", 1)[0] in ("saved", "after_save", "files",
                                                       "after_restore")))
    chief, other = lines
    assert chief["saved"] == os.path.join(dirs[0], "ckpt-1")
    assert chief["files"] == other["files"] == "['checkpoint', 'ckpt-1']"
    for worker in lines:
        assert worker["after_restore"] == worker["after_save"]
    assert chief["after_save"] == other["after_save"]
