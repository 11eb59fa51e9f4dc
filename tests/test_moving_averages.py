"""``dt.train.ExponentialMovingAverage`` and ``assign_moving_average`` against
TF's own numbers (``training/moving_averages_test.py``: ``_CheckDecay``'s
written-out recurrences, 0.181818 for ``num_updates=1``, the 17.5 of the
control-dependency test, the names, the devices), and a float64 case that
pins TF's rounding (``1 - decay`` in float32 first).
"""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate
from distrib.train.optimizers.moving_averages import assign_moving_average


class Local:
    """The default graph run in this process with a private variable store."""

    def __init__(self) -> None:
        self.store = VariableStore()

    def __call__(self, fetches, feed_dict=None):
        return evaluate(fetches, feed_dict, variables=self.store)


def check_decay(ema: dt.train.ExponentialMovingAverage, dk: float, dim: int) -> None:
    """TF's ``_CheckDecay``: two variables and their sum, averaged twice."""
    rep = (lambda v: v) if dim == 1 else (lambda v: [v] * dim)
    run = Local()
    var0 = dt.Variable(rep(10.0), name="v0")
    var1 = dt.Variable(rep(30.0), name="v1")
    tensor2 = var0 + var1
    update = ema.apply([var0, var1, tensor2])
    avg0, avg1, avg2 = ema.average(var0), ema.average(var1), ema.average(tensor2)
    assert dt.train.moving_average_variables() == [var0, var1]
    assert not {avg0, avg1, avg2} & set(dt.trainable_variables())
    assert (avg0.name, avg1.name, avg2.name) == (
        "v0/ExponentialMovingAverage:0", "v1/ExponentialMovingAverage:0",
        "add/ExponentialMovingAverage:0")
    run(dt.global_variables_initializer())
    np.testing.assert_allclose(run([avg0, avg1, avg2]), [rep(10.0), rep(30.0), rep(0.0)])
    run(update)
    first = [10.0 * dk + 10.0 * (1 - dk), 30.0 * dk + 30.0 * (1 - dk), 0.0 * dk + 40.0 * (1 - dk)]
    np.testing.assert_allclose(run([avg0, avg1, avg2]), [rep(v) for v in first], rtol=1e-5)
    run(update)
    second = [first[0] * dk + 10.0 * (1 - dk), first[1] * dk + 30.0 * (1 - dk),
              first[2] * dk + 40.0 * (1 - dk)]
    np.testing.assert_allclose(run([avg0, avg1, avg2]), [rep(v) for v in second], rtol=1e-5)


@pytest.mark.parametrize("dim", [1, 5])
def test_averages_follow_tfs_recurrence(fresh_graph, dim):
    check_decay(dt.train.ExponentialMovingAverage(0.25), 0.25, dim)


@pytest.mark.parametrize("dim", [1, 5])
def test_num_updates_caps_the_decay_at_one_plus_n_over_ten_plus_n(fresh_graph, dim):
    # TF: "With num_updates 1, the decay applied is 0.1818"
    check_decay(dt.train.ExponentialMovingAverage(0.25, num_updates=1), 0.181818, dim)


def test_zero_debias_makes_a_tensors_average_unbiased(fresh_graph):
    run = Local()
    v0, v1 = dt.Variable(10.0, name="v0"), dt.Variable(30.0, name="v1")
    total = v0 + v1
    ema = dt.train.ExponentialMovingAverage(0.25, zero_debias=True)
    update = ema.apply([v0, total])
    run(dt.global_variables_initializer())
    for _ in range(2):   # biased (1 - .25)*40 then ..., each divided by 1 - .25^t: 40 exactly
        run(update)
        assert run(ema.average(total)) == pytest.approx(40.0, rel=1e-6)
    assert run(ema.average(v0)) == pytest.approx(10.0)   # variables are never debiased
    names = {v.op.name for v in dt.global_variables()}
    assert {"add/ExponentialMovingAverage/biased", "add/ExponentialMovingAverage/local_step"} <= names


def test_assign_moving_average_with_and_without_debiasing(fresh_graph):
    run = Local()
    var = dt.Variable([10.0, 11.0])
    plain = assign_moving_average(var, dt.constant([1.0, 2.0]), 0.25, zero_debias=False)
    zero = dt.Variable([0.0, 0.0])
    debiased = assign_moving_average(zero, dt.constant([1.0, 2.0]), 0.25)
    run(dt.global_variables_initializer())
    run([plain, debiased])
    np.testing.assert_allclose(run(var), [10.0 * 0.25 + 1.0 * 0.75, 11.0 * 0.25 + 2.0 * 0.75])
    np.testing.assert_allclose(run(zero), [1.0, 2.0], rtol=1e-6)


def test_a_float64_average_rounds_one_minus_decay_in_float32_as_tf(fresh_graph):
    run = Local()
    var = dt.Variable(np.float64(1.0), name="w")
    ema = dt.train.ExponentialMovingAverage(0.9999)
    update = ema.apply([var])
    run(dt.global_variables_initializer())
    run(var.assign(np.float64(2.0)))
    run(update)
    # TF: decay a float32 tensor, 1 - decay in float32, then cast to float64
    step = np.float64(np.float32(1.0) - np.float32(0.9999))
    assert run(ema.average(var)) == 1.0 - (1.0 - 2.0) * step
    assert 1.0 - (1.0 - 2.0) * step != 1.0 + (1.0 - 0.9999)


def test_the_average_ignores_the_control_dependencies_apply_is_called_under(fresh_graph):
    run = Local()
    v0 = dt.Variable(0, name="v0")
    add_to_v0 = v0.assign_add(1)
    v1 = dt.Variable([10.0], name="v1")
    assign_to_v1 = v1.assign([20.0])
    ema = dt.train.ExponentialMovingAverage(0.25)
    with dt.control_dependencies([add_to_v0]):
        ema_op = ema.apply([v1])
    v1_avg = ema.average(v1)
    assert not v1_avg.initializer.control_inputs and not v1_avg.op.control_inputs
    run(v1_avg.initializer)   # before v0's: it needs nothing of v0
    run(v0.initializer)
    assert run(v1_avg).tolist() == [10.0]
    run(assign_to_v1)
    run(ema_op)
    assert run(v0) == 1 and run(v1_avg).tolist() == [17.5]


def test_names_and_variables_to_restore_are_tfs(fresh_graph):
    v0 = dt.Variable(10.0, name="v0")
    v1 = dt.Variable(30.0, name="v1")
    v2 = dt.Variable(20.0, name="v2", trainable=False)
    tensor2 = v0 + v1
    ema = dt.train.ExponentialMovingAverage(0.25, name="foo_avg")
    assert [ema.average_name(v) for v in (v0, v1, tensor2)] == ["v0/foo_avg", "v1/foo_avg",
                                                                "add/foo_avg"]
    assert ema.average(v0) is None
    ema.apply([v0, v1, tensor2])
    restore = ema.variables_to_restore()
    assert sorted(restore) == ["add/foo_avg", "v0/foo_avg", "v1/foo_avg", "v2"]
    assert restore["v0/foo_avg"] is v0 and restore["v2"] is v2
    assert restore["add/foo_avg"] is ema.average(tensor2)
    for v in (v0, v1, tensor2):
        assert ema.average_name(v) == ema.average(v).op.name
    # a graph without the averages (an evaluation) finds the same names
    with dt.Graph().as_default():
        w = dt.Variable(1.0, name="v0")
        assert dt.train.ExponentialMovingAverage(0.25, name="foo_avg").variables_to_restore() \
            == {"v0/foo_avg": w}


def test_names_follow_the_variable_scope_apply_runs_in(fresh_graph):
    # TF's testAverageVariablesNamesRespectScope
    with dt.variable_scope("scope1"):
        v0 = dt.Variable(10.0, name="v0")
    with dt.variable_scope("scope2"):
        ema = dt.train.ExponentialMovingAverage(0.25, name="foo_avg")
        assert ema.average_name(v0) == "scope2/scope1/v0/foo_avg"
        ema.apply([v0])
        assert ema.average(v0).op.name == "scope2/scope1/v0/foo_avg"
    # a name scope alone (an optimizer's apply) leaves the shadow's name alone
    with dt.name_scope("sync_replicas"):
        ema2 = dt.train.ExponentialMovingAverage(0.25, name="bar_avg")
        ema2.apply([v0])
    assert ema2.average(v0).op.name == "scope1/v0/bar_avg"


def test_a_shadow_lives_beside_its_variable_and_a_tensors_where_apply_runs(fresh_graph):
    with dt.device("/job:dev_v0"):
        v0 = dt.Variable(10.0, name="v0")
    with dt.device("/job:dev_v1"):
        v1 = dt.Variable([1.0], name="v1")
    tensor2 = v0 + v1
    ema = dt.train.ExponentialMovingAverage(0.25, name="foo_avg")
    with dt.device("/job:default"):
        ema.apply([v0, v1, tensor2])
    assert "dev_v0" in ema.average(v0).device and "dev_v1" in ema.average(v1).device
    assert "default" in ema.average(tensor2).device


def test_only_floats_are_averaged(fresh_graph):
    with pytest.raises(TypeError, match="must be half, float, or double: n:0"):
        dt.train.ExponentialMovingAverage(0.5).apply([dt.Variable(1, name="n")])
