"""Optimizers and the global step: TF1 update rules against numpy, slot placement, minimize.

Steps run in-process with ``local_eval.evaluate`` (a private VariableStore per
test), which runs the same stateful ops and update kernels a worker does.
"""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate
from distrib.train.optimizers.adagrad import AdagradOptimizer
from distrib.train.optimizers.adam import AdamOptimizer
from distrib.train.optimizers.global_step import (
    create_global_step,
    get_global_step,
    get_or_create_global_step,
)
from distrib.train.optimizers.gradient_descent import GradientDescentOptimizer
from distrib.train.optimizers.momentum import MomentumOptimizer
from distrib.train.optimizers.optimizer import Optimizer

W0 = np.array([[1.0, -2.0], [0.5, 3.0]])
GRADS = [np.array([[0.1, -0.2], [0.3, 0.4]]), np.array([[-0.5, 0.25], [1.0, -1.0]]),
         np.array([[0.05, 0.0], [-0.3, 2.0]])]


class Stepper:
    """A float64 variable ``w``, a fed gradient, and ``opt``'s train op, run step by step."""

    def __init__(self, opt: Optimizer, graph: dt.Graph | None = None) -> None:
        self.graph = graph or dt.Graph()
        self.store = VariableStore()
        with self.graph.as_default():
            self.w = dt.Variable(W0, name="w")
            self.grad = dt.placeholder(dt.float64, shape=[2, 2], name="grad")
            self.train = opt.apply_gradients([(self.grad, self.w)])
            self.run(dt.global_variables_initializer())

    def run(self, fetches, feed_dict=None):
        return evaluate(fetches, feed_dict, graph=self.graph, variables=self.store)

    def steps(self, grads=GRADS) -> list[np.ndarray]:
        out = []
        for g in grads:
            self.run(self.train, {self.grad: g})
            out.append(self.run(self.w))
        return out


def check_steps(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want), 1):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"step {step}")


def test_gradient_descent_first_steps_follow_the_rule():
    got = Stepper(GradientDescentOptimizer(0.1)).steps()
    w, want = W0.copy(), []
    for g in GRADS:
        w = w - 0.1 * g
        want.append(w)
    check_steps(got, want)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_first_steps_follow_the_rule(nesterov):
    opt = MomentumOptimizer(0.05, 0.9, use_nesterov=nesterov)
    got = Stepper(opt).steps()
    w, accum, want = W0.copy(), np.zeros_like(W0), []
    for g in GRADS:
        accum = 0.9 * accum + g
        w = w - (0.05 * g + 0.05 * 0.9 * accum if nesterov else 0.05 * accum)
        want.append(w)
    check_steps(got, want)


def test_adagrad_first_steps_follow_the_rule():
    opt = AdagradOptimizer(0.2, initial_accumulator_value=0.3)
    stepper = Stepper(opt)
    np.testing.assert_allclose(stepper.run(opt.get_slot(stepper.w, "accumulator")),
                               np.full((2, 2), 0.3))
    got = stepper.steps()
    w, accum, want = W0.copy(), np.full_like(W0, 0.3), []
    for g in GRADS:
        accum = accum + g * g
        w = w - 0.2 * g / np.sqrt(accum)
        want.append(w)
    check_steps(got, want)


def adam_reference(lr, b1, b2, eps) -> list[np.ndarray]:
    w, m, v, want = W0.copy(), np.zeros_like(W0), np.zeros_like(W0), []
    for t, g in enumerate(GRADS, 1):
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr_t * m / (np.sqrt(v) + eps)
        want.append(w)
    return want


def test_adam_first_steps_follow_the_rule_and_advance_beta_powers():
    opt = AdamOptimizer(0.01, beta1=0.8, beta2=0.99, epsilon=1e-7)
    stepper = Stepper(opt)
    check_steps(stepper.steps(), adam_reference(0.01, 0.8, 0.99, 1e-7))
    with stepper.graph.as_default():   # variables() lists the default graph's (TF)
        names = {v.op.name: v for v in opt.variables()}
    assert set(names) == {"beta1_power", "beta2_power", "w/Adam", "w/Adam_1"}
    b1p, b2p = stepper.run([names["beta1_power"], names["beta2_power"]])
    np.testing.assert_allclose([b1p, b2p], [0.8 ** 4, 0.99 ** 4], rtol=1e-12)


def test_adam_accepts_lr_alias():
    check_steps(Stepper(AdamOptimizer(lr=0.02)).steps(), adam_reference(0.02, 0.9, 0.999, 1e-8))


def test_learning_rate_may_be_a_tensor_of_another_dtype():
    graph = dt.Graph()
    with graph.as_default():
        lr = dt.placeholder(dt.float32, shape=[], name="lr")  # cast to the variable's float64
    stepper = Stepper(GradientDescentOptimizer(lr), graph=graph)
    for g in GRADS:
        stepper.run(stepper.train, {stepper.grad: g, lr: 0.25})
    want = W0 - np.float64(np.float32(0.25)) * sum(GRADS)
    np.testing.assert_allclose(stepper.run(stepper.w), want, rtol=1e-12)


def test_slots_and_update_ops_are_colocated_with_their_variable():
    graph = dt.Graph()
    with graph.as_default():
        with dt.device("/job:ps/task:1"):
            w = dt.Variable(np.zeros([3]), name="w")
        with dt.device("/job:ps/task:0"):
            b = dt.Variable(np.zeros([3]), name="b")
        with dt.device("/job:worker/task:0"):
            loss = dt.reduce_sum(dt.square(w - 1.0)) + dt.reduce_sum(b * b)
            opt = AdamOptimizer(0.1)
            train = opt.minimize(loss)
    for var in (w, b):
        for slot_name in ("m", "v"):
            slot = opt.get_slot(var, slot_name)
            assert slot.device == var.device
            assert not slot.trainable and slot in graph.get_collection(dt.GraphKeys.GLOBAL_VARIABLES)
        updates = [op for op in graph.get_operations()
                   if op.type == "ApplyAdam" and op.get_attr("var") == var.shared_name]
        assert len(updates) == 1 and updates[0].device == var.device
        assert updates[0].get_attr("m") == opt.get_slot(var, "m").shared_name
    assert opt.get_slot(w, "m").op.name == "w/Adam" and opt.get_slot(w, "v").op.name == "w/Adam_1"
    # beta powers live beside the first variable by name ("b"), on ps task 0
    with graph.as_default():
        powers = [v for v in opt.variables() if v.op.name.startswith("beta")]
    assert [p.device for p in powers] == [b.device, b.device]
    assert opt.get_slot_names() == ["m", "v"]
    assert train.type == "NoOp"


def test_momentum_slot_name_and_placement_under_replica_device_setter():
    cluster = dt.ClusterSpec({"ps": ["localhost:1", "localhost:2"], "worker": ["localhost:3"]})
    graph = dt.Graph()
    with graph.as_default(), dt.device(dt.train.replica_device_setter(cluster=cluster)):
        w = dt.Variable(np.ones([2]), name="w")
        v = dt.Variable(np.ones([2]), name="v")
        gs = get_or_create_global_step()
        opt = MomentumOptimizer(0.1, 0.9)
        opt.minimize(dt.reduce_sum(w * v), global_step=gs)
    assert {w.device, v.device} == {"/job:ps/task:0", "/job:ps/task:1"}
    assert gs.device.startswith("/job:ps")
    for var in (w, v):
        slot = opt.get_slot(var, "momentum")
        assert slot.op.name == var.op.name + "/Momentum" and slot.device == var.device
    applies = [op for op in graph.get_operations() if op.type == "ApplyMomentum"]
    assert sorted(op.device for op in applies) == sorted([w.device, v.device])


def test_global_step_increments_once_per_minimize_step_after_the_updates():
    graph, store = dt.Graph(), VariableStore()
    with graph.as_default():
        w = dt.Variable(np.array([4.0]), name="w")
        gs = get_or_create_global_step()
        train = GradientDescentOptimizer(0.1).minimize(dt.reduce_sum(w * w), global_step=gs)
        evaluate(dt.global_variables_initializer(), graph=graph, variables=store)
    assert train.type == "AssignAdd" and train.name == "GradientDescent"
    assert any(c.name == "GradientDescent/update" for c in train.control_inputs)
    assert train in graph.get_collection(dt.GraphKeys.TRAIN_OP)
    for step in range(1, 4):
        evaluate(train, graph=graph, variables=store)
        assert evaluate(gs, graph=graph, variables=store) == step
    np.testing.assert_allclose(evaluate(w, graph=graph, variables=store), [4.0 * 0.8 ** 3])


def test_minimize_reduces_a_quadratic_loss():
    graph, store = dt.Graph(), VariableStore()
    target = np.array([[1.0, -1.0], [2.0, 0.5]])
    with graph.as_default():
        x = dt.Variable(np.zeros((2, 2)), name="x")
        loss = dt.reduce_mean(dt.square(x - target))
        train = AdamOptimizer(0.1).minimize(loss)
        evaluate(dt.global_variables_initializer(), graph=graph, variables=store)
    losses = []
    for _ in range(60):
        evaluate(train, graph=graph, variables=store)
        losses.append(evaluate(loss, graph=graph, variables=store))
    assert losses[-1] < 0.05 * losses[0]
    np.testing.assert_allclose(evaluate(x, graph=graph, variables=store), target, atol=0.25)


def test_compute_gradients_keeps_none_for_unconnected_variables():
    graph = dt.Graph()
    with graph.as_default():
        used = dt.Variable(np.array([1.0, 2.0]), name="used")
        unused = dt.Variable(np.array([3.0]), name="unused")
        frozen = dt.Variable(np.array([5.0]), name="frozen", trainable=False)
        loss = dt.reduce_sum(used * used) + dt.reduce_sum(frozen)
        opt = GradientDescentOptimizer(0.5)
        pairs = opt.compute_gradients(loss)
        assert [v for _, v in pairs] == [used, unused]  # trainable variables only, in order
        assert pairs[0][0] is not None and pairs[1][0] is None
        train = opt.apply_gradients(pairs)  # the None gradient is skipped, like TF
        init = dt.global_variables_initializer()
    updated = [op.get_attr("var") for op in graph.get_operations() if op.type == "ApplyGradientDescent"]
    assert updated == [used.shared_name]
    store = VariableStore()
    evaluate(init, graph=graph, variables=store)
    evaluate(train, graph=graph, variables=store)
    np.testing.assert_allclose(evaluate(used, graph=graph, variables=store), [0.0, 0.0])


def test_bad_arguments_raise_typed_errors_that_are_also_value_errors():
    graph = dt.Graph()
    with graph.as_default():
        w = dt.Variable(np.array([1.0]), name="w")
        other = dt.Variable(np.array([1.0]), name="other")
        opt = GradientDescentOptimizer(0.1)
        with pytest.raises(ValueError, match="No variables provided"):
            opt.apply_gradients([])
        with pytest.raises(InvalidArgumentError, match="No gradients provided"):
            opt.apply_gradients([(None, w)])
        with pytest.raises(ValueError, match="No gradients provided"):
            opt.minimize(dt.reduce_sum(other * 2.0), var_list=[w])
        with pytest.raises(InvalidArgumentError, match="dtype"):
            opt.apply_gradients([(dt.constant([1.0], dtype=dt.float32), w)])
        with pytest.raises(InvalidArgumentError, match="not a dt.Variable"):
            opt.apply_gradients([(dt.constant([1.0]), dt.constant([2.0]))])
    with pytest.raises(ValueError, match="positive"):
        AdagradOptimizer(0.1, initial_accumulator_value=0.0)


def test_global_step_helpers_follow_tf1():
    graph = dt.Graph()
    assert get_global_step(graph) is None
    with graph.as_default(), dt.name_scope("outer"), dt.device("/job:ps/task:0"):
        gs = create_global_step()
    assert gs.op.name == "global_step" and gs.device == "/job:ps/task:0"
    assert gs.dtype == dt.int64 and gs.shape.as_list() == [] and not gs.trainable
    assert graph.get_collection(dt.GraphKeys.GLOBAL_STEP) == [gs]
    assert get_global_step(graph) is gs and get_or_create_global_step(graph) is gs
    with pytest.raises(ValueError, match="already exists"):
        create_global_step(graph)
    store = VariableStore()
    with graph.as_default():
        init = dt.global_variables_initializer()
    evaluate(init, graph=graph, variables=store)
    assert evaluate(gs, graph=graph, variables=store) == 0


def test_a_global_step_made_by_name_is_counted():
    # the TF1 idiom: Variable(0, name="global_step", trainable=False), in no
    # GLOBAL_STEP collection; get_global_step finds the variable itself
    graph, store = dt.Graph(), VariableStore()
    with graph.as_default():
        made = dt.Variable(0, name="global_step", trainable=False, dtype=dt.int64)
        gs = get_or_create_global_step()
        assert gs is made
        w = dt.Variable(np.array([1.0, 2.0]), name="w")
        train = GradientDescentOptimizer(0.1).minimize(dt.reduce_sum(w * w), global_step=gs)
        init = dt.global_variables_initializer()
    evaluate(init, graph=graph, variables=store)
    evaluate(train, graph=graph, variables=store)
    evaluate(train, graph=graph, variables=store)
    assert evaluate(gs, graph=graph, variables=store) == 2


def test_variables_lists_only_those_of_the_current_default_graph():
    # TF's Optimizer.variables(): slots and non-slot variables "in the current
    # default graph"; one optimizer applied in two graphs (two replicas' graphs)
    opt = AdamOptimizer(0.1)
    graphs = [dt.Graph(), dt.Graph()]
    for graph in graphs:
        with graph.as_default():
            w = dt.Variable(np.ones(2), name="w")
            opt.minimize(dt.reduce_sum(w * w))
    for graph in graphs:
        with graph.as_default():
            found = opt.variables()
        assert [v.op.name for v in found] == ["beta1_power", "beta2_power", "w/Adam", "w/Adam_1"]
        assert all(v.graph is graph for v in found)
    with dt.Graph().as_default():
        assert opt.variables() == []


def test_get_global_step_wants_a_scalar_but_the_supervisor_finds_a_step_of_shape_one():
    # TF: training_util.get_global_step refuses a fully defined non-scalar
    # (TypeError), while the Supervisor takes the GLOBAL_STEP collection's first
    # ("an integer Tensor of size 1"), and Saver.save names files by its value
    from distrib.train.optimizers.global_step import find_global_step
    graph = dt.Graph()
    with graph.as_default():
        gs = dt.Variable(np.array([0], np.int64), trainable=False, name="global_step",
                         collections=[dt.GraphKeys.GLOBAL_VARIABLES, dt.GraphKeys.GLOBAL_STEP])
        with pytest.raises(TypeError, match="not a scalar"):
            get_or_create_global_step()
    assert find_global_step(graph) is gs
    with dt.Graph().as_default() as other:
        dt.Variable(0.5, name="global_step")   # not an integer: no global step
    assert find_global_step(other) is None and find_global_step(dt.Graph()) is None


@pytest.mark.parametrize("cls, kwargs", [
    (GradientDescentOptimizer, {"learning_rate": 0.05}),
    (MomentumOptimizer, {"learning_rate": 0.05, "momentum": 0.8}),
    (AdamOptimizer, {"learning_rate": 0.05, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}),
])
def test_hyper_parameters_may_be_callables(cls, kwargs):
    # TF 1.15 calls a callable hyper-parameter when it builds the update
    called = {k: (lambda v=v: v) for k, v in kwargs.items()}
    check_steps(Stepper(cls(**called)).steps(), Stepper(cls(**kwargs)).steps())


@pytest.mark.parametrize("blas", [True, False])
def test_sgd_written_into_a_new_array_has_the_bits_of_the_in_place_rule(blas, monkeypatch):
    from kernels.cpu import update as cpu_update
    from kernels.cpu.update import gradient_descent_into
    if not blas:   # numpy's rule on both paths
        monkeypatch.setattr(cpu_update, "_axpy_by_dtype", None)
    rng = np.random.default_rng(3)
    var = rng.standard_normal(10_000).astype(np.float32)
    grad = rng.standard_normal(10_000).astype(np.float32)
    lr = np.float32(0.037)
    same = var.copy()
    want = gradient_descent_into(same, same, lr, grad)                # in place
    # (within an ulp of numpy's two roundings: the BLAS's axpy may fuse them)
    np.testing.assert_allclose(want, var - lr * grad, rtol=2e-7, atol=2e-7 * np.abs(var).max())
    out = gradient_descent_into(np.empty_like(var), var, lr, grad)   # out of place
    np.testing.assert_array_equal(out, want)
    # the gradient itself as the new storage: still the rule, not its own overwrite
    g2 = grad.copy()
    np.testing.assert_array_equal(gradient_descent_into(g2, var, lr, g2), want)
    # a storage that is the variable's memory under another array object
    v2 = var.copy()
    np.testing.assert_array_equal(gradient_descent_into(v2[:], v2, lr, grad), want)


def _scalar_reference(name: str, grads: list[float]) -> list[float]:
    """TF1's update rules (training_ops.cc) on a 0-d variable, step by step, in numpy."""
    w, s1, s2, s3, want = 1.5, 0.0, 0.0, 0.0, []
    if name in ("rmsprop", "centered"):
        s1 = 1.0                                   # TF1 starts ``ms`` at ones
    if name == "adagrad":
        s1 = 0.1                                   # initial_accumulator_value
    for t, g in enumerate(grads, 1):
        if name == "sgd":
            w -= 0.1 * g
        elif name in ("momentum", "nesterov"):
            s1 = 0.9 * s1 + g
            w -= 0.1 * g + 0.1 * 0.9 * s1 if name == "nesterov" else 0.1 * s1
        elif name == "adagrad":
            s1 += g * g
            w -= 0.1 * g / np.sqrt(s1)
        elif name == "adam":
            lr_t = 0.1 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            s1, s2 = 0.9 * s1 + 0.1 * g, 0.999 * s2 + 0.001 * g * g
            w -= lr_t * s1 / (np.sqrt(s2) + 1e-8)
        else:                                      # rmsprop, centered (momentum 0.5)
            s1 += (g * g - s1) * 0.1
            denom = s1 + 1e-10
            if name == "centered":
                s2 += (g - s2) * 0.1
                denom = s1 - s2 * s2 + 1e-10
            s3 = 0.5 * s3 + 0.1 * g / np.sqrt(denom)
            w -= s3
        want.append(w)
    return want


@pytest.mark.parametrize("name", ["sgd", "momentum", "nesterov", "adagrad", "adam", "rmsprop",
                                  "centered"])
def test_every_tf1_optimizer_updates_a_scalar_variable_by_its_rule(name):
    # issue 36: RMSProp's CPU kernel wrote into ``ms + eps``, which numpy makes a
    # scalar (not an array) for a 0-d variable: "return arrays must be of ArrayType"
    opt = {"sgd": lambda: GradientDescentOptimizer(0.1),
           "momentum": lambda: MomentumOptimizer(0.1, 0.9),
           "nesterov": lambda: MomentumOptimizer(0.1, 0.9, use_nesterov=True),
           "adagrad": lambda: AdagradOptimizer(0.1, initial_accumulator_value=0.1),
           "adam": lambda: AdamOptimizer(0.1),
           "rmsprop": lambda: dt.train.RMSPropOptimizer(0.1, momentum=0.5),
           "centered": lambda: dt.train.RMSPropOptimizer(0.1, momentum=0.5, centered=True),
           }[name]()
    graph, store = dt.Graph(), VariableStore()
    with graph.as_default():
        w = dt.Variable(np.float64(1.5), name="w")
        train = opt.minimize(dt.square(w) * 0.5)   # d/dw = w: the gradient is the value
        evaluate(dt.global_variables_initializer(), graph=graph, variables=store)
    got, grads = [], []
    for _ in range(3):
        grads.append(float(evaluate(w, graph=graph, variables=store)))
        evaluate(train, graph=graph, variables=store)
        got.append(evaluate(w, graph=graph, variables=store))
    assert all(np.shape(v) == () for v in got)
    np.testing.assert_allclose(got, _scalar_reference(name, grads), rtol=1e-12)
