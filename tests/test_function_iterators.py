"""A ``dt.function`` that takes an iterator reads a new element each call (issue 36).

As TF's: the iterator is an input of the traced function, so four calls over
global batches summing to 6, 22, 38 and 54 return 6, 22, 38, 54 (the trace
used to capture the first batch as a constant: 6, 6, 6, 6), for
``strategy.run(fn, args=(next(iterator),))``, ``iterator.get_next()`` and a
plain dataset's ``next(it)``, under MirroredStrategy in this process and
under MultiWorkerMirroredStrategy across two worker processes. At the end
of the data the call raises ``OutOfRangeError``. A new iterator each epoch
reuses the trace (keyed by its element spec, never by ``id()``), and a
freed object's id never selects another object's trace, so every worker
makes the same retrace decision. Every process is stopped by its pid.
"""
from __future__ import annotations

import asyncio
import gc
import json
import weakref

import numpy as np
import pytest

import distrib as dt
from tests.helpers import run_workers

BOUND_S = 60
SUMS = [6.0, 22.0, 38.0, 54.0]   # the global batches of 0..15 by 4

pytestmark = pytest.mark.usefixtures("fresh_graph")


def numbers() -> dt.data.Dataset:
    return dt.data.Dataset.from_tensor_slices(np.arange(16, dtype=np.float32)).batch(4)


async def read_all(step: dt.distribute.Function, iterator, limit: int = 8) -> list[float]:
    """The step called until OutOfRangeError (-1 marks it), at most ``limit`` times."""
    out: list[float] = []
    async with asyncio.timeout(BOUND_S):
        for _ in range(limit):
            try:
                out.append(float(await step(iterator)))
            except dt.errors.OutOfRangeError:
                out.append(-1.0)
                break
    return out


async def test_next_of_a_distributed_iterator_reads_a_new_batch_each_call(two_cpus) -> None:
    strategy = dt.distribute.MirroredStrategy()
    dist_dataset = strategy.experimental_distribute_dataset(numbers())

    @dt.function
    def train_step(iterator):
        per_replica = strategy.run(dt.reduce_sum, args=(next(iterator),))
        return strategy.reduce(dt.distribute.ReduceOp.SUM, per_replica, axis=None)

    @dt.function
    def by_get_next(iterator):
        per_replica = strategy.run(dt.reduce_sum, args=(iterator.get_next(),))
        return strategy.reduce(dt.distribute.ReduceOp.SUM, per_replica, axis=None)

    for epoch in range(3):   # a new iterator each epoch: the same trace
        assert await read_all(train_step, iter(dist_dataset)) == [*SUMS, -1.0], epoch
        assert await read_all(by_get_next, iter(dist_dataset)) == [*SUMS, -1.0], epoch
    assert train_step.experimental_get_tracing_count() == 1
    assert by_get_next.experimental_get_tracing_count() == 1


async def test_a_plain_dataset_iterator_is_an_input_too() -> None:
    @dt.function
    def total(iterator):
        return dt.reduce_sum(next(iterator))

    @dt.function
    def two_reads(iterator):   # two elements a call, in the order the body reads them
        first, second = iterator.get_next(), next(iterator)
        return dt.reduce_sum(first[0]), dt.reduce_sum(second[1])

    assert await read_all(total, iter(numbers())) == [*SUMS, -1.0]
    pairs = dt.data.Dataset.from_tensor_slices(
        (np.arange(8, dtype=np.float32), np.arange(8, dtype=np.int64) * 10)).batch(2)
    it = iter(pairs)
    async with asyncio.timeout(BOUND_S):
        assert [int(v) for v in await two_reads(it)] == [1, 50]
        assert [int(v) for v in await two_reads(it)] == [9, 130]
        with pytest.raises(dt.errors.OutOfRangeError, match="End of sequence"):
            await two_reads(it)


async def test_an_iterator_of_another_element_spec_traces_again() -> None:
    @dt.function
    def total(iterator):
        return dt.reduce_sum(next(iterator))

    async with asyncio.timeout(BOUND_S):
        for _ in range(3):
            assert float(await total(iter(numbers()))) == 6.0
        assert total.experimental_get_tracing_count() == 1
        as_ints = dt.data.Dataset.from_tensor_slices(np.arange(6, dtype=np.int64)).batch(3)
        assert int(await total(iter(as_ints))) == 3
    assert total.experimental_get_tracing_count() == 2


class Scale:
    """A Python object argument (keyed by the object, as TF keys one by its weak reference)."""

    def __init__(self, factor: float) -> None:
        self.factor = factor


async def test_a_freed_objects_id_never_selects_its_trace() -> None:
    # keyed by id(), a new object that got a freed one's id ran the freed one's
    # trace (its factor baked in: a silent wrong answer), and only where the
    # allocator reused the id: two workers could trace different functions
    @dt.function
    def scaled(scale, x):
        return x * scale.factor

    x = np.float32(1.0)
    reused = 0
    async with asyncio.timeout(BOUND_S):
        for factor in range(2, 12):
            scale = Scale(float(factor))
            assert float(await scaled(scale, x)) == factor
            freed = id(scale)
            del scale
            gc.collect()
            fresh = [Scale(-1.0) for _ in range(1000)]   # very likely one at the freed id
            at_freed = [s for s in fresh if id(s) == freed]
            if at_freed:
                reused += 1
                assert float(await scaled(at_freed[0], x)) == -1.0
    assert reused > 0   # the case happened (CPython reuses a freed object's memory)
    assert scaled.experimental_get_tracing_count() == 10 + reused


class Slotted:
    """An object that cannot be weakly referenced (``__slots__``, no ``__weakref__``)."""

    __slots__ = ("factor", "payload")

    def __init__(self, factor: float, payload: object) -> None:
        self.factor, self.payload = factor, payload


class Payload:
    pass


async def test_an_object_that_cannot_be_weakly_referenced_is_keyed_by_value_and_not_kept() -> None:
    # it was numbered and held for the life of the process (a leak); as TF's
    # Literal trace type, it is keyed by its value (hash and ==), held by the
    # function's trace only, and one neither weakly referenced nor hashable is refused
    @dt.function
    def scaled(scale, x):
        return x * scale.factor

    payload = Payload()
    gone = weakref.ref(payload)
    held = Slotted(3.0, payload)
    del payload
    x = np.float32(2.0)
    async with asyncio.timeout(BOUND_S):
        assert float(await scaled(held, x)) == 6.0
        assert float(await scaled(held, x)) == 6.0
        assert scaled.experimental_get_tracing_count() == 1
        with pytest.raises(TypeError, match="neither weakly referenced nor hashed"):
            await scaled(bytearray(b"12"), x)

        @dt.function
        def counted(items, x):
            return x * float(len(items))
        for items in (range(2), range(0, 2), range(3)):
            assert float(await counted(items, x)) == 2.0 * len(items)
        assert counted.experimental_get_tracing_count() == 2   # equal ones share a trace
    del held, scaled
    gc.collect()
    assert gone() is None   # nothing outside the freed function held the object


async def test_a_dict_of_the_same_items_in_another_order_feeds_the_same_placeholders() -> None:
    # one trace serves both orders (its key sorts the keys); the arrays were fed
    # in each call's order, so the second call swapped "a" and "b"
    @dt.function
    def difference(d):
        return d["a"] - d["b"]

    a, b = np.float32(3.0), np.float32(1.0)
    async with asyncio.timeout(BOUND_S):
        assert float(await difference({"a": a, "b": b})) == 2.0
        assert float(await difference({"b": b, "a": a})) == 2.0
    assert difference.experimental_get_tracing_count() == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["next_and_get_next", "next_only"])
def test_two_workers_read_a_new_batch_each_call_and_end_together(mode: str) -> None:
    # a new iterator each epoch, and worker 0 alone keeps one more between epochs:
    # keyed by id(), one worker retraced and the other did not (next_only: the
    # step's collectives never met, a hang); keyed by the element spec, neither does
    extra = ["--next_only"] if mode == "next_only" else []
    for out in run_workers(["tests/peers/iterator_steps.py", *extra], 2, BOUND_S):
        report = json.loads(out.strip().splitlines()[-1])
        assert report["epochs"] == [[*SUMS, -1.0]] * 4, out[-3000:]
        assert report["traces"] == ([1, 0] if extra else [1, 1])
