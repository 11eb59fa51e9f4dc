"""TF1's input producers and batchers (``training/input.py``):
``string_input_producer``, ``input_producer``, ``limit_epochs``, ``batch``
and ``shuffle_batch``.

Each builds a queue, the op that fills it, and a :class:`QueueRunner` in
the graph's ``QUEUE_RUNNERS`` collection that runs that op
(``dt.train.start_queue_runners`` or a ``MonitoredTrainingSession`` starts
them). ``num_epochs`` counts passes with a local variable (run
``dt.local_variables_initializer()``, as in TF); after the last one the
producer's runner closes its queue, its readers then fail with
``OutOfRangeError``, the batcher's runner closes its queue, and the
batch's dequeue fails with ``OutOfRangeError`` once fewer than a batch is
left (or, with ``allow_smaller_final_batch``, once nothing is).
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import GraphKeys, Tensor, control_dependencies, name_scope
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops
from distrib.ops.data_flow_ops import FIFOQueue, QueueBase, RandomShuffleQueue, op_seed
from distrib.ops.variables import Variable
from distrib.train.input.queue_runner import QueueRunner, add_queue_runner

__all__ = ["limit_epochs", "input_producer", "string_input_producer", "batch", "shuffle_batch"]


def limit_epochs(tensor: Any, num_epochs: int | None = None, name: str | None = None) -> Tensor:
    """``tensor``, which may be run ``num_epochs`` times; then ``OutOfRangeError``."""
    if num_epochs is None:
        return tensor
    if num_epochs <= 0:
        raise InvalidArgumentError(f"num_epochs must be > 0, got {num_epochs}")
    with name_scope(name, "limit_epochs", [tensor]) as scope:
        counter = Variable(ops.zeros([], dtype=dtypes.int64), name="epochs", trainable=False,
                           collections=[GraphKeys.LOCAL_VARIABLES])
        graph = counter.graph
        with graph.colocate_with(counter.op):
            count = graph.create_op("CountUpTo", [], {"var": counter.shared_name,
                                                      "limit": int(num_epochs)},
                                    "CountUpTo", output_specs=[(dtypes.int64, [])])
        with control_dependencies([count]):
            return ops.identity(tensor, name=scope)


def input_producer(input_tensor: Any, element_shape: Any = None, num_epochs: int | None = None,
                   shuffle: bool = True, seed: int | None = None, capacity: int = 32,
                   shared_name: str | None = None, summary_name: str | None = None,
                   name: str | None = None, cancel_op: Any = None) -> QueueBase:
    """A FIFO queue of the rows of ``input_tensor`` (shuffled each epoch when
    ``shuffle``), filled by a queue runner (TF1's)."""
    with name_scope(name, "input_producer", [input_tensor]):
        t = ops.convert_to_tensor(input_tensor)
        shape = TensorShape(element_shape) if element_shape is not None else \
            TensorShape(t.shape.as_list()[1:] if t.shape.rank else None)
        if not shape.is_fully_defined():
            raise InvalidArgumentError("input_producer: the shape of the elements must be known "
                                       f"(element_shape), got {shape}")
        if shuffle:
            t = ops.op_output("RandomShuffle", [t], {"seed": op_seed(seed)}, "RandomShuffle")
        t = limit_epochs(t, num_epochs)
        queue = FIFOQueue(capacity, [t.dtype], [shape.as_list()], shared_name=shared_name)
        enqueue = queue.enqueue_many([t])
        add_queue_runner(QueueRunner(queue, [enqueue], cancel_op=cancel_op))
        return queue


def string_input_producer(string_tensor: Any, num_epochs: int | None = None,
                          shuffle: bool = True, seed: int | None = None, capacity: int = 32,
                          shared_name: str | None = None, name: str | None = None,
                          cancel_op: Any = None) -> QueueBase:
    """A queue of the strings (file names) of ``string_tensor``, each epoch in
    a new random order when ``shuffle``, ``num_epochs`` times or forever."""
    t = ops.convert_to_tensor(string_tensor, dtype=dtypes.string)
    if t.shape.rank != 1 or t.shape.as_list()[0] == 0:
        raise InvalidArgumentError("string_input_producer requires a non-empty list of strings")
    with name_scope(name, "input_producer", [t]) as scope:
        return input_producer(t, [], num_epochs, shuffle, seed, capacity, shared_name,
                              "fraction_of_%d_full" % capacity, scope, cancel_op)


def _as_list(tensors: Any) -> tuple[list[Any], Any]:
    if isinstance(tensors, dict):
        keys = sorted(tensors)
        return [tensors[k] for k in keys], keys
    if isinstance(tensors, (list, tuple)):
        return list(tensors), "list"
    return [tensors], "single"


def _restore(outputs: Any, kind: Any) -> Any:
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if isinstance(kind, list):
        return dict(zip(kind, outs))
    return outs[0] if kind == "single" else outs


def _shapes(tensors: list[Tensor], shapes: Any, enqueue_many: bool) -> list[list[int]]:
    if shapes is not None:
        return [TensorShape(s).as_list() for s in shapes]
    out = []
    for t in tensors:
        dims = t.shape.as_list()
        dims = dims[1:] if enqueue_many and dims is not None else dims
        if dims is None or None in dims:
            raise InvalidArgumentError(f"all shapes must be fully defined: {t.name} has shape "
                                       f"{t.shape}; set_shape() it or pass shapes=")
        out.append(dims)
    return out


def _batched(queue: QueueBase, tensors: list[Tensor], batch_size: int, num_threads: int,
             enqueue_many: bool, allow_smaller_final_batch: bool) -> Any:
    enqueue = queue.enqueue_many(tensors) if enqueue_many else queue.enqueue(tensors)
    add_queue_runner(QueueRunner(queue, [enqueue] * int(num_threads)))
    if allow_smaller_final_batch:
        return queue.dequeue_up_to(batch_size)
    return queue.dequeue_many(batch_size)


def batch(tensors: Any, batch_size: int, num_threads: int = 1, capacity: int = 32,
          enqueue_many: bool = False, shapes: Any = None, dynamic_pad: bool = False,
          allow_smaller_final_batch: bool = False, shared_name: str | None = None,
          name: str | None = None) -> Any:
    """Batches of ``batch_size`` from a FIFO queue that ``num_threads`` loops
    fill with ``tensors`` (TF1's ``tf.train.batch``)."""
    if dynamic_pad:
        raise InvalidArgumentError("batch(dynamic_pad=True) is not supported here")
    flat, kind = _as_list(tensors)
    with name_scope(name, "batch", flat):
        flat = [ops.convert_to_tensor(t) for t in flat]
        queue = FIFOQueue(capacity, [t.dtype for t in flat],
                          _shapes(flat, shapes, enqueue_many), shared_name=shared_name)
        out = _batched(queue, flat, batch_size, num_threads, enqueue_many,
                       allow_smaller_final_batch)
        return _restore(out, kind)


def shuffle_batch(tensors: Any, batch_size: int, capacity: int, min_after_dequeue: int,
                  num_threads: int = 1, seed: int | None = None, enqueue_many: bool = False,
                  shapes: Any = None, allow_smaller_final_batch: bool = False,
                  shared_name: str | None = None, name: str | None = None) -> Any:
    """Random batches of ``batch_size`` from a queue that keeps at least
    ``min_after_dequeue`` elements to mix (TF1's ``tf.train.shuffle_batch``)."""
    flat, kind = _as_list(tensors)
    with name_scope(name, "shuffle_batch", flat):
        flat = [ops.convert_to_tensor(t) for t in flat]
        queue = RandomShuffleQueue(capacity, min_after_dequeue, [t.dtype for t in flat],
                                   _shapes(flat, shapes, enqueue_many), seed=seed,
                                   shared_name=shared_name)
        out = _batched(queue, flat, batch_size, num_threads, enqueue_many,
                       allow_smaller_final_batch)
        return _restore(out, kind)
