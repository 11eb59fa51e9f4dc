"""A queue runner's per-example subgraph run over k examples at once (TF's
``pfor`` idea, applied to TF1's queue runners).

A runner that runs ``QueueEnqueueV2`` once per record pays the executor's
per-node cost (~26 us of Python) for every op of the record's subgraph:
the CIFAR-10 tutorial's ``distorted_inputs`` is ~30 ops, ~0.8 ms of CPU an
image, a third of what the trainer itself spends. Run once over a chunk of
k records, each op costs that once per chunk.

:func:`vectorized_enqueue` walks the enqueue op's inputs back, as pfor
classifies loop-variant and loop-invariant values: an op is *per-example*
when it reads the outputs of the subgraph's one ``ReaderReadV2`` (through
other ops), or is a random op (each example its own draw, as in TF);
everything else (constants, variable reads) is invariant and used as it
is. When every per-example op has a converter
(:mod:`distrib.train.input.vectorize_ops`) it builds, once, in the same
graph under the scope ``<enqueue>_vectorized``: ``ReaderReadUpToV2(k)``,
each op converted to work on a leading batch dimension of size ``n <= k``
(known only when it runs: a read ends early at the end of a file), and a
``QueueEnqueueManyV2``. Anything it cannot convert (an op without a
converter, a rank not known, a second reader, a stateful op with effects,
a control input on the per-example path) and the runner runs the original
op per example, exactly as before; why is logged.

``DISTRIB_VECTORIZE_QUEUE_RUNNERS=0`` in the environment (or
:data:`ENABLED` set False) switches it off, for comparing the two paths.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from distrib.framework.graph import Operation, Tensor
from distrib.framework.op_def import find_op_def
from distrib.settings import VECTORIZE_QUEUE_RUNNERS
from distrib.train.input import vectorize_ops
from distrib.train.input.vectorize_ops import Builder, NotVectorizable, Value
from kernels.cpu import math as cpu_math

logger = logging.getLogger(__name__)

__all__ = ["ENV", "ENABLED", "DEFAULT_CHUNK", "enabled", "vectorized_enqueue", "chunk_for",
           "describe"]

ENV = VECTORIZE_QUEUE_RUNNERS.name
ENABLED = True   # the module's switch; the environment variable's "0" switches it off too
# records per run of a vectorized enqueue. The CIFAR tutorial's pipeline on 2 cores
# (bench/input.py cifar-queue): 16 -> 0.095 ms of CPU an image, 32 -> 0.070, 64 ->
# 0.058, 128 -> 0.052 (per record: 0.79); past 128 the ops' own work is what is left,
# and a chunk of CIFAR images in flight is ~3 MB
DEFAULT_CHUNK = 128

_RANDOM = cpu_math.RANDOM_OPS | vectorize_ops.RANDOM_OPS
_lock = threading.Lock()
_ATTR = "_vectorized_by_chunk"


def enabled() -> bool:
    """Whether queue runners vectorize (the module's switch and the environment's)."""
    return ENABLED and bool(VECTORIZE_QUEUE_RUNNERS.get())


def chunk_for(queue_capacity: int | None, chunk: int | None = None) -> int:
    """Records per vectorized run: ``chunk`` (``DEFAULT_CHUNK``), not above the
    queue's capacity."""
    chunk = DEFAULT_CHUNK if chunk is None else int(chunk)
    if queue_capacity is not None and queue_capacity > 0:
        return max(1, min(chunk, int(queue_capacity)))
    return chunk


def vectorized_enqueue(enqueue: Operation, chunk: int) -> Operation | None:
    """The ``QueueEnqueueManyV2`` that does ``enqueue``'s work for up to ``chunk``
    records per run, built once per (op, chunk); None when ``enqueue`` is not
    a per-record ``QueueEnqueueV2`` this module can convert (or it is off)."""
    if not enabled() or enqueue.type != "QueueEnqueueV2":
        return None
    chunk = int(chunk)
    if chunk <= 0:
        raise ValueError(f"a vectorized enqueue reads chunks of at least one record, not {chunk}")
    with _lock:
        # the ops built, kept on the op itself (a module-level table would keep
        # every graph a runner ever ran alive)
        built: dict[int, Operation | None] = getattr(enqueue, _ATTR, None) or {}
        if int(chunk) in built:
            return built[int(chunk)]
        try:
            result = _build(enqueue, int(chunk))
        except NotVectorizable as e:
            logger.info("queue runner op %s runs one record at a time: %s", enqueue.name, e)
            result = None
        built[int(chunk)] = result
        setattr(enqueue, _ATTR, built)
        return result


# -- classifying ------------------------------------------------------------------------------
def _per_example_ops(enqueue: Operation) -> tuple[list[Operation], Operation]:
    """The per-example ops that ``enqueue`` reads (topological order, the enqueue
    last) and the one reader op; NotVectorizable when the subgraph is not of that form."""
    variant: dict[Operation, bool] = {}
    order: list[Operation] = []
    readers: list[Operation] = []
    stack: list[tuple[Operation, bool]] = [(enqueue, False)]
    while stack:   # an iterative depth-first walk: input chains can be long
        op, inputs_done = stack.pop()
        if op in variant:
            continue
        if not inputs_done:
            stack.append((op, True))
            stack.extend((t.op, False) for t in op.inputs if t.op not in variant)
            continue
        variant[op] = _classify(op, variant, readers)
        if variant[op]:
            order.append(op)
    if len(readers) != 1:
        raise NotVectorizable(f"its element is read by {len(readers)} ReaderReadV2 ops, not one")
    if enqueue.control_inputs:
        raise NotVectorizable("the enqueue has control inputs")
    return order, readers[0]


def _classify(op: Operation, variant: dict[Operation, bool], readers: list[Operation]) -> bool:
    if op.type == "ReaderReadV2":
        readers.append(op)
        return True
    # a random op is per-example whatever it reads: each example its own draw
    varies = any(variant[t.op] for t in op.inputs) or op.type in _RANDOM
    if varies:
        if op.control_inputs:
            raise NotVectorizable(f"per-example op {op.name} has control inputs")
        return True
    entry = find_op_def(op.type)
    if entry is None or (entry.is_stateful and entry.has_side_effects):
        raise NotVectorizable(f"{op.type} op {op.name} has effects of its own each run")
    return False


# -- building ---------------------------------------------------------------------------------
def _build(enqueue: Operation, chunk: int) -> Operation:
    order, reader = _per_example_ops(enqueue)
    missing = sorted({op.type for op in order if op is not enqueue and op is not reader
                      and op.type not in vectorize_ops.CONVERTERS})
    if missing:
        raise NotVectorizable(f"no converter for {', '.join(missing)}")
    for op in order:
        for t in op.outputs:
            if t.shape.rank is None:
                raise NotVectorizable(f"the rank of {t.name} is not known")
    graph = enqueue.graph
    finalized = graph.finalized
    if finalized:   # a MonitoredSession finalizes its graph before it starts the runners
        graph._unsafe_unfinalize()  # noqa: SLF001 - the runner adds its ops, then refinalizes
    try:
        with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
                graph.name_scope(f"{enqueue.name}_vectorized"):
            return _emit(Builder(graph), order, reader, enqueue, chunk)
    finally:
        if finalized:
            graph.finalize()


def _emit(b: Builder, order: list[Operation], reader: Operation, enqueue: Operation,
          chunk: int) -> Operation:
    values: dict[Tensor, Value] = {}
    keys, records = b.read_up_to(reader, chunk)
    values[reader.outputs[0]], values[reader.outputs[1]] = keys, records
    b.count_from(keys.tensor)
    for op in order:
        if op is reader:
            continue
        ins = [values.get(t) or Value.invariant(t) for t in op.inputs]
        if op is enqueue:
            return b.enqueue_many(op, ins)
        outs = vectorize_ops.CONVERTERS[op.type](b, op, ins)
        for t, v in zip(op.outputs, outs):
            values[t] = v
    raise NotVectorizable("the enqueue was not reached")   # unreachable: it is last


def describe(enqueue: Operation) -> dict[str, Any]:
    """What the converter makes of ``enqueue`` (for tests and logs): whether it
    converts, and if not why."""
    if enqueue.type != "QueueEnqueueV2":
        return {"vectorizes": False, "why": f"{enqueue.type} is not a per-record enqueue"}
    try:
        order, reader = _per_example_ops(enqueue)
    except NotVectorizable as e:
        return {"vectorizes": False, "why": str(e)}
    missing = sorted({op.type for op in order if op not in (enqueue, reader)
                      and op.type not in vectorize_ops.CONVERTERS})
    return {"vectorizes": not missing, "why": f"no converter for {missing}" if missing else "",
            "per_example_ops": [op.name for op in order]}
