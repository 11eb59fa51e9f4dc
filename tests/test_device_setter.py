"""replica_device_setter placements, checked against TensorFlow 1.x's own test cases.

The ops are small stand-in values with ``.type`` and ``.device`` (and
``.outputs`` for the load function): the device setter's inputs, not a mock
of the graph layer. ``place`` does what a device scope does: it asks the
setter for the op's device given the device set so far.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from distrib.cluster.cluster_spec import ClusterSpec
from distrib.errors import InvalidArgumentError
from distrib.train.replicas.device_setter import (
    STANDARD_PS_OPS,
    GreedyLoadBalancingStrategy,
    byte_size_load_fn,
    replica_device_setter,
)

CLUSTER = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222", "w1:2222", "w2:2222"]}


def op(op_type: str, device: str = "", shape: list | None = None, dtype: object = np.float32,
       **extra: object) -> SimpleNamespace:
    outputs = [SimpleNamespace(shape=shape, dtype=dtype)] if shape is not None else []
    return SimpleNamespace(type=op_type, device=device, outputs=outputs, name=op_type, **extra)


def place(setter, op_type: str, device: str = "", **kw: object) -> str:
    return setter(op(op_type, device, **kw))


def test_no_ps_tasks_gives_none() -> None:
    assert replica_device_setter() is None
    assert replica_device_setter(ps_tasks=0) is None
    assert replica_device_setter(cluster={"worker": ["w:1"]}) is None
    assert replica_device_setter(cluster=ClusterSpec({})) is None


def test_variables_round_robin_over_two_ps_tasks() -> None:
    setter = replica_device_setter(cluster=ClusterSpec(CLUSTER))
    placed = [place(setter, "VariableV2") for _ in range(5)]
    assert placed == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    assert place(setter, "Add") == "/job:worker"


def test_round_robin_over_three_ps_tasks_with_cluster_dict() -> None:
    setter = replica_device_setter(cluster={"ps": ["a:1", "b:1", "c:1"], "worker": ["w:1"]})
    assert [place(setter, "VariableV2") for _ in range(5)] == [
        "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2", "/job:ps/task:0", "/job:ps/task:1"]


def test_explicit_ps_tasks_without_cluster() -> None:
    setter = replica_device_setter(ps_tasks=3)
    assert [place(setter, "Variable") for _ in range(4)] == [
        "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2", "/job:ps/task:0"]


def test_every_standard_ps_op_goes_to_ps_and_others_to_worker() -> None:
    setter = replica_device_setter(ps_tasks=1)
    for op_type in STANDARD_PS_OPS:
        assert place(setter, op_type) == "/job:ps/task:0"
    for op_type in ("Assign", "MatMul", "Const", "ApplyGradientDescent", "Identity"):
        assert place(setter, op_type) == "/job:worker"


def test_worker_device_merges_with_the_ops_own_device() -> None:
    setter = replica_device_setter(cluster=CLUSTER, worker_device="/job:worker/task:1")
    assert place(setter, "MatMul") == "/job:worker/task:1"
    assert place(setter, "MatMul", "/gpu:0") == "/job:worker/task:1/device:GPU:0"
    assert place(setter, "MatMul", "/job:worker/task:2") == "/job:worker/task:2"
    assert place(setter, "MatMul", "/device:CPU:0") == "/job:worker/task:1/device:CPU:0"


def test_variable_pinned_to_another_job_keeps_it_and_skips_its_turn() -> None:
    # TF's testPS2TasksPinVariableToJob.
    setter = replica_device_setter(cluster=CLUSTER)
    assert place(setter, "VariableV2") == "/job:ps/task:0"
    assert place(setter, "VariableV2", "/job:moon") == "/job:moon"
    assert place(setter, "VariableV2", "/job:ps") == "/job:ps/task:1"
    assert place(setter, "Add") == "/job:worker"


def test_variable_with_own_task_keeps_its_task() -> None:
    setter = replica_device_setter(cluster=CLUSTER)
    assert place(setter, "VariableV2", "/job:ps/task:1") == "/job:ps/task:1"
    assert place(setter, "VariableV2", "/task:0") == "/job:ps/task:0"


def test_ps_device_without_job_sets_no_task() -> None:
    # TF's testPS2TasksUseCpuForPS.
    setter = replica_device_setter(ps_tasks=1, ps_device="/cpu:0")
    assert place(setter, "VariableV2") == "/device:CPU:0"
    assert place(setter, "VariableV2", "/job:moon") == "/job:moon/device:CPU:0"


def test_custom_jobs_and_cpu_constraint() -> None:
    # TF's testPS2TasksWithDevice and testPS2TasksWithCPUConstraint.
    cluster = ClusterSpec({"sun": ["s0:1", "s1:1", "s2:1"], "moon": ["m0:1", "m1:1"]})
    setter = replica_device_setter(ps_device="/job:moon/cpu:0", worker_device="/job:sun", cluster=cluster)
    assert place(setter, "VariableV2") == "/job:moon/task:0/device:CPU:0"
    assert place(setter, "VariableV2") == "/job:moon/task:1/device:CPU:0"
    assert place(setter, "Add") == "/job:sun"


def test_ps_tasks_come_from_the_job_named_in_ps_device() -> None:
    setter = replica_device_setter(ps_device="/job:moon", cluster={"moon": ["m:1"] * 3, "ps": ["p:1"]})
    assert [place(setter, "VariableV2") for _ in range(3)] == [
        "/job:moon/task:0", "/job:moon/task:1", "/job:moon/task:2"]


def test_no_merging_keeps_an_existing_device_as_is() -> None:
    # TF's testPS2TasksNoMerging.
    setter = replica_device_setter(cluster=CLUSTER, merge_devices=False)
    assert place(setter, "VariableV2") == "/job:ps/task:0"
    assert place(setter, "VariableV2", "/job:ps") == "/job:ps"
    assert place(setter, "Add") == "/job:worker"
    assert place(setter, "Add", "/gpu:0") == "/gpu:0"


def test_custom_ps_ops_and_strategy() -> None:
    setter = replica_device_setter(ps_tasks=4, ps_ops=["MyTable"], ps_strategy=lambda _op: 3)
    assert place(setter, "MyTable") == "/job:ps/task:3"
    assert place(setter, "VariableV2") == "/job:worker"


def test_non_callable_strategy_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="ps_strategy must be callable"):
        replica_device_setter(ps_tasks=1, ps_strategy=3)  # type: ignore[arg-type]


def test_bad_device_string_names_it() -> None:
    setter = replica_device_setter(ps_tasks=1)
    with pytest.raises(InvalidArgumentError, match=r"'/job:ps/taks:1'"):
        place(setter, "VariableV2", "/job:ps/taks:1")


def test_replica_and_full_device_form_survive_merge() -> None:
    setter = replica_device_setter(ps_tasks=2, worker_device="/job:worker/replica:0/task:3/device:GPU:1")
    assert place(setter, "Mul") == "/job:worker/replica:0/task:3/device:GPU:1"
    assert place(setter, "Mul", "/device:GPU:*") == "/job:worker/replica:0/task:3/device:GPU:1"


def test_greedy_strategy_picks_the_least_loaded_task() -> None:
    # contrib's testByteSizeLoadFn: loads 16, 64, 16, 16, 16 bytes over 2 tasks.
    strategy = GreedyLoadBalancingStrategy(2, byte_size_load_fn)
    setter = replica_device_setter(cluster=CLUSTER, ps_strategy=strategy)
    shapes = [[2, 2], [4, 4], [2, 2], [2, 2], [2, 2]]
    assert [place(setter, "VariableV2", shape=s) for s in shapes] == [
        "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0", "/job:ps/task:0", "/job:ps/task:0"]


def test_greedy_strategy_balances_by_load_not_count() -> None:
    strategy = GreedyLoadBalancingStrategy(3, lambda o: o.load)
    picks = [strategy(SimpleNamespace(load=load)) for load in (10, 1, 1, 1, 1, 5)]
    # loads after each pick: [10,0,0] [10,1,0] [10,1,1] [10,2,1] [10,2,2] [10,7,2]
    assert picks == [0, 1, 2, 1, 2, 1]


def test_byte_size_load_fn_dtypes_and_shapes() -> None:
    assert byte_size_load_fn(op("VariableV2", shape=[3, 4], dtype=np.float64)) == 96
    assert byte_size_load_fn(op("VariableV2", shape=(5,), dtype=np.dtype("int8"))) == 5
    assert byte_size_load_fn(op("VariableV2", shape=[], dtype="float32")) == 4
    assert byte_size_load_fn(op("VariableV2", shape=[2], dtype=SimpleNamespace(size=2))) == 4
    assert byte_size_load_fn(op("VariableV2", shape=[2], dtype=SimpleNamespace(as_numpy_dtype=np.int64))) == 16


def test_byte_size_load_fn_uses_the_shape_attr_when_output_shape_unknown() -> None:
    assert byte_size_load_fn(op("VariableV2", shape=[None, 3], attrs={"shape": [2, 3]})) == 24


def test_byte_size_load_fn_rejects_unknown_dims_and_many_outputs() -> None:
    with pytest.raises(ValueError, match="unknown shape"):
        byte_size_load_fn(op("VariableV2", shape=[None, 3]))
    two = SimpleNamespace(name="split", outputs=[SimpleNamespace(shape=[1], dtype=np.float32)] * 2)
    with pytest.raises(ValueError, match="single output"):
        byte_size_load_fn(two)


def test_byte_size_load_fn_with_distrib_tensor_shape() -> None:
    from distrib.framework import tensor_shape
    shape = tensor_shape.TensorShape([3, 5])
    assert byte_size_load_fn(op("VariableV2", shape=shape, dtype=np.float32)) == 60
    unknown = tensor_shape.TensorShape(None)
    assert byte_size_load_fn(op("VariableV2", shape=unknown, attrs={"shape": [2]})) == 8
