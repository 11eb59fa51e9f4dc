"""dt.train.Checkpoint, object-based as TF2's (checkpoint.py, checkpoint_test.py):
values keyed by object paths, numbered saves from a save_counter variable,
write/read without numbering, the load status' assertions and the warning for
what did not match, restoration deferred until a variable is made, and the
files in distrib's format, readable by load_checkpoint / list_variables (a
Saver's too), a corrupt one a DataLossError.

Steps run on this process's local server (real sockets, loopback)."""
from __future__ import annotations

import asyncio
import gc
import logging
import os

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import def_function
from distrib.errors import DataLossError, InvalidArgumentError, NotFoundError
from distrib.train.checkpoints import state_file, trackable

keras = dt.keras
BOUND_S = 60


@pytest.fixture(autouse=True)
async def fresh():
    dt.reset_default_graph()
    keras.backend.clear_session()
    async with asyncio.timeout(BOUND_S):
        yield
    await def_function.close_sessions()
    dt.reset_default_graph()


class Obj:
    """A user object in a checkpoint (TF's AutoTrackable): its trackable attributes."""

    def trackable_children(self) -> dict:
        return {k: v for k, v in vars(self).items() if trackable.is_trackable(v)}


async def value(v):
    return await dt.function(lambda: v.read_value())()


async def assign(v, x):
    await dt.function(lambda: v.assign(x, read_value=False))()


def var(x, name=None, dtype=np.float32):
    return dt.Variable(np.asarray(x, dtype), name=name)


# -- save / write / read / restore -----------------------------------------------------------

async def test_save_numbers_files_by_save_counter_and_names_the_newest_in_the_state_file(tmp_path):
    """TF: save() increments save_counter and writes prefix-<n>; the state file
    names that checkpoint only; save_counter is a real int64 variable."""
    v = var([1.0, 2.0])
    ckpt = dt.train.Checkpoint(v=v)
    prefix = str(tmp_path / "ckpt")
    first = await ckpt.save(prefix)
    await assign(v, [3.0, 4.0])
    second = await ckpt.save(prefix)
    assert (first, second) == (prefix + "-1", prefix + "-2")
    assert dt.train.latest_checkpoint(str(tmp_path)) == second
    state = dt.train.get_checkpoint_state(str(tmp_path))
    assert state.all_model_checkpoint_paths == (second,)
    assert isinstance(ckpt.save_counter, dt.Variable) and ckpt.save_counter.dtype == dt.int64
    assert int(await value(ckpt.save_counter)) == 2
    assert dt.train.list_variables(str(tmp_path)) == [
        ("_CHECKPOINTABLE_OBJECT_GRAPH", []),
        ("save_counter/.ATTRIBUTES/VARIABLE_VALUE", []),
        ("v/.ATTRIBUTES/VARIABLE_VALUE", [2])]
    reader = dt.train.load_checkpoint(first)
    np.testing.assert_array_equal(reader.get_tensor("v/.ATTRIBUTES/VARIABLE_VALUE"), [1.0, 2.0])
    assert reader.get_variable_to_dtype_map()["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] == dt.int64


async def test_restore_matches_objects_by_path_whatever_their_names(tmp_path):
    """TF: a second program that builds the same objects restores them; the
    variables' own names play no part, save_counter is restored and numbering
    continues from it."""
    model = Obj()
    model.dense = Obj()
    model.dense.kernel = var(np.arange(6).reshape(2, 3), name="first_name")
    step = dt.Variable(np.int64(7), name="step")
    path = await dt.train.Checkpoint(model=model, step=step).save(str(tmp_path / "ckpt"))

    dt.reset_default_graph()
    again = Obj()
    again.dense = Obj()
    again.dense.kernel = var(np.zeros((2, 3)), name="another/name")
    step2 = dt.Variable(np.int64(0))
    ckpt = dt.train.Checkpoint(model=again, step=step2)
    status = await ckpt.restore(path)
    status.assert_consumed().assert_existing_objects_matched().assert_nontrivial_match()
    np.testing.assert_array_equal(await value(again.dense.kernel), np.arange(6).reshape(2, 3))
    assert int(await value(step2)) == 7
    assert await ckpt.save(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt-2")


async def test_write_and_read_leave_the_counter_and_the_state_file_alone(tmp_path):
    """TF: write() neither numbers nor updates the state file nor makes save_counter;
    read() of its file is consumed, restore() of it is not (restore makes
    save_counter, which the file lacks)."""
    v = var(5.0)
    ckpt = dt.train.Checkpoint(v=v)
    path = await ckpt.write(str(tmp_path / "weights"))
    assert path == str(tmp_path / "weights")
    assert sorted(os.listdir(tmp_path)) == ["weights"]
    keys = dict(dt.train.list_variables(path))
    assert "save_counter/.ATTRIBUTES/VARIABLE_VALUE" not in keys

    target = dt.train.Checkpoint(v=var(0.0))
    (await target.read(path)).assert_consumed()
    assert float(await value(target.v)) == 5.0
    other = dt.train.Checkpoint(v=var(0.0))
    status = await other.restore(path)
    with pytest.raises(AssertionError, match="save_counter"):
        status.assert_existing_objects_matched()


async def test_custom_numbering_with_write(tmp_path):
    """TF testCustomNumbering: write(f"{prefix}-{step}") numbers as the caller says."""
    step = dt.Variable(np.int64(0))
    ckpt = dt.train.Checkpoint(step=step)
    prefix = str(tmp_path / "ckpt")
    for i in range(3):
        path = await ckpt.write(f"{prefix}-{int(await value(step))}")
        assert path.endswith(f"-{2 * i}")
        await assign(step, np.int64(2 * i + 2))


async def test_keys_escape_names_as_tf_does(tmp_path):
    """TF testVariableNameEscaping / testNumberedPath: '/' -> '.S', '.' -> '..'."""
    root = Obj()
    leaf = Obj()
    setattr(leaf, "a/b/c", var(1.0))
    setattr(leaf, "d/.S", var(2.0))
    root.leaf = leaf
    path = await dt.train.Checkpoint(root=root).write(str(tmp_path / "w"))
    keys = {k for k, _ in dt.train.list_variables(path)}
    assert "leaf/a.Sb.Sc/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert "leaf/d.S..S/.ATTRIBUTES/VARIABLE_VALUE" in keys


async def test_restore_none_initializes_only():
    """TF's InitializationOnlyStatus: every assertion fails, initialize_or_restore
    does nothing (variables start from their initial values on first use)."""
    v = var(3.0)
    status = await dt.train.Checkpoint(v=v).restore(None)
    for check in (status.assert_consumed, status.assert_existing_objects_matched,
                  status.assert_nontrivial_match):
        with pytest.raises(AssertionError, match="No checkpoint specified"):
            check()
    await status.initialize_or_restore()
    assert float(await value(v)) == 3.0


def test_checkpoint_takes_trackable_objects_only():
    with pytest.raises(ValueError, match="expecting a trackable object"):
        dt.train.Checkpoint(v=3.0)
    ckpt = dt.train.Checkpoint()
    with pytest.raises(AttributeError, match="save_counter"):
        ckpt.save_counter = var(1.0)


# -- what did not match ----------------------------------------------------------------------

async def saved_pair(tmp_path) -> str:
    original = dt.train.Checkpoint(v1=var(2.0), v2=var(3.0))
    return await original.save(str(tmp_path / "ckpt"))


async def test_partial_restores_name_what_did_not_match(tmp_path):
    """TF testAttributeException and assert_existing_objects_matched: each
    error names the object paths that did not match."""
    path = await saved_pair(tmp_path)
    fewer = dt.train.Checkpoint(v2=var(0.0))
    status = await fewer.restore(path)
    assert float(await value(fewer.v2)) == 3.0
    status.assert_existing_objects_matched()          # every live object has its value
    with pytest.raises(AssertionError, match=r"\(root\)\.v1"):
        status.assert_consumed()                      # the file's v1 found no object
    status.expect_partial()

    more = dt.train.Checkpoint(v1=var(0.0), v3=var(0.0))
    status = await more.restore(path)
    with pytest.raises(AssertionError, match=r"\(root\)\.v3"):
        status.assert_existing_objects_matched()
    status.expect_partial()

    not_a_variable = dt.train.Checkpoint(v1=Obj(), v2=var(0.0))
    status = await not_a_variable.restore(path)
    with pytest.raises(AssertionError, match=r"Unused attributes(.|\n)*\(root\)\.v1"):
        status.assert_consumed()
    status.expect_partial()


async def test_unmatched_values_are_warned_when_dropped_unless_expect_partial(tmp_path, caplog):
    """TF testPartialRestoreWarningAttribute / testSilencePartialWarning: values
    left unmatched are logged when the restore goes away, naming them, and
    expect_partial() silences it."""
    path = await saved_pair(tmp_path)
    caplog.set_level(logging.WARNING, logger="distrib.train.checkpoints.restore_status")
    partial = dt.train.Checkpoint(v2=var(0.0))
    await partial.restore(path)
    del partial
    gc.collect()
    assert "(root).v1" in caplog.text and "(root).v2" not in caplog.text
    assert "expect_partial()" in caplog.text

    caplog.clear()
    quiet = dt.train.Checkpoint(v2=var(0.0))
    (await quiet.restore(path)).expect_partial()
    del quiet
    gc.collect()
    assert caplog.text == ""


async def test_one_saved_object_into_two_live_ones_fails_the_assertions(tmp_path):
    """TF testAmbiguousLoad: a shared dependency loaded into two objects."""
    shared = Obj()
    shared.var = var(0.0)
    root = Obj()
    root.one, root.two = Obj(), Obj()
    root.one.shared = shared
    root.two.shared = shared
    path = await dt.train.Checkpoint(root=root).save(str(tmp_path / "ckpt"))

    load = Obj()
    load.one, load.two = Obj(), Obj()
    load.one.shared, load.two.shared = Obj(), Obj()
    load.one.shared.var, load.two.shared.var = var(1.0), var(1.0)
    status = await dt.train.Checkpoint(root=load).restore(path)
    with pytest.raises(AssertionError, match="more than one Python object"):
        status.assert_consumed()
    status.expect_partial()


async def test_nontrivial_match_needs_more_than_the_root(tmp_path):
    path = await saved_pair(tmp_path)
    status = await dt.train.Checkpoint(other=var(0.0)).read(path)
    with pytest.raises(AssertionError, match="Nothing except the root object matched"):
        status.assert_nontrivial_match()
    status.expect_partial()


# -- deferred restoration --------------------------------------------------------------------

async def test_an_object_attached_after_restore_is_matched_then(tmp_path):
    """TF testLateDependencyTracking / testRestoreOnAssign: assert_consumed fails
    until the object exists; attached later, it is bound, and
    run_restore_ops assigns its value."""
    saved = dt.train.Checkpoint()
    saved.dep = Obj()
    saved.dep.var = var(123.0)
    path = await saved.save(str(tmp_path / "ckpt"))

    load = dt.train.Checkpoint()
    status = await load.restore(path)
    status.assert_existing_objects_matched()
    with pytest.raises(AssertionError, match=r"\(root\)\.dep\.var"):
        status.assert_consumed()
    load.dep = Obj()
    load.dep.var = var(0.0)
    await assign(load.dep.var, -2.0)
    status.assert_consumed()
    await status.run_restore_ops()
    assert float(await value(load.dep.var)) == 123.0


async def test_a_dependency_loop_saves_and_restores(tmp_path):
    """TF testDependencyLoop: two checkpoints that hold each other."""
    first, second = dt.train.Checkpoint(), dt.train.Checkpoint()
    first.second, second.first = second, first
    first.v, second.v = var([3.0, 1.0, 4.0]), var([1.0, 1.0, 2.0, 3.0])
    path = await first.save(str(tmp_path / "ckpt"))

    first_load, second_load = dt.train.Checkpoint(), dt.train.Checkpoint()
    status = await first_load.restore(path)
    first_load.second, second_load.first = second_load, first_load
    with pytest.raises(AssertionError):
        status.assert_consumed()
    first_load.v, second_load.v = var(np.zeros(3)), var(np.zeros(4))
    status.assert_consumed()
    await status.run_restore_ops()
    np.testing.assert_array_equal(await value(first_load.v), [3.0, 1.0, 4.0])
    np.testing.assert_array_equal(await value(second_load.v), [1.0, 1.0, 2.0, 3.0])


async def test_a_layer_built_after_restore_starts_from_the_checkpoint(tmp_path):
    """TF restore-on-create: a Keras model restored before it is built makes its
    weights from the checkpoint's values."""
    built = keras.Sequential([keras.layers.Dense(3, input_shape=(2,)), keras.layers.Dense(1)])
    path = await dt.train.Checkpoint(model=built).save(str(tmp_path / "ckpt"))
    expected = await built.get_weights()

    dt.reset_default_graph()
    later = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])
    status = await dt.train.Checkpoint(model=later).restore(path)
    status.assert_existing_objects_matched()          # nothing built yet: nothing unmatched
    with pytest.raises(AssertionError, match="layer-0.kernel|layer_with_weights-0.kernel"):
        status.assert_consumed()
    later.build((None, 2))
    status.assert_consumed()
    for got, want in zip(await later.get_weights(), expected):
        np.testing.assert_array_equal(got, want)


# -- the file ----------------------------------------------------------------------------------

async def test_a_corrupt_file_is_data_loss_and_a_missing_one_not_found(tmp_path):
    path = await dt.train.Checkpoint(v=var(np.arange(64))).save(str(tmp_path / "ckpt"))
    with open(path, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        byte = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))
    target = dt.train.Checkpoint(v=var(np.zeros(64)))
    with pytest.raises(DataLossError, match="ckpt-1"):
        await target.restore(path)
    with pytest.raises(DataLossError):
        # the flipped byte is in the last tensor: the object graph
        dt.train.load_checkpoint(path).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
    with open(path, "r+b") as f:
        f.truncate(40)
    with pytest.raises(DataLossError):
        dt.train.list_variables(path)
    with pytest.raises(NotFoundError, match="missing the checkpoint suffix"):
        await target.restore(str(tmp_path / "ckpt"))


async def test_a_shape_mismatch_names_the_object_and_key(tmp_path):
    path = await dt.train.Checkpoint(v=var([1.0, 2.0])).save(str(tmp_path / "ckpt"))
    with pytest.raises(InvalidArgumentError, match=r"\(root\)\.v.*v/\.ATTRIBUTES"):
        await dt.train.Checkpoint(v=var([0.0, 0.0, 0.0])).restore(path)


async def test_saver_files_are_listed_but_not_restored_by_a_checkpoint(tmp_path, server):
    """list_variables / load_checkpoint read a Saver's (name-based) files too;
    Checkpoint.restore refuses them, saying what to use."""
    w = var([[1.0, 2.0]], name="layer/w")
    async with dt.Session(server.target) as sess:
        await sess.run(w.initializer)
        path = await dt.train.Saver([w]).save(sess, str(tmp_path / "model"), global_step=3)
    assert dt.train.list_variables(str(tmp_path)) == [("layer/w", [1, 2])]
    reader = dt.train.load_checkpoint(path)
    assert reader.has_tensor("layer/w") and not reader.has_tensor("w")
    assert reader.get_variable_to_dtype_map() == {"layer/w": dt.float32}
    with pytest.raises(NotFoundError, match="not found"):
        reader.get_tensor("w")
    with pytest.raises(InvalidArgumentError, match="Saver"):
        await dt.train.Checkpoint(w=var([[0.0, 0.0]])).restore(path)


def test_the_state_file_keeps_tf_s_timestamps(tmp_path):
    state_file.update_checkpoint_state(str(tmp_path), str(tmp_path / "ckpt-2"),
                                        [str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2")],
                                        all_model_checkpoint_timestamps=[10.0, 20.5],
                                        last_preserved_timestamp=3.0)
    text = (tmp_path / "checkpoint").read_text()
    assert "all_model_checkpoint_timestamps: 10.0" in text
    state = dt.train.get_checkpoint_state(str(tmp_path))
    assert state.all_model_checkpoint_timestamps == (10.0, 20.5)
    assert state.last_preserved_timestamp == 3.0
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="Couldn't find"):
        dt.train.list_variables(str(tmp_path / "empty"))       # TF: a folder without one
    with pytest.raises(NotFoundError):
        dt.train.load_checkpoint(str(tmp_path / "nothing"))
