"""Saver: round trips through a real local server and Session, rotation, corruption, sync twins."""
from __future__ import annotations

import asyncio
import errno
import os

import numpy as np
import pytest

import distrib as dt
from distrib.errors import DataLossError, InvalidArgumentError, NotFoundError, ResourceExhaustedError
from distrib.train.checkpoints import file_format, state_file
from distrib.train.checkpoints.saver import Saver, latest_checkpoint
from distrib.train.optimizers.global_step import get_or_create_global_step


class Model:
    """Two variables and a global step in a fresh graph, with ops to change them."""

    def __init__(self, **saver_kwargs) -> None:
        self.graph = dt.Graph()
        with self.graph.as_default():
            self.w = dt.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="layer/w")
            self.b = dt.Variable(np.array([1, 2, 3], dtype=np.int32), name="layer/b")
            self.gs = get_or_create_global_step()
            self.init = dt.global_variables_initializer()
            self.scramble = dt.group(self.w.assign(dt.zeros([2, 3])),
                                     self.b.assign(dt.constant([7, 7, 7], dtype=dt.int32)),
                                     self.gs.assign_add(5))
            self.saver = Saver(**saver_kwargs)


async def test_save_then_restore_round_trips_through_a_session(server, tmp_path):
    model = Model()
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        await sess.run(model.gs.assign_add(3))
        path = await model.saver.save(sess, str(tmp_path / "ckpt" / "model"), global_step=model.gs)
        assert path == str(tmp_path / "ckpt" / "model-3")
        assert latest_checkpoint(str(tmp_path / "ckpt")) == path
        assert set(file_format.list_checkpoint_tensors(path)) == {"layer/w", "layer/b", "global_step"}
        await sess.run(model.scramble)
        assert (await sess.run(model.gs)) == 8
        await model.saver.restore(sess, path)
        w, b, gs = await sess.run([model.w, model.b, model.gs])
    np.testing.assert_array_equal(w, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(b, [1, 2, 3])
    assert gs == 3 and w.dtype == np.float32 and b.dtype == np.int32


async def test_restore_sets_variables_never_initialized_on_a_fresh_server(tmp_path):
    model = Model()
    with dt.Server.create_local_server() as first:
        async with dt.Session(first.target, graph=model.graph) as sess:
            await sess.run(model.init)
            await sess.run(model.scramble)
            path = await model.saver.save(sess, str(tmp_path / "model"), global_step=11)
    assert path.endswith("model-11")
    fresh = Model()
    with dt.Server.create_local_server() as second:
        async with dt.Session(second.target, graph=fresh.graph) as sess:
            with pytest.raises(dt.errors.FailedPreconditionError):
                await sess.run(fresh.w)
            await fresh.saver.restore(sess, latest_checkpoint(str(tmp_path)))
            w, b, gs = await sess.run([fresh.w, fresh.b, fresh.gs])
    np.testing.assert_array_equal(w, np.zeros((2, 3)))
    np.testing.assert_array_equal(b, [7, 7, 7])
    assert gs == 5


async def test_max_to_keep_rotates_files_and_state(server, tmp_path):
    model = Model(max_to_keep=2)
    prefix = str(tmp_path / "model")
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        paths = [await model.saver.save(sess, prefix, global_step=step) for step in (1, 2, 3, 4)]
    assert [os.path.exists(p) for p in paths] == [False, False, True, True]
    assert model.saver.last_checkpoints == paths[2:]
    state = state_file.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == paths[3]
    assert list(state.all_model_checkpoint_paths) == paths[2:]


async def test_recovered_checkpoints_count_towards_max_to_keep(server, tmp_path):
    prefix = str(tmp_path / "model")
    first = Model(max_to_keep=2)
    async with dt.Session(server.target, graph=first.graph) as sess:
        await sess.run(first.init)
        old = [await first.saver.save(sess, prefix, global_step=s) for s in (1, 2)]
        second = Saver(var_list=[first.w], max_to_keep=2)
        second.recover_last_checkpoints(old)
        new = await second.save(sess, prefix, global_step=3)
    assert not os.path.exists(old[0]) and os.path.exists(old[1]) and os.path.exists(new)
    assert second.last_checkpoints == [old[1], new]


async def test_corrupted_checkpoint_is_detected_and_latest_checkpoint_falls_back(server, tmp_path):
    model = Model()
    prefix = str(tmp_path / "model")
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        good = await model.saver.save(sess, prefix, global_step=1)
        await sess.run(model.scramble)
        bad = await model.saver.save(sess, prefix, global_step=2)
        # flip the last byte: a tensor's data, so only the checksum can notice
        with open(bad, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([last[0] ^ 0xFF]))
        with pytest.raises(DataLossError, match="model-2"):
            await model.saver.restore(sess, bad)
        # a truncated newest file: latest_checkpoint skips it for the older good one
        with open(bad, "r+b") as f:
            f.truncate(10)
        assert latest_checkpoint(str(tmp_path)) == good
        await model.saver.restore(sess, latest_checkpoint(str(tmp_path)))
        assert (await sess.run(model.gs)) == 0


async def test_restore_names_a_variable_missing_from_the_checkpoint(server, tmp_path):
    model = Model()
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        only_w = Saver(var_list={"weights": model.w})
        path = await only_w.save(sess, str(tmp_path / "partial"))
        assert set(file_format.list_checkpoint_tensors(path)) == {"weights"}
        with pytest.raises(NotFoundError, match="layer/b"):
            await model.saver.restore(sess, path)
        with pytest.raises(NotFoundError, match="does not exist"):
            await model.saver.restore(sess, str(tmp_path / "nothing-here"))
        with pytest.raises(InvalidArgumentError, match="None"):
            await model.saver.restore(sess, None)


def test_saver_rejects_duplicate_names_and_empty_graphs():
    graph = dt.Graph()
    with graph.as_default():
        with pytest.raises(InvalidArgumentError, match="no variables"):
            Saver()
        v = dt.Variable(1.0, name="v")
        with pytest.raises(InvalidArgumentError, match="same name"):
            Saver(var_list=[v, v])
        assert Saver(allow_empty=True, var_list=[]).var_list == {}


def test_sync_session_and_blocking_twins(server, tmp_path):
    model = Model()
    sess = dt.SyncSession(server.target, graph=model.graph)
    try:
        sess.run(model.init)
        path = model.saver.save_sync(sess, str(tmp_path / "model"), global_step=model.gs)
        assert path.endswith("model-0")
        sess.run(model.scramble)
        model.saver.restore_sync(sess, path)
        np.testing.assert_array_equal(sess.run(model.b), [1, 2, 3])
    finally:
        sess.close()


async def test_async_save_accepts_a_sync_session(server, tmp_path):
    model = Model()
    sess = dt.SyncSession(server.target, graph=model.graph)
    try:
        sess.run(model.init)
        path = await model.saver.save(sess, str(tmp_path / "model"))
        sess.run(model.scramble)
        await model.saver.restore(sess, path)
        np.testing.assert_array_equal(sess.run(model.b), [1, 2, 3])
    finally:
        sess.close()


async def test_string_variables_round_trip(server, tmp_path):
    # a fetched string comes back as str / fixed-width unicode; it is saved
    # as the variable's string dtype, so restore takes it
    g = dt.Graph()
    with g.as_default():
        s0 = dt.Variable("hello", name="s0")
        s1 = dt.Variable(np.array(["a", "bc"], dtype=object), name="s1")
        init = dt.global_variables_initializer()
        change = dt.group(s0.assign("other"), s1.assign(np.array(["x", "y"], dtype=object)))
        saver = Saver()
    async with dt.Session(server.target, graph=g) as sess:
        await sess.run(init)
        path = await saver.save(sess, str(tmp_path / "model"))
        await sess.run(change)
        await saver.restore(sess, path)
        got = await sess.run([s0, s1])
    assert got[0] == "hello" and list(got[1]) == ["a", "bc"]


async def test_a_failed_state_write_deletes_no_checkpoint(server, tmp_path, monkeypatch):
    model = Model(max_to_keep=1)
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        first = await model.saver.save(sess, str(tmp_path / "model"), global_step=1)

        def disk_full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(state_file, "update_checkpoint_state", disk_full)
        with pytest.raises(ResourceExhaustedError, match="disk space"):
            await model.saver.save(sess, str(tmp_path / "model"), global_step=2)
        monkeypatch.undo()
        # the state file still names model-1, and model-1 is still there
        assert latest_checkpoint(str(tmp_path)) == first
        await model.saver.restore(sess, first)
        # the next save that succeeds rotates both older files out
        third = await model.saver.save(sess, str(tmp_path / "model"), global_step=3)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("model")) == ["model-3"]
    assert latest_checkpoint(str(tmp_path)) == third


async def test_concurrent_saves_leave_state_and_rotation_agreeing(server, tmp_path):
    model = Model(max_to_keep=3)
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        await asyncio.gather(*(model.saver.save(sess, str(tmp_path / "model"), global_step=step)
                               for step in range(12)))
    state = state_file.get_checkpoint_state(str(tmp_path))
    kept = model.saver.last_checkpoints
    assert list(state.all_model_checkpoint_paths) == kept and state.model_checkpoint_path == kept[-1]
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("model")) == \
        sorted(os.path.basename(p) for p in kept)


@pytest.mark.parametrize("max_to_keep", [0, None])
async def test_max_to_keep_zero_keeps_files_and_lists_only_the_newest(server, tmp_path, max_to_keep):
    model = Model(max_to_keep=max_to_keep)
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        for step in range(3):
            last = await model.saver.save(sess, str(tmp_path / "model"), global_step=step)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith("model")) == \
        ["model-0", "model-1", "model-2"]
    state = state_file.get_checkpoint_state(str(tmp_path))
    assert state.all_model_checkpoint_paths == (last,) and model.saver.last_checkpoints == []


async def test_checkpoint_files_follow_the_umask(server, tmp_path):
    mask = os.umask(0o022)
    try:
        model = Model()
        async with dt.Session(server.target, graph=model.graph) as sess:
            await sess.run(model.init)
            path = await model.saver.save(sess, str(tmp_path / "model"))
    finally:
        os.umask(mask)
    for name in (path, str(tmp_path / "checkpoint")):
        assert os.stat(name).st_mode & 0o777 == 0o644, name


async def test_an_unwritable_folder_is_a_typed_error(server, tmp_path):
    model = Model()
    os.mkdir(tmp_path / "model")   # the checkpoint's own path is a folder
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        with pytest.raises(dt.errors.OpError, match="could not write checkpoint"):
            await model.saver.save(sess, str(tmp_path / "model"))
    assert os.listdir(tmp_path) == ["model"]   # no temporary file left


# -- TF 1.x compatibility ---------------------------------------------------------------

async def test_a_checkpoint_named_like_the_state_file_is_refused(server, tmp_path):
    # TF: "'latest_filename' collides with 'save_path'" (a ValueError); before, the
    # checkpoint overwrote the state file and the state file then the checkpoint
    model = Model()
    async with dt.Session(server.target, graph=model.graph) as sess:
        await sess.run(model.init)
        good = await model.saver.save(sess, str(tmp_path / "model"))
        with pytest.raises(ValueError, match="collides with"):
            await model.saver.save(sess, str(tmp_path / "checkpoint"))
        with pytest.raises(InvalidArgumentError, match="collides with"):
            await model.saver.save(sess, str(tmp_path / "state"), latest_filename="state")
        # with a global step the file is checkpoint-<step>: no collision (TF)
        numbered = await model.saver.save(sess, str(tmp_path / "checkpoint"), global_step=3)
    assert numbered == str(tmp_path / "checkpoint-3")
    assert latest_checkpoint(str(tmp_path)) == numbered
    assert state_file.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == (
        good, numbered)


def test_one_variable_under_two_names_is_refused():
    # TF: "The same saveable will be restored with two names" (a ValueError)
    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(1.0, name="v")
        w = dt.Variable(2.0, name="w")
        with pytest.raises(ValueError, match=r"specified more than once.*'a'.*'b'"):
            Saver({"a": v, "b": v})
        with pytest.raises(InvalidArgumentError, match="two names"):
            Saver({"a": v, "b": w, "c": v})
        assert set(Saver({"a": v, "b": w}).var_list) == {"a", "b"}


async def test_an_empty_saver_saves_and_restores_nothing(server, tmp_path):
    # TF: Saver(allow_empty=True) without variables builds; save returns None
    # and writes nothing, restore does nothing (even with save_path=None)
    g = dt.Graph()
    with g.as_default():
        saver = Saver(allow_empty=True)
        with pytest.raises(ValueError, match="no variables"):
            Saver()
    async with dt.Session(server.target, graph=g) as sess:
        assert await saver.save(sess, str(tmp_path / "model"), global_step=4) is None
        await saver.restore(sess, str(tmp_path / "model-4"))
        await saver.restore(sess, None)
        with pytest.raises(ValueError, match="collides with"):   # checked first, as in TF
            await saver.save(sess, str(tmp_path / "checkpoint"))
    assert os.listdir(tmp_path) == []


async def test_a_global_step_of_shape_one_numbers_the_checkpoints(server, tmp_path):
    # TF's Saver.save takes int(sess.run(global_step)): a one-element step counts
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable(np.ones(2, np.float32), name="w")
        gs = dt.Variable(np.array([7], np.int64), trainable=False, name="global_step")
        init = dt.global_variables_initializer()
        saver = Saver()
    async with dt.Session(server.target, graph=g) as sess:
        await sess.run(init)
        path = await saver.save(sess, str(tmp_path / "model"), global_step=gs)
        assert path == str(tmp_path / "model-7")
        assert await saver.save(sess, str(tmp_path / "model"),
                                global_step=np.array([9])) == str(tmp_path / "model-9")
        with pytest.raises(InvalidArgumentError, match="one integer"):
            await saver.save(sess, str(tmp_path / "model"), global_step=w)
    np.testing.assert_array_equal(file_format.read_checkpoint(path)["global_step"], [7])
