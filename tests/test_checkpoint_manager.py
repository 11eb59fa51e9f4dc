"""dt.train.CheckpointManager as TF's (checkpoint_management.py and
checkpoint_management_test.py's CheckpointManagerTest): max_to_keep deletes the
oldest, keep_checkpoint_every_n_hours keeps some for good, the state file
carries the manager's list and times to the next manager in the folder (a
clock set back deletes nothing), custom numbers and names, checkpoint_interval,
restore_or_initialize with an init_fn (a function or a coroutine function).

Steps run on this process's local server (real sockets, loopback)."""
from __future__ import annotations

import asyncio
import logging
import os

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import def_function
from distrib.train.checkpoints import file_format
from distrib.train.checkpoints import manager as checkpoint_manager

BOUND_S = 60


@pytest.fixture(autouse=True)
async def fresh():
    dt.reset_default_graph()
    async with asyncio.timeout(BOUND_S):
        yield
    await def_function.close_sessions()
    dt.reset_default_graph()


class Clock:
    """``time`` for the manager's module: ``time()`` says what the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock(3.0)
    monkeypatch.setattr(checkpoint_manager, "time", fake)
    return fake


def exists(path: str) -> bool:
    return file_format.checkpoint_exists(path)


async def value(v):
    return await dt.function(lambda: v.read_value())()


async def assign_add(v, x):
    await dt.function(lambda: v.assign_add(x, read_value=False))()


async def test_deletion_keeps_the_newest_max_to_keep(tmp_path):
    manager = dt.train.CheckpointManager(dt.train.Checkpoint(), str(tmp_path), max_to_keep=3)
    paths = [await manager.save() for _ in range(4)]
    assert [exists(p) for p in paths] == [False, True, True, True]
    assert manager.checkpoints == paths[1:] and manager.latest_checkpoint == paths[3]
    assert dt.train.latest_checkpoint(str(tmp_path)) == paths[3]


async def test_a_worker_that_does_not_write_keeps_a_bounded_list(tmp_path, monkeypatch):
    """A non-chief's manager (its Checkpoint writes no file) keeps the chief's
    list: the newest max_to_keep, not every path it ever saved to."""
    ckpt = dt.train.Checkpoint()
    manager = dt.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    monkeypatch.setattr(ckpt, "writes_files", lambda live=None: False)
    paths = [await manager.save() for _ in range(5)]
    assert manager.checkpoints == paths[3:] and manager.latest_checkpoint == paths[4]


async def test_keep_all_and_a_later_manager_takes_the_list_over(tmp_path):
    """TF testKeepAll."""
    ckpt = dt.train.Checkpoint()
    manager = dt.train.CheckpointManager(ckpt, tmp_path, max_to_keep=None)
    first, second, third = [await manager.save() for _ in range(3)]
    assert manager.checkpoints == [first, second, third]
    assert manager.latest_checkpoint == third
    manager = dt.train.CheckpointManager(ckpt, tmp_path, max_to_keep=None)
    fourth = await manager.save()
    assert manager.checkpoints == [first, second, third, fourth]
    manager = dt.train.CheckpointManager(ckpt, tmp_path, max_to_keep=3)
    assert manager.checkpoints == [first, second, third, fourth]
    assert all(exists(p) for p in (first, second, third, fourth))
    fifth = await manager.save()
    assert manager.checkpoints == [third, fourth, fifth]
    assert [exists(p) for p in (first, second, third, fourth, fifth)] == \
        [False, False, True, True, True]


async def test_the_state_file_carries_times_and_keeps_every_n_hours(tmp_path, clock):
    """TF testSaveRestoreState, step for step."""
    directory = str(tmp_path)
    ckpt = dt.train.Checkpoint()
    first_manager = dt.train.CheckpointManager(ckpt, directory, max_to_keep=2)
    first_time = 10000.0
    first_name = os.path.join(directory, "ckpt-1")
    clock.now = first_time
    await first_manager.save()
    second_time = first_time + 3610.0
    second_name = os.path.join(directory, "ckpt-2")
    clock.now = second_time
    await first_manager.save()
    state = dt.train.get_checkpoint_state(directory)
    assert state.all_model_checkpoint_timestamps == (first_time, second_time)
    assert first_manager.checkpoints == [first_name, second_name]
    assert first_manager.latest_checkpoint == second_name
    del first_manager

    second_manager = dt.train.CheckpointManager(ckpt, directory, max_to_keep=2,
                                                keep_checkpoint_every_n_hours=1.5)
    assert second_manager.checkpoints == [first_name, second_name]
    assert second_manager.latest_checkpoint == second_name
    third_name = os.path.join(directory, "ckpt-3")
    third_time = second_time + 3600.0 * 0.2
    clock.now = third_time
    await second_manager.save()
    assert exists(first_name) and exists(second_name)
    assert second_manager.checkpoints == [second_name, third_name]
    assert dt.train.get_checkpoint_state(directory).last_preserved_timestamp == first_time
    fourth_time = third_time + 3600.0 * 0.5
    clock.now = fourth_time
    fourth_name = os.path.join(directory, "ckpt-4")
    await second_manager.save()
    assert exists(first_name) and not exists(second_name)
    assert second_manager.checkpoints == [third_name, fourth_name]
    fifth_time = fourth_time + 3600.0 * 0.5
    clock.now = fifth_time
    fifth_name = os.path.join(directory, "ckpt-5")
    await second_manager.save()
    assert second_manager.checkpoints == [fourth_name, fifth_name]
    assert dt.train.get_checkpoint_state(directory).last_preserved_timestamp == first_time
    del second_manager

    third_manager = dt.train.CheckpointManager(ckpt, directory, max_to_keep=2,
                                               keep_checkpoint_every_n_hours=1.5)
    assert third_manager.latest_checkpoint == fifth_name
    clock.now += 10.0
    await third_manager.save()
    sixth_name = os.path.join(directory, "ckpt-6")
    assert dt.train.get_checkpoint_state(directory).last_preserved_timestamp == fourth_time
    assert [exists(p) for p in (first_name, fourth_name, fifth_name, sixth_name)] == [True] * 4
    assert not exists(second_name) and not exists(third_name)
    assert third_manager.checkpoints == [fifth_name, sixth_name]


async def test_a_clock_set_back_deletes_nothing_it_is_unsure_of(tmp_path, clock, caplog):
    """TF testClockReset."""
    directory = str(tmp_path)
    ckpt = dt.train.Checkpoint()
    clock.now = 10000.0
    first_manager = dt.train.CheckpointManager(ckpt, directory, max_to_keep=1,
                                               keep_checkpoint_every_n_hours=1.0)
    first_path = await first_manager.save()
    clock.now += 3600.0
    second_path = await first_manager.save()
    clock.now += 3600.0
    third_path = await first_manager.save()
    assert [exists(p) for p in (first_path, second_path, third_path)] == [False, True, True]
    assert first_manager.checkpoints == [third_path]
    assert dt.train.get_checkpoint_state(directory).last_preserved_timestamp == 13600.0
    clock.now = 5000.0
    del first_manager
    with caplog.at_level(logging.WARNING, logger="distrib.train.checkpoints.manager"):
        second_manager = dt.train.CheckpointManager(ckpt, directory, max_to_keep=1)
    assert "behind the last preserved checkpoint timestamp" in caplog.text
    assert exists(second_path)
    assert second_manager.latest_checkpoint == third_path and second_manager.checkpoints == []
    clock.now += 10.0
    fourth_path = await second_manager.save()
    assert exists(second_path) and exists(third_path)
    assert second_manager.latest_checkpoint == fourth_path
    assert second_manager.checkpoints == [fourth_path]
    clock.now += 10.0
    fifth_path = await second_manager.save()
    assert exists(second_path) and exists(third_path)
    assert second_manager.checkpoints == [fifth_path]
    state = dt.train.get_checkpoint_state(directory)
    assert state.last_preserved_timestamp == 5000.0
    assert state.all_model_checkpoint_timestamps == (5020.0,)


async def test_a_folder_of_checkpoint_saves_is_taken_over_not_deleted_from(tmp_path):
    """TF testContinueFromUnmanaged: Checkpoint.save's files (no times) are never
    managed; the counter restored from the newest continues the numbering."""
    prefix = str(tmp_path / "unusual_prefix")
    ckpt = dt.train.Checkpoint()
    first_path, second_path = await ckpt.save(prefix), await ckpt.save(prefix)
    ckpt = dt.train.Checkpoint()
    manager = dt.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    assert manager.latest_checkpoint == second_path
    await ckpt.restore(manager.latest_checkpoint)
    assert int(await value(ckpt.save_counter)) == 2
    third_path = await manager.save()
    assert manager.checkpoints == [third_path]
    fourth_path = await manager.save()
    fifth_path = await manager.save()
    assert manager.checkpoints == [fourth_path, fifth_path]
    assert [exists(p) for p in (first_path, second_path, third_path, fourth_path,
                                fifth_path)] == [True, True, False, True, True]


async def test_custom_numbers_and_names(tmp_path):
    """TF testCustomNumbering / testCustomCheckpointPrefix: checkpoint_number (a
    variable, read in the save's step, or an int) numbers the file; the
    counter is incremented all the same."""
    step = dt.Variable(np.int64(0))
    ckpt = dt.train.Checkpoint(step=step)
    manager = dt.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=2)
    for i in range(5):
        path = await manager.save(checkpoint_number=step)
        assert path.endswith(f"-{2 * i}")
        await assign_add(step, np.int64(2))
    assert int(await value(ckpt.save_counter)) == 5
    last_path = await manager.save(checkpoint_number=32)
    assert last_path.endswith("-32")
    assert manager.latest_checkpoint == last_path == dt.train.latest_checkpoint(str(tmp_path))
    state = dt.train.get_checkpoint_state(str(tmp_path))
    assert state.all_model_checkpoint_paths == (path, last_path)

    named = dt.train.CheckpointManager(ckpt, tmp_path / "named", max_to_keep=2,
                                       checkpoint_name="ckpt_name")
    assert os.path.basename(await named.save(checkpoint_number=5)) == "ckpt_name-5"


async def test_restore_or_initialize_calls_init_fn_only_without_a_checkpoint(tmp_path):
    """TF testRestoreOrInitialize; init_fn may be a coroutine function here."""
    init_v = dt.Variable(2.0)
    init_path = await dt.train.Checkpoint(v=init_v).save(str(tmp_path / "init"))
    v = dt.Variable(1.0)
    checkpoint = dt.train.Checkpoint(v=v)
    calls = []

    async def init_fn():
        calls.append("init")
        (await checkpoint.restore(init_path)).assert_consumed()

    manager = dt.train.CheckpointManager(checkpoint, str(tmp_path / "ckpt"), max_to_keep=None,
                                         init_fn=init_fn)
    assert await manager.restore_or_initialize() is None
    assert calls == ["init"] and float(await value(v)) == 2.0
    saved = await manager.save()
    assert await manager.restore_or_initialize() == saved and calls == ["init"]

    plain = dt.train.CheckpointManager(checkpoint, str(tmp_path / "other"), max_to_keep=1,
                                       init_fn=lambda: calls.append("sync"))
    assert await plain.restore_or_initialize() is None and calls[-1] == "sync"


async def test_checkpoint_interval_counts_steps(tmp_path):
    """TF testCheckpointInterval and testCheckpointIntervalWithRestore."""
    v = dt.Variable(1.0)
    step_counter = dt.Variable(np.int64(0))
    checkpoint = dt.train.Checkpoint(v=v)
    manager = dt.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=None,
                                         step_counter=step_counter, checkpoint_interval=2)
    assert exists(await manager.save(check_interval=True))          # step 0: the first
    await assign_add(step_counter, np.int64(1))
    assert await manager.save(check_interval=True) is None          # step 1
    await assign_add(step_counter, np.int64(1))
    assert exists(await manager.save(check_interval=True))          # step 2
    assert await manager.save(check_interval=True) is None          # step 2 again
    await assign_add(step_counter, np.int64(1))
    assert await manager.save(check_interval=True) is None          # step 3
    assert exists(await manager.save(check_interval=False))         # forced

    restored = dt.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=None,
                                          step_counter=step_counter, checkpoint_interval=2)
    assert await restored.restore_or_initialize() is not None
    assert await restored.save() is None     # the step restored from is the last saved


def test_arguments_are_checked_as_tf_checks_them(tmp_path):
    ckpt = dt.train.Checkpoint()
    with pytest.raises(ValueError, match="positive integer"):
        dt.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=0)
    with pytest.raises(ValueError, match="step_counter"):
        dt.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=1, checkpoint_interval=2)
