"""The TF1 names the CIFAR-10 tutorial reaches for beyond its model (issue 38,
item 6), each as TF has it: ``tf.expand_dims`` (``average_gradients``),
``tf.gfile.Exists``/``MakeDirs``/``DeleteRecursively``, a summary name
TF cleans (``'conv1/weight_loss (raw)'``: ``summary_op_util.clean_tag``),
``tf.Summary`` (the eval's ``ParseFromString`` and ``value.add``) and
``tf.train.NanTensorHook`` (``basic_session_run_hooks``: "NaN loss during
training.", or a stop with ``fail_on_nan_loss=False``).
"""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from distrib.runtime.step.local_eval import evaluate


def test_expand_dims_inserts_an_axis_of_one_as_tf(fresh_graph):
    x = dt.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    for axis, shape in ((0, (1, 2, 3)), (1, (2, 1, 3)), (2, (2, 3, 1)), (-1, (2, 3, 1)),
                        (-3, (1, 2, 3))):
        y = dt.expand_dims(x, axis)
        assert y.shape.as_list() == list(shape)
        np.testing.assert_array_equal(evaluate(y), np.arange(6).reshape(2, 3).reshape(shape))
    grad = dt.gradients(dt.reduce_sum(dt.expand_dims(x, 0) * 3.0), [x])[0]
    np.testing.assert_array_equal(evaluate(grad), np.full((2, 3), 3.0))
    with pytest.raises(dt.errors.InvalidArgumentError, match="axis 3 is out of range"):
        dt.expand_dims(x, 3)


def test_the_tutorials_average_gradients_stacks_and_means(fresh_graph):
    g0, g1 = dt.constant([[1.0, 2.0]]), dt.constant([[3.0, 6.0]])
    grad = dt.reduce_mean(dt.concat(axis=0, values=[dt.expand_dims(g0, 0),
                                                    dt.expand_dims(g1, 0)]), 0)
    assert grad.shape.as_list() == [1, 2]
    np.testing.assert_array_equal(evaluate(grad), [[2.0, 4.0]])


def test_tf1_gfile_names_are_the_io_gfile_functions(tmp_path):
    folder = str(tmp_path / "a" / "b")
    assert not dt.gfile.Exists(folder)
    dt.gfile.MakeDirs(folder)
    assert dt.gfile.Exists(folder) and dt.gfile.IsDirectory(folder)
    dt.gfile.DeleteRecursively(str(tmp_path / "a"))
    assert not dt.gfile.Exists(folder)
    assert dt.gfile.Exists is dt.io.gfile.exists and dt.gfile.MakeDirs is dt.io.gfile.makedirs
    with pytest.raises(dt.errors.NotFoundError):
        dt.gfile.DeleteRecursively(str(tmp_path / "a"))


def test_a_summary_name_with_spaces_is_cleaned_as_tf_does(fresh_graph):
    with dt.name_scope("tower_0"):
        s = dt.summary.scalar("conv1/weight_loss (raw)", dt.constant(1.5))
    assert s.op.name == "tower_0/conv1/weight_loss__raw_"
    summary = dt.Summary()
    summary.ParseFromString(np.asarray(evaluate(s)).item())   # a session returns the bytes
    assert [(v.tag, v.simple_value) for v in summary.value] == \
        [("tower_0/conv1/weight_loss__raw_", 1.5)]
    summary.value.add(tag="Precision @ 1", simple_value=0.25)   # cifar10_eval.py's line
    assert dt.Summary.FromString(summary.SerializeToString()).value[1].simple_value == 0.25


async def run_with_nan_hook(fail: bool) -> tuple[bool, BaseException | None]:
    loss = dt.placeholder(dt.float32, [], name="loss")
    step = dt.train.get_or_create_global_step()
    train = step.assign_add(1)
    hook = dt.train.NanTensorHook(loss, fail_on_nan_loss=fail)
    try:
        async with dt.train.MonitoredTrainingSession(hooks=[hook]) as sess:
            await sess.run(train, feed_dict={loss: 1.0})
            assert not sess.should_stop()
            await sess.run(train, feed_dict={loss: float("nan")})
            return sess.should_stop(), None
    except dt.train.NanLossDuringTrainingError as e:
        return False, e


async def test_nan_tensor_hook_fails_the_step_with_tfs_error(fresh_graph):
    stopped, error = await run_with_nan_hook(fail=True)
    assert isinstance(error, RuntimeError) and str(error) == "NaN loss during training."


async def test_nan_tensor_hook_asks_for_a_stop_when_told_not_to_fail(fresh_graph):
    stopped, error = await run_with_nan_hook(fail=False)
    assert stopped and error is None
