"""``strategy.distribute_datasets_from_function(dataset_fn)`` as TF's:
``dataset_fn`` is called once per worker with an ``InputContext``
(``num_input_pipelines`` = the workers, ``input_pipeline_id`` = this one,
``num_replicas_in_sync`` = every replica), its dataset is *not* rebatched
nor sharded, and this worker's replicas take its elements in turn, whole,
batched or not.

TF's own cases (``input_lib_test``: ``testTwoDevicesOneGPUOneCPU``,
``testTupleDataset``, ``testUnevenDatasetBatches``,
``testTwoDevicesPerWorker`` with ``input_type="input_fn"``):
``Dataset.range(10)`` on two replicas gives ``[0, 1], [2, 3], ...`` and a
second pass starts over; ``range(9).batch(2)`` gives ``[[0, 1], [2, 3]],
[[4, 5], [6, 7]], [[8], []]`` (the replica past the end gets an empty batch);
on two workers of two replicas each worker's replicas take ``[0, 1]``, then
``[2, 3]`` of their own pipeline. Ours used to refuse an unbatched dataset
("Cannot rebatch dataset") and to split each batch between the replicas."""
from __future__ import annotations

import types

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.core.input_lib import DistributedDatasetsFromFunction
from tests.helpers import reset_device_config


@pytest.fixture
def two_replicas():
    reset_device_config()
    cpu = dt.config.list_physical_devices("CPU")[0]
    dt.config.set_logical_device_configuration(
        cpu, [dt.config.LogicalDeviceConfiguration()] * 2)
    dt.reset_default_graph()
    yield dt.distribute.MirroredStrategy()
    reset_device_config()
    dt.reset_default_graph()


def replicas(dist) -> list:
    """Each step as the list of its replicas' values (TF's select_replica)."""
    out = []
    for element in dist:
        if isinstance(element, tuple):
            out.append([tuple(np.asarray(part.values[r]).tolist() for part in element)
                        for r in range(len(element[0].values))])
        else:
            out.append([np.asarray(v).tolist() for v in element.values])
    return out


def test_an_unbatched_dataset_is_taken_element_by_element(two_replicas) -> None:
    contexts = []

    def dataset_fn(context):
        contexts.append((context.num_input_pipelines, context.input_pipeline_id,
                         context.num_replicas_in_sync))
        return dt.data.Dataset.range(10)
    dist = two_replicas.distribute_datasets_from_function(dataset_fn)
    expected = [[i, i + 1] for i in range(0, 10, 2)]
    # failed: "Cannot rebatch dataset: ... Perhaps your input dataset is not batched?"
    assert replicas(dist) == expected
    assert replicas(dist) == expected      # a second pass starts over
    assert contexts == [(1, 0, 2)]         # called once, for this (the only) worker


def test_a_tuple_dataset_keeps_its_structure(two_replicas) -> None:
    dist = two_replicas.distribute_datasets_from_function(
        lambda _: dt.data.Dataset.zip((dt.data.Dataset.range(10),
                                       dt.data.Dataset.range(10).map(lambda x: x * x))))
    assert replicas(dist) == [[(i, i * i), (i + 1, (i + 1) ** 2)] for i in range(0, 10, 2)]


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_batches_are_not_split_and_the_last_replica_may_get_an_empty_one(
        two_replicas, drop_remainder) -> None:
    dist = two_replicas.distribute_datasets_from_function(
        lambda _: dt.data.Dataset.range(9).batch(2, drop_remainder=drop_remainder))
    expected = [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    if not drop_remainder:
        expected.append([[8], []])
    # failed: each batch of 2 was split, one row per replica
    assert replicas(dist) == expected


def test_per_replica_batch_size_gives_each_replica_its_own_batch(two_replicas) -> None:
    def dataset_fn(context):
        size = context.get_per_replica_batch_size(8)
        return dt.data.Dataset.range(16).batch(size)
    steps = replicas(two_replicas.distribute_datasets_from_function(dataset_fn))
    assert steps == [[[0, 1, 2, 3], [4, 5, 6, 7]], [[8, 9, 10, 11], [12, 13, 14, 15]]]


def test_an_unbatched_partial_step_ends_the_iteration(two_replicas) -> None:
    """Scalars have no empty batch to give the replica past the end: TF's
    iterator (statically shaped elements: no partial-batch handling) ends."""
    dist = two_replicas.distribute_datasets_from_function(lambda _: dt.data.Dataset.range(5))
    assert replicas(dist) == [[0, 1], [2, 3]]


def test_each_worker_calls_dataset_fn_with_its_own_context_and_is_not_sharded() -> None:
    """Two workers of two replicas (TF's testTwoDevicesPerWorker, input_fn):
    every worker's replicas take [0, 1] then [2, 3] of its own pipeline."""
    seen = []

    def dataset_fn(context):
        seen.append((context.num_input_pipelines, context.input_pipeline_id,
                     context.num_replicas_in_sync))
        return dt.data.Dataset.range(4)
    for worker in range(2):
        strategy = types.SimpleNamespace(num_workers=2, worker_index=worker,
                                         num_replicas_in_sync=4, replica_devices=("a", "b"))
        assert replicas(DistributedDatasetsFromFunction(strategy, dataset_fn)) == \
            [[0, 1], [2, 3]]
    assert seen == [(2, 0, 4), (2, 1, 4)]


def test_dataset_fn_must_return_a_dataset(two_replicas) -> None:
    with pytest.raises(ValueError, match="dataset_fn must return a dt.data.Dataset"):
        two_replicas.distribute_datasets_from_function(lambda _: [1, 2, 3])


def test_the_steps_count_whole_steps_of_scalars_and_partial_ones_of_batches() -> None:
    from distrib.data.distribute_input import replica_steps
    assert replica_steps(dt.data.Dataset.range(5), 2).cardinality() == 2
    assert replica_steps(dt.data.Dataset.range(9).batch(2), 2).cardinality() == 3
    assert len(list(replica_steps(dt.data.Dataset.range(9).batch(2), 2))) == 3
