"""TF1's queues: ``dt.FIFOQueue`` and ``dt.RandomShuffleQueue`` (TF's
``data_flow_ops``), the buffers of the queue-based input pipeline.

A queue is a resource of the task its queue op is placed on (the device
scope where it is built, as in TF); every op on it (enqueue, dequeue, size,
close) is colocated with that op, so it runs there, against the task's
queue of that name (:mod:`distrib.runtime.state.input_queues`). Each op
carries the queue's ``spec`` (kind, component dtypes and shapes, capacity,
``min_after_dequeue``, seed): the task creates the queue from whichever op
reaches it first. Its name is ``shared_name``, else the queue op's name;
like a variable it lives as long as its task's resources, so two sessions on
one server that build the same graph share it (TF's default is a queue per
session; pass a ``shared_name`` to say which you mean).
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes as dtypes_lib
from distrib.framework.graph import Operation, Tensor, get_default_graph, name_scope
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops

__all__ = ["QueueBase", "FIFOQueue", "RandomShuffleQueue", "op_seed"]


def op_seed(seed: int | None) -> int | None:
    """An op's seed from its own and the graph's (TF's ``get_seed``, in short)."""
    if seed is not None:
        return int(seed)
    graph = get_default_graph()
    if graph.seed is None:
        return None
    return (int(graph.seed) * 1_000_003 + len(graph)) % (2**31 - 1)


class QueueBase:
    """A queue of elements: tuples of tensors of ``dtypes`` (and ``shapes``)."""

    def __init__(self, kind: str, dtypes: Any, shapes: Any, names: Any, capacity: int,
                 shared_name: str | None, name: str, min_after_dequeue: int = 0,
                 seed: int | None = None) -> None:
        single = not isinstance(dtypes, (list, tuple))
        self._dtypes = [dtypes_lib.as_dtype(d) for d in ([dtypes] if single else dtypes)]
        if shapes is not None:
            if isinstance(shapes, TensorShape) or all(
                    d is None or isinstance(d, int) for d in shapes):
                shapes = [shapes]   # one shape (TF's rule: a list of ints is a shape)
            shapes = list(shapes)
            if len(shapes) != len(self._dtypes):
                raise InvalidArgumentError(f"queue {name}: {len(shapes)} shapes for "
                                           f"{len(self._dtypes)} dtypes")
            self._shapes = [TensorShape(s) for s in shapes]
        else:
            self._shapes = [TensorShape(None) for _ in self._dtypes]
        self._names = None if names is None else ([names] if single else list(names))
        graph = get_default_graph()
        self._graph = graph
        op_type = "FIFOQueueV2" if kind == "fifo" else "RandomShuffleQueueV2"
        full = all(s.is_fully_defined() for s in self._shapes) and shapes is not None
        self._spec = {
            "kind": kind, "dtypes": [d.name for d in self._dtypes],
            "shapes": [s.as_list() for s in self._shapes] if full else None,
            "capacity": int(capacity), "min_after_dequeue": int(min_after_dequeue),
            "seed": seed}
        queue_name = graph.unique_name(name)
        self._shared = shared_name or queue_name
        self._queue_op = graph.create_op(op_type, [], self._attrs(), queue_name + "/",
                                         output_specs=[(dtypes_lib.string, [])])

    # -- TF's properties ---------------------------------------------------------------
    @property
    def queue_ref(self) -> Tensor:
        return self._queue_op.outputs[0]

    @property
    def name(self) -> str:
        return self._queue_op.name

    @property
    def dtypes(self) -> list:
        return list(self._dtypes)

    @property
    def shapes(self) -> list[TensorShape]:
        return list(self._shapes)

    @property
    def names(self) -> list | None:
        return None if self._names is None else list(self._names)

    # -- ops ---------------------------------------------------------------------------
    def enqueue(self, vals: Any, name: str | None = None) -> Operation:
        """Add one element (a tensor, a list/tuple of them, or a dict by ``names``)."""
        with name_scope(name, f"{self._short}_enqueue") as scope:
            return self.colocated_op("QueueEnqueueV2", self._components(vals, many=False), [], scope)

    def enqueue_many(self, vals: Any, name: str | None = None) -> Operation:
        """Add the elements along the first dimension of each component."""
        with name_scope(name, f"{self._short}_EnqueueMany") as scope:
            return self.colocated_op("QueueEnqueueManyV2", self._components(vals, many=True), [], scope)

    def dequeue(self, name: str | None = None) -> Any:
        op = self.colocated_op("QueueDequeueV2", [], [(d, s) for d, s in zip(self._dtypes, self._shapes)],
                      name or f"{self._short}_Dequeue")
        return self._result(op.outputs)

    def dequeue_many(self, n: Any, name: str | None = None) -> Any:
        """``n`` elements, stacked; ``OutOfRangeError`` once closed with fewer left."""
        return self._dequeue_n("QueueDequeueManyV2", n, name or f"{self._short}_DequeueMany")

    def dequeue_up_to(self, n: Any, name: str | None = None) -> Any:
        """As ``dequeue_many``, but a closed queue gives what is left (at least one)."""
        return self._dequeue_n("QueueDequeueUpToV2", n, name or f"{self._short}_DequeueUpTo")

    def size(self, name: str | None = None) -> Tensor:
        return self.colocated_op("QueueSizeV2", [], [(dtypes_lib.int32, [])],
                        name or f"{self._short}_Size").outputs[0]

    def close(self, cancel_pending_enqueues: bool = False, name: str | None = None) -> Operation:
        return self.colocated_op("QueueCloseV2", [], [], name or f"{self._short}_Close",
                        {"cancel_pending_enqueues": bool(cancel_pending_enqueues)})

    # -- helpers -----------------------------------------------------------------------
    @property
    def _short(self) -> str:
        return self._queue_op.name.rsplit("/", 1)[-1]

    def _attrs(self) -> dict[str, Any]:
        return {"queue": self._shared, "spec": dict(self._spec)}

    def colocated_op(self, op_type: str, inputs: list, outputs: list, name: str,
            extra: dict | None = None) -> Operation:
        """An op on this queue (its attrs added to ``extra``), placed with the queue."""
        graph = self._graph
        with graph.as_default(), graph.colocate_with(self._queue_op):
            return graph.create_op(op_type, inputs, {**self._attrs(), **(extra or {})}, name,
                                   output_specs=outputs)

    def _dequeue_n(self, op_type: str, n: Any, name: str) -> Any:
        with self._graph.as_default():
            n_t = ops.convert_to_tensor(n, dtype=dtypes_lib.int32)
        rows = int(n) if isinstance(n, int) and op_type == "QueueDequeueManyV2" else None
        outs = [(d, TensorShape([rows, *s.as_list()]) if s.rank is not None else TensorShape(None))
                for d, s in zip(self._dtypes, self._shapes)]
        return self._result(self.colocated_op(op_type, [n_t], outs, name).outputs)

    def _components(self, vals: Any, many: bool) -> list[Tensor]:
        if isinstance(vals, dict):
            if self._names is None:
                raise InvalidArgumentError(f"queue {self.name} has no names: enqueue a list")
            vals = [vals[n] for n in self._names]
        elif not isinstance(vals, (list, tuple)):
            vals = [vals]
        if len(vals) != len(self._dtypes):
            raise InvalidArgumentError(f"queue {self.name} holds {len(self._dtypes)} "
                                       f"components, got {len(vals)}")
        out = []
        with self._graph.as_default():
            for k, (v, d, s) in enumerate(zip(vals, self._dtypes, self._shapes)):
                t = ops.convert_to_tensor(v, dtype=d)
                shape = t.shape[1:] if many and t.shape.rank else t.shape
                if not s.is_compatible_with(shape):
                    raise InvalidArgumentError(f"queue {self.name}: component {k} of an "
                                               f"element has shape {s}, got {shape}")
                out.append(t)
        return out

    def _result(self, outputs: Sequence[Tensor]) -> Any:
        if self._names is not None:
            return dict(zip(self._names, outputs))
        return outputs[0] if len(outputs) == 1 else list(outputs)


class FIFOQueue(QueueBase):
    """``dt.FIFOQueue(capacity, dtypes, shapes=None, names=None, shared_name=None,
    name="fifo_queue")``: elements in the order they came (TF1's)."""

    def __init__(self, capacity: int, dtypes: Any, shapes: Any = None, names: Any = None,
                 shared_name: str | None = None, name: str = "fifo_queue") -> None:
        super().__init__("fifo", dtypes, shapes, names, capacity, shared_name, name)


class RandomShuffleQueue(QueueBase):
    """``dt.RandomShuffleQueue(capacity, min_after_dequeue, dtypes, shapes=None,
    names=None, seed=None, shared_name=None, name="random_shuffle_queue")``:
    each dequeue takes a uniformly random element, keeping at least
    ``min_after_dequeue`` back until the queue is closed (TF1's)."""

    def __init__(self, capacity: int, min_after_dequeue: int, dtypes: Any, shapes: Any = None,
                 names: Any = None, seed: int | None = None, shared_name: str | None = None,
                 name: str = "random_shuffle_queue") -> None:
        if min_after_dequeue >= capacity > 0:
            raise InvalidArgumentError(f"RandomShuffleQueue: min_after_dequeue "
                                       f"({min_after_dequeue}) must be below capacity "
                                       f"({capacity})")
        super().__init__("random_shuffle", dtypes, shapes, names, capacity, shared_name, name,
                         min_after_dequeue=min_after_dequeue, seed=op_seed(seed))
