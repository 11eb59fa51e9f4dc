"""Runs one partition of a graph on one task: the worker's inner loop.

A partition (a list of GraphDef nodes in topological order, see
``distrib.plan``) is compiled once into flat index arrays; each step then
runs it as a dataflow machine: a node runs as soon as its inputs are ready,
and ``_Recv`` nodes wait concurrently. Ordering by readiness, not by list
position, matters: two tasks that exchange tensors both ways would deadlock if
either blocked on a receive that the other can only satisfy after its own
receive.

Kernels come from the one registry in ``kernels`` and run, as TensorFlow's
executor does, inline on the thread that found them ready, here the event
loop's: a hop to another thread and back costs more than a small kernel and,
measured on a two-core machine, 2-4 ms per training step of an MLP (waking
threads, handing the GIL over). A kernel goes to the small kernel pool
(numpy releases the GIL) in two cases only: another heavy kernel of the step is
ready too, so the two run at once (the two matmuls of a layer's backward
pass), or it is too long to hold the loop (over ~2^28 multiply-adds or 32 MiB),
which must keep answering rendezvous pushes, heartbeats and other sessions.
Which nodes are heavy is learnt from the step before (the first step runs
inline). A heavy kernel goes to the pool only while the machine has an idle
core (``_spare_core``): when every core is busy, two kernels of a step at once
only queue for one. ``DISTRIB_INTER_OP_THREADS`` (default: the number of
cores) is how many heavy kernels of a step may run at once, the loop's thread
included; 1 runs them one at a time.

Order: ready ops run depth first (the consumers a result unblocks come next,
so a value reaches its ``_Send`` early), light ops before heavy ones (so two
heavy ones can meet and run side by side), and of the ready heavy ones the
one on the critical path first: the highest bottom level, its own cost plus
the costliest chain of heavy work after it, by last step's costs (ties: the
longer kernel, so the step ends on a short one and a ps applies a smaller
last gradient). When two heavy kernels run side by side, the critical one
keeps the loop's thread and the other goes to the pool (a backward pass's
dX, which the next layer's gradients wait for, and its dW, which only an
update does). Tensors for another task are batched by the step's channel and
flushed before the partition waits.

Memory: a value is dropped as soon as its last consumer has started, so big
activations do not live for the whole step; an input read only for its shape
(a gradient's ``SumToShapeOf`` reference) gets a stand-in and does not keep
the tensor alive. Bias adds, relu and its gradient write into an input that
nothing else holds any more (checked by reference count: never a feed, a
variable, a fetched or a received tensor), as TensorFlow's kernels forward
their input buffers.

Stateful ops (variables and their updates, ``docs/ops.md``) run here against
the task's :class:`VariableStore`, which outlives steps and sessions. Reading
a variable does not copy it: the store copies on write instead (an update
finds the array shared, by its reference count, only while some step, fetch
or send still holds a read of it), so a read is always a snapshot and a
training step whose reads are done before its updates copies nothing.
Updates run on the event loop, so they are atomic with respect to reads and
to each other (no lost updates between asynchronous replicas).
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, NoReturn, Protocol

import numpy as np

import kernels
from kernels import cpu as cpu_kernels
from kernels import cpu_update
from distrib.errors import InvalidArgumentError, NotFoundError, OpError, UnknownError
from distrib.plan import Node, tensor_op
from distrib.resources import run_resource_op
from distrib.variable_store import VariableStore
from transports.shm import shared_empty

logger = logging.getLogger(__name__)

# A kernel above this many multiply-adds or bytes is "heavy": worth a thread hop
# (50-100 us with the GIL handover) when another heavy kernel can run beside it.
_OFFLOOP_FLOPS = 1 << 23
_OFFLOOP_BYTES = 1 << 22
# Above these a kernel never runs on the loop's thread (a few milliseconds and up).
_INLINE_MAX_FLOPS = 1 << 28
_INLINE_MAX_BYTES = 1 << 25

# ops on the task's accumulators and queues (distrib.resources), run by _run_resource
RESOURCE_OPS = frozenset({
    "AccumulatorApplyGradient", "AccumulatorTakeGradient", "AccumulatorSetGlobalStep",
    "AccumulatorNumAccumulated", "QueueEnqueueMany", "QueueDequeue", "QueueSize", "QueueClose",
})

STATEFUL_OPS = frozenset({
    "VariableV2", "Assign", "AssignAdd", "AssignSub", "IsVariableInitialized",
    "ApplyGradientDescent", "ApplyMomentum", "ApplyAdagrad", "ApplyAdam",
}) | RESOURCE_OPS


_UPDATE_OPS = frozenset({"Assign", "AssignAdd", "AssignSub", "ApplyGradientDescent",
                         "ApplyMomentum", "ApplyAdagrad", "ApplyAdam"})


class StepChannel(Protocol):
    """How a partition talks to the other partitions of the same step."""

    def send(self, key: str, dst_task: str, value: Any) -> Awaitable[None] | None: ...

    def flush(self, early: bool = False) -> Awaitable[None] | None:
        """Send whatever ``send`` held back (called before the partition waits
        and at its end; ``early``: before a heavy kernel, when the channel may
        keep small batches back)."""

    timeout: float | None   # how long a receive may wait (None: no limit)

    def expect(self, key: str, src_task: str) -> asyncio.Future:
        """The future of tensor ``key`` from ``src_task``; its result goes
        through ``received`` (raises if the step was aborted)."""

    def received(self, result: Any) -> Any:
        """The tensor out of a result of an ``expect`` future (raises when
        the sender is not the incarnation the step started with)."""

    def overdue(self, key: str, src_task: str) -> Exception:
        """The error for a receive that waited ``timeout`` seconds."""


def _device_of(node: Node) -> tuple[str, int]:
    dev = node.get("device") or ""
    _, sep, local = dev.rpartition("/device:")
    if not sep:
        return "CPU", 0
    dtype, _, idx = local.partition(":")
    return dtype.upper(), int(idx) if idx.isdigit() else 0


def _host(x: Any) -> Any:
    if type(x) is np.ndarray or x is None:
        return x
    from kernels import devices
    return devices.to_host(x) if devices.is_device_array(x) else np.asarray(x)


class CompiledPartition:
    """A partition turned into index arrays, ready to run many steps."""

    def __init__(self, nodes: list[Node], fetches: list[str], *, task: str = "",
                 soft_placement: bool = False, gpu_count: int = 0,
                 generators: dict | None = None) -> None:
        self.task = task
        # a seeded random op keeps its generator from step to step, in
        # ``generators`` (the worker passes one dict to all the partitions of a
        # session); its node here is a copy: the caller's graph stays as it was
        gens: dict = {} if generators is None else generators
        self.nodes = [{**node, "attrs": cpu_kernels.rng_attrs(node["attrs"], node["name"], gens)}
                      if node["op"] in cpu_kernels.RANDOM_OPS else node for node in nodes]
        self.fetches = list(fetches)
        index = {n["name"]: i for i, n in enumerate(nodes)}
        n = len(nodes)
        self.inputs: list[list[tuple[int, int] | str]] = [[] for _ in range(n)]
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.indegree = [0] * n
        for i, node in enumerate(nodes):
            for inp in node["inputs"]:
                if inp.startswith("^"):
                    src = index[inp[1:]]
                    self._edge(src, i)
                    continue
                op, out = tensor_op(inp)
                if op in index:
                    self.inputs[i].append((index[op], out))
                    self._edge(index[op], i)
                else:  # a fed tensor, looked up in the step's feeds
                    self.inputs[i].append(inp if ":" in inp else f"{inp}:0")
        self.fetch_refs = [(index[tensor_op(t)[0]], tensor_op(t)[1]) for t in self.fetches]
        self.devices = [self._resolve_device(node, soft_placement, gpu_count) for node in nodes]
        self.kernels = [self._kernel(node, dev) for node, dev in zip(nodes, self.devices)]
        # CPU ops that may write their result into a dead input (see _exclusive)
        self.in_place = [cpu_kernels.IN_PLACE.get(node["op"]) if dev[0] == "CPU" else None
                         for node, dev in zip(nodes, self.devices)]
        self.recv_nodes = [i for i, node in enumerate(nodes) if node["op"] == "_Recv"]
        self.is_recv = [node["op"] == "_Recv" for node in nodes]
        # inputs read only for their shape and dtype (the reference of a gradient's
        # SumToShapeOf, say): they get a stand-in, so the tensor itself can go
        # (and be overwritten in place, see _exclusive) once its real readers ran
        self.shape_only = [[self.devices[i][0] == "CPU" and (node["op"], k) in _SHAPE_ONLY
                            and type(ref) is not str for k, ref in enumerate(self.inputs[i])]
                           for i, node in enumerate(nodes)]
        # data uses of each node's outputs; a fetched node is never released
        self.uses = [0] * n
        all_uses = [0] * n
        self.keeps_shape = [False] * n   # some reader wants only its outputs' shapes
        for i, refs in enumerate(self.inputs):
            for k, ref in enumerate(refs):
                if type(ref) is not str:
                    all_uses[ref[0]] += 1
                    if self.shape_only[i][k]:
                        self.keeps_shape[ref[0]] = True
                    else:
                        self.uses[ref[0]] += 1
        for i, _ in self.fetch_refs:
            self.uses[i] = all_uses[i] = -1
        # an update whose value nobody reads returns nothing: the step must not
        # hold the stored array (it would look shared to the next update)
        self.wanted = [u != 0 for u in all_uses]
        self.producers = [[ref[0] for k, ref in enumerate(refs)
                           if type(ref) is not str and not self.shape_only[i][k]]
                          for i, refs in enumerate(self.inputs)]
        # a variable's read (the Identity that Variable() puts after it) forwards
        # the stored array: the store copies on write, so no copy is needed here
        self.alias = [node["op"] == "Identity" and self.devices[i][0] == "CPU"
                      and len(self.inputs[i]) == 1 and type(self.inputs[i][0]) is not str
                      and nodes[self.inputs[i][0][0]]["op"] == "VariableV2"
                      for i, node in enumerate(nodes)]
        # a CPU MatMul whose result goes only to other tasks (a weight's
        # gradient on its way to a ps) writes it straight into the shared-memory
        # arena: a co-located receiver then reads it where it is, and the send
        # copies nothing (a remote one gets the same bytes over TCP)
        fetched = {i for i, _ in self.fetch_refs}
        self.kernel_attrs = [node["attrs"] for node in self.nodes]
        for i, node in enumerate(self.nodes):
            if node["op"] in _ARENA_OUT_OPS and self.devices[i][0] == "CPU" \
                    and i not in fetched and self.consumers[i] \
                    and all(self.nodes[c]["op"] == "_Send"
                            and self.nodes[c]["attrs"].get("dst_task") != task
                            for c in self.consumers[i]):
                self.kernel_attrs[i] = {**node["attrs"], "_alloc": shared_empty}
        self._order_updates_after_reads()
        self._fold_constants()
        self.sources = [i for i in range(n) if self.indegree[i] == 0 and not self.is_recv[i]
                        and not self.folded[i]]
        # the cost of each node's kernel if it was heavy in the last step, else 0
        # (see _run_node and _weight)
        self.heavy = [0.0] * n
        # each node's heavy work from it to the end of the step, its own
        # included (by the costs in self.heavy; see _priorities)
        self.priority = [0.0] * n
        self._priced: list[float] = list(self.heavy)
        # each receive's wait last step: seconds from when the step could take
        # its tensor to when it came (see spin_until)
        self.recv_took: dict[int, float] = {}
        self._topo = self._topological()

    def _order_updates_after_reads(self) -> None:
        """Let an update of a variable wait for this step's readers of it.

        Nothing in the graph orders ``dX = dY @ w.T`` before ``w``'s update
        (both only need ``dY``); run concurrently, the update would find ``w``
        shared and copy it. An extra edge from each reader makes the step read
        before it writes, as a serial run would, unless the reader itself
        depends on the update (that edge would be a cycle) or waits for another
        task (which might wait for the update: a cycle through two partitions)."""
        readers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            if node["op"] == "VariableV2":
                found = readers.setdefault(node["attrs"].get("var"), [])
                for c in self.consumers[i]:
                    if self.alias[c]:
                        found.extend(c2 for c2 in self.consumers[c] if self._reads(c2, c))
                    elif self._reads(c, i):
                        found.append(c)
        for i, node in enumerate(self.nodes):
            if node["op"] not in _UPDATE_OPS or not readers.get(node["attrs"].get("var")):
                continue
            after = self._descendants(i)
            for r in set(readers[node["attrs"]["var"]]):
                if r != i and r not in after and not self._waits_for_recv(r):
                    self._edge(r, i)

    def _topological(self) -> list[int]:
        """The nodes in an order where each comes after its inputs (the
        extra read-before-update edges included)."""
        indeg = [len(p) for p in self.preds]   # every edge (self.indegree omits folded ones)
        order = [i for i in range(len(self.nodes)) if indeg[i] == 0]
        for i in order:   # grows as it goes
            for c in self.consumers[i]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    order.append(c)
        return order

    def _priorities(self) -> None:
        """The bottom level of every node: its heavy cost plus the costliest
        chain of heavy work after it (list scheduling's classic priority).
        Of two ready heavy kernels the higher one is on the step's critical
        path: it runs first, and on the loop's own thread when the other
        goes to the pool."""
        cost, prio, consumers = self.heavy, self.priority, self.consumers
        for i in reversed(self._topo):
            after = 0.0
            for c in consumers[i]:
                if prio[c] > after:
                    after = prio[c]
            prio[i] = cost[i] + after
        self._priced = list(cost)

    def _fold_constants(self) -> None:
        """Evaluate the CPU ``Const`` nodes once, here, instead of every step.

        A step starts with their values in place and their consumers' counts
        of missing inputs already lowered (``start_values``, ``indegree``).
        The values are made read-only, so no kernel writes into them (see
        _exclusive); a fetch of one, or of a view of one, copies it (see
        _const_view), and so does a send to a task in this process (see the
        channel's send)."""
        n = len(self.nodes)
        self.start_values: list[list[Any] | None] = [None] * n
        self.start_shapes: list[list[Any] | None] = [None] * n
        self.const_ids: set[int] = set()
        self._const_arrays: list[np.ndarray] = []
        self.folded = [False] * n
        for i, node in enumerate(self.nodes):
            if node["op"] != "Const" or self.devices[i][0] != "CPU" or self.inputs[i] \
                    or self.preds[i] or self.kernels[i] is None:
                continue
            try:
                out = self.kernels[i]([], node["attrs"])
            except Exception:
                continue   # a bad constant fails in its step, as an op error
            if type(out) is not list or not all(type(o) is np.ndarray for o in out):
                continue
            for o in out:
                o.setflags(write=False)
                # numpy's views point at the array that owns the memory: that one too
                root = o
                while isinstance(root.base, np.ndarray):
                    root = root.base
                for a in (o, root):
                    self.const_ids.add(id(a))
                    self._const_arrays.append(a)   # alive, so their ids stay theirs
            self.folded[i] = True
            self.start_values[i] = out if self.uses[i] else None
            if self.keeps_shape[i]:
                self.start_shapes[i] = [_shape_of(o) for o in out]
            for c in self.consumers[i]:
                self.indegree[c] -= 1
        self.n_folded = sum(self.folded)

    def _const_view(self, value: Any) -> bool:
        """Whether ``value`` is one of this partition's folded constants or a
        view of one (only read-only arrays can be)."""
        if type(value) is not np.ndarray or value.flags.writeable or not self.const_ids:
            return False
        while isinstance(value, np.ndarray):   # a base may be bytes, an mmap...
            if id(value) in self.const_ids:
                return True
            value = value.base
        return False

    def _waits_for_recv(self, i: int) -> bool:
        seen = {i}
        stack = [i]
        while stack:
            j = stack.pop()
            if self.is_recv[j]:
                return True
            for p in self.preds[j]:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return False

    def _reads(self, consumer: int, producer: int) -> bool:
        return any(type(ref) is not str and ref[0] == producer for ref in self.inputs[consumer])

    def _descendants(self, i: int) -> set[int]:
        seen: set[int] = set()
        stack = [i]
        while stack:
            for c in self.consumers[stack.pop()]:
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return seen

    def _edge(self, src: int, dst: int) -> None:
        self.consumers[src].append(dst)
        self.preds[dst].append(src)
        self.indegree[dst] += 1

    def _resolve_device(self, node: Node, soft: bool, gpu_count: int) -> tuple[str, int]:
        dtype, idx = _device_of(node)
        if dtype == "CPU":
            return dtype, idx
        if dtype == "GPU" and idx < gpu_count:
            return dtype, idx
        if soft:
            return "CPU", 0
        have = ["CPU:0"] + [f"GPU:{i}" for i in range(gpu_count)]
        raise InvalidArgumentError(
            f"op {node['name']!r} is pinned to {dtype}:{idx}, which this task does not have "
            f"(devices: {', '.join(have)}); pin it to an existing device or pass "
            "ConfigProto(allow_soft_placement=True)", task=self.task or None, op=node["name"])

    def _kernel(self, node: Node, dev: tuple[str, int]) -> Callable | None:
        op = node["op"]
        if op in STATEFUL_OPS or op in ("_Send", "_Recv", "Placeholder", "NoOp"):
            return None
        if dev[0] != "CPU" and kernels.has_kernel(op, dev[0]):
            return kernels.get_kernel(op, dev[0])
        if not kernels.has_kernel(op, "CPU"):
            raise NotFoundError(f"no kernel for op type {op!r} (op {node['name']!r}); "
                                "see docs/ops.md for the supported ops",
                                task=self.task or None, op=node["name"])
        if dev[0] != "CPU":
            logger.debug("op %s has no %s kernel; running it on CPU", op, dev[0])
        return kernels.get_kernel(op, "CPU")

    async def run(self, feeds: dict[str, Any], variables: VariableStore,
                  channel: StepChannel | None = None, stats: RunStats | None = None) -> list[Any]:
        """Run one step; returns the values of ``self.fetches`` (on the host)."""
        n = len(self.nodes)
        values: list[list[Any] | None] = list(self.start_values)   # folded constants
        shapes: list[list[Any] | None] = list(self.start_shapes)   # for shape-only readers
        remaining = list(self.indegree)
        uses = list(self.uses)
        ready = list(reversed(self.sources))   # a stack: see _finished
        heavy_ready: list[int] = []            # ready nodes that were heavy last step
        pending = _Pending()
        for i in self.recv_nodes:
            if remaining[i] == 0:
                self._expect(i, channel, pending)
        done = self.n_folded
        # seconds in kernels (summed over threads), in-place kernels, and every
        # kernel's (start, end) span (for the time in which any kernel ran)
        clock: list[Any] = [0.0, 0, []]
        on_pool: list[Any] = []   # this step's kernels on the pool (concurrent futures)
        pooled = [0]              # how many went there
        try:
            while done < n:
                while ready or heavy_ready:
                    if ready:
                        i = ready.pop()
                        if self.heavy[i]:
                            # light ops first: they may make another heavy kernel
                            # ready, to run beside this one
                            heavy_ready.append(i)
                            continue
                    else:
                        if any(f.done() for f in on_pool):
                            # a kernel on the pool has finished: take its result
                            # first (its consumers, its send to another task: a
                            # gradient the ps can apply meanwhile) rather than
                            # after a kernel that holds this thread
                            break
                        # the least critical goes to the pool when one may go
                        # there (the one left runs inline), else the most critical
                        to_pool = (len(heavy_ready) > 1 and on_pool is not None
                                   and _busy(on_pool) < _parallel_slots() and _spare_core())
                        i = heavy_ready.pop(_pick(heavy_ready, self.priority, self.heavy,
                                                  lowest=to_pool))
                        await _flush(channel, early=True)   # the other task gets on meanwhile
                    out = self._run_node(i, values, uses, feeds, variables, channel,
                                         clock, heavy_ready, on_pool, shapes)
                    if type(out) is not list:
                        if not asyncio.isfuture(out):
                            await self._sent(i, out)   # a send waiting for its connection
                            out = []
                        else:   # a heavy kernel now on the pool, or a waiting resource op
                            pending.add(out, i)
                            pooled[0] += self.kernels[i] is not None
                            continue
                    if self.keeps_shape[i]:
                        shapes[i] = [_shape_of(o) for o in out]
                    values[i] = out if self.uses[i] else None
                    out = None   # values[i] alone holds it (see _exclusive)
                    done += 1
                    self._finished(i, remaining, ready, pending, channel)
                if done < n:
                    await _flush(channel)
                    if not pending.futs:
                        raise UnknownError("partition stalled with no runnable op",
                                           task=self.task or None)
                    if pending.since and not pending.finished:
                        await spin_until(lambda: bool(pending.finished), self._eta(pending))
                    finished = await pending.wait()
                    if not finished:   # a receive's deadline passed
                        err = self._overdue(pending, channel)
                        if err is not None:
                            raise err
                        continue       # it came just in time: its callback is queued
                    now = time.perf_counter()
                    for fut in finished:
                        i = pending.pop(fut)
                        if i is None:
                            continue
                        if self.is_recv[i]:
                            since = pending.since.pop(i, None)
                            if since is not None:
                                self.recv_took[i] = now - since
                        out = self._result(i, fut, channel)
                        if self.keeps_shape[i]:
                            shapes[i] = [_shape_of(o) for o in out]
                        values[i] = out if self.uses[i] else None
                        out = None
                        done += 1
                        self._finished(i, remaining, ready, pending, channel)
                    finished = fut = None   # a finished future holds its result,
                    _busy(on_pool)            # and so does a pool one
            await _flush(channel)
            if self.heavy != self._priced:   # costs learnt (the first step) or changed
                self._priorities()
        finally:
            for fut in pending.futs:
                fut.cancel()
            if stats is not None:
                stats.kernel_s += clock[0]
                stats.pool_kernels += pooled[0]
                stats.in_place_kernels += clock[1]
                stats.busy_s += _union(clock[2])
        try:
            return [self._fetched(values[i][out], variables)  # type: ignore[index]
                    for i, out in self.fetch_refs]
        except IndexError:   # a GraphDef without output_dtypes escaped the master's check
            bad = next(f for f, (i, out) in zip(self.fetches, self.fetch_refs)
                       if not 0 <= out < len(values[i] or ()))
            raise InvalidArgumentError(f"cannot fetch {bad!r}: its op has no such output",
                                       task=self.task or None) from None

    def _finished(self, i: int, remaining: list[int], ready: list[int],
                  pending: _Pending, channel: StepChannel | None) -> None:
        # Depth first, as TensorFlow's executor runs a node's ready consumers
        # inline: the ops a result unblocks run next (in the order they were
        # listed), so a value reaches its _Send, and another task, as soon as
        # it can, instead of after every other op that was ready before it.
        for c in reversed(self.consumers[i]):
            remaining[c] -= 1
            if remaining[c] == 0:
                if self.is_recv[c]:
                    self._expect(c, channel, pending)
                else:
                    ready.append(c)

    def _expect(self, i: int, channel: StepChannel | None, pending: _Pending) -> None:
        """Wait for the tensor of ``_Recv`` node ``i`` (the rendezvous's own
        future: no task per receive)."""
        attrs = self.nodes[i]["attrs"]
        if channel is None:
            raise UnknownError(f"op {self.nodes[i]['name']!r} receives from another task, "
                               "but this step has no channel", task=self.task or None)
        pending.add(channel.expect(attrs["key"], attrs["src_task"]), i,
                    None if channel.timeout is None else channel.timeout)
        pending.since[i] = time.perf_counter()

    def _eta(self, pending: _Pending) -> float | None:
        """Seconds until the first pending receive's tensor should come, if it
        takes as long as it did last step (None: no receive has a history)."""
        now = time.perf_counter()
        soonest = None
        for i, since in pending.since.items():
            took = self.recv_took.get(i)
            if took is not None and (soonest is None or since + took - now < soonest):
                soonest = since + took - now
        return soonest

    def _overdue(self, pending: _Pending, channel: StepChannel | None) -> Exception | None:
        """The error of the receive with the earliest deadline, unless its
        tensor came after all."""
        fut = min(pending.deadlines, key=pending.deadlines.__getitem__)  # type: ignore[arg-type]
        if fut.done():
            return None
        attrs = self.nodes[pending.futs[fut]]["attrs"]
        return channel.overdue(attrs["key"], attrs["src_task"])  # type: ignore[union-attr]

    async def _sent(self, i: int, sending: Awaitable) -> None:
        try:
            await sending
        except Exception as e:
            self._raise_op_error(i, e)

    def _result(self, i: int, fut: asyncio.Future, channel: StepChannel | None) -> list[Any]:
        if self.is_recv[i]:
            return [channel.received(fut.result())]  # type: ignore[union-attr]
        try:
            return fut.result()
        except Exception as e:
            self._raise_op_error(i, e)

    def _fetched(self, value: Any, variables: VariableStore) -> Any:
        value = _host(value)
        # a stored array (or a view of it) goes out as a copy: the client may
        # write to it; so does a folded constant, which is read-only
        return value.copy() if variables.owns(value) or self._const_view(value) else value

    def _gather(self, i: int, values: list, uses: list[int], feeds: dict[str, Any],
                shapes: list) -> list[Any]:
        args = []
        shape_only = self.shape_only[i]
        for k, ref in enumerate(self.inputs[i]):
            if shape_only[k]:
                args.append(shapes[ref[0]][ref[1]])  # type: ignore[index]
            elif type(ref) is str:
                try:
                    args.append(feeds[ref])
                except KeyError:
                    raise InvalidArgumentError(
                        f"you must feed a value for tensor {ref!r}", task=self.task or None,
                        op=self.nodes[i]["name"]) from None
            else:
                args.append(values[ref[0]][ref[1]])
        for p in self.producers[i]:
            uses[p] -= 1
            if uses[p] == 0:
                # the last consumer has its inputs: drop the step's reference, so
                # memory is freed early and a variable read no longer counts as shared
                values[p] = None
        return args

    def _run_node(self, i: int, values: list, uses: list[int], feeds: dict[str, Any],
                  variables: VariableStore, channel: StepChannel | None,
                  clock: list[float], heavy_ready: list[int], on_pool: list[Any],
                  shapes: list) -> list[Any] | Awaitable:
        """The node's outputs; or a future (a kernel on the pool, a waiting
        resource op) or an awaitable (a send held up by a full connection)."""
        node = self.nodes[i]
        op = node["op"]
        try:
            args = self._gather(i, values, uses, feeds, shapes)
            fn = self.kernels[i]
            if fn is not None:
                if self.alias[i]:
                    return [args[0]]
                dev = self.devices[i]
                args = _to_device(args, dev) if dev[0] != "CPU" else [_host(a) for a in args]
                attrs = self.kernel_attrs[i]
                weight, cost = _weight(op, args, attrs)
                self.heavy[i] = cost if weight > 0 else 0.0
                if weight == 2 or (weight == 1 and on_pool is not None
                                   and heavy_ready
                                   and _busy(on_pool) < _parallel_slots()
                                   and _spare_core()):
                    fut = _kernel_pool().submit(_timed_kernel, fn, args, attrs, clock)
                    if on_pool is not None:
                        on_pool.append(fut)
                    return asyncio.wrap_future(fut)
                t0 = time.perf_counter()
                ip = self.in_place[i]
                out = None
                if ip is not None and _exclusive(args, ip[0]):
                    out = ip[1](args, attrs)
                    if out is not None:
                        clock[1] += 1
                if out is None:
                    out = fn(args, attrs)
                t1 = time.perf_counter()
                clock[0] += t1 - t0
                clock[2].append((t0, t1))
                return out
            if op == "Placeholder":
                name = node["name"] + ":0"
                if name not in feeds:
                    raise InvalidArgumentError(
                        f"you must feed a value for placeholder tensor {name!r} "
                        f"(dtype {node['attrs'].get('dtype')}, shape {node['attrs'].get('shape')})",
                        task=self.task or None, op=node["name"])
                return [feeds[name]]
            if op == "NoOp":
                return []
            if op == "_Send":
                attrs = node["attrs"]
                # (a read-only value, a folded constant say, reaches a receiver in
                # this process as a copy: see the channel's send)
                res = channel.send(attrs["key"], attrs["dst_task"], _host(args[0]))  # type: ignore[union-attr]
                return [] if res is None else res
            if op in RESOURCE_OPS:
                # a waiting one (take, dequeue) returns a future, pending like a receive
                return run_resource_op(node, [_host(a) for a in args], variables.resources,
                                       channel, self.task)
            t0 = time.perf_counter()
            out = _run_stateful(node, args, variables, self.wanted[i], self.devices[i])
            t1 = time.perf_counter()
            clock[0] += t1 - t0
            clock[2].append((t0, t1))
            return out
        except Exception as e:
            self._raise_op_error(i, e)

    def _raise_op_error(self, i: int, e: Exception) -> NoReturn:
        err = self._op_error(i, e)
        if err is e:
            raise e
        raise err from e

    def _op_error(self, i: int, e: Exception) -> Exception:
        """``e`` as a typed error that names this task and op."""
        node = self.nodes[i]
        op = node["op"]
        if isinstance(e, OpError):
            if e.op is None:
                e.op = node["name"]
            if e.task is None and self.task:
                e.task = self.task
            return e
        if isinstance(e, (ValueError, TypeError, IndexError, ArithmeticError)):
            return InvalidArgumentError(f"{op} failed: {e}", task=self.task or None,
                                        op=node["name"])
        if isinstance(e, kernels.KernelNotFound):
            return NotFoundError(str(e), task=self.task or None, op=node["name"])
        # a kernel bug must still name the op and keep the server up
        logger.error("op %s (%s) failed", node["name"], op, exc_info=e)
        return UnknownError(f"{op} failed: {type(e).__name__}: {e}",
                            task=self.task or None, op=node["name"])


class _Pending:
    """What a step waits for (receives, kernels on the pool, waiting resource
    ops): one done callback per future, and one future for the step to sleep
    on until any of them is done; cheaper than a task per receive and
    ``asyncio.wait`` over all of them each time."""

    __slots__ = ("futs", "finished", "deadlines", "since", "_waker", "_loop")

    def __init__(self) -> None:
        self.futs: dict[asyncio.Future, int] = {}
        self.finished: list[asyncio.Future] = []
        self.deadlines: dict[asyncio.Future, float] | None = None   # receives' (loop time)
        self.since: dict[int, float] = {}   # receive node -> when the step began waiting for it
        self._waker: asyncio.Future | None = None
        self._loop = asyncio.get_running_loop()

    def add(self, fut: asyncio.Future, i: int, timeout: float | None = None) -> None:
        self.futs[fut] = i
        if timeout is not None:
            if self.deadlines is None:
                self.deadlines = {}
            self.deadlines[fut] = self._loop.time() + timeout
        if fut.done():
            self.finished.append(fut)
        else:
            fut.add_done_callback(self._done)

    def pop(self, fut: asyncio.Future) -> int | None:
        if self.deadlines:
            self.deadlines.pop(fut, None)
        return self.futs.pop(fut, None)

    def _done(self, fut: asyncio.Future) -> None:
        self.finished.append(fut)
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    async def wait(self) -> list[asyncio.Future]:
        """The futures done since the last call, in the order they finished;
        none when the earliest receive deadline passed first."""
        if not self.finished:
            waker = self._waker = self._loop.create_future()
            timer = None
            if self.deadlines:
                timer = self._loop.call_at(min(self.deadlines.values()), _wake, waker)
            try:
                await waker
            finally:
                self._waker = None
                if timer is not None:
                    timer.cancel()
        out, self.finished = self.finished, []
        return out


def _wake(waker: asyncio.Future) -> None:
    if not waker.done():
        waker.set_result(None)


async def _flush(channel: StepChannel | None, early: bool = False) -> None:
    if channel is not None:
        res = channel.flush(early)
        if res is not None:
            await res


class RunStats:
    """Time a worker's partitions spent in kernels (summed over the pool's
    threads, so it can exceed the wall time), for benchmarks and tools."""

    __slots__ = ("kernel_s", "busy_s", "pool_kernels", "in_place_kernels")

    def __init__(self) -> None:
        self.kernel_s = 0.0
        self.busy_s = 0.0           # time in which at least one kernel ran
        self.pool_kernels = 0       # kernels that ran on the pool, not the loop's thread
        self.in_place_kernels = 0   # kernels that wrote into a dead input


def _union(spans: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) spans."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _timed_kernel(fn: Callable, args: list[Any], attrs: dict[str, Any],
                  clock: list[Any]) -> list[Any]:
    t0 = time.perf_counter()
    try:
        return fn(args, attrs)
    finally:
        t1 = time.perf_counter()
        clock[0] += t1 - t0
        clock[2].append((t0, t1))
        # drop the inputs here, on the kernel's thread: a variable read must not
        # look shared (and be copied on write) because of a finished kernel
        args.clear()


_POOL: ThreadPoolExecutor | None = None


_CORES = os.cpu_count() or 1   # a system call each time it is asked: once, here


def _inter_op_threads() -> int:
    return max(1, int(os.environ.get("DISTRIB_INTER_OP_THREADS") or 0) or _CORES)


def _parallel_slots() -> int:
    """Heavy kernels a step may have on the pool beside the one on the loop."""
    return _inter_op_threads() - 1


_LOADAVG: list[int] = []   # an open /proc/loadavg, or -1 where there is none


def _runnable() -> int | None:
    """Runnable threads on the machine now, this one included, per
    /proc/loadavg (a 2 us read); None where it cannot be read."""
    if not _LOADAVG:
        try:
            _LOADAVG.append(os.open("/proc/loadavg", os.O_RDONLY))
        except OSError:
            _LOADAVG.append(-1)
    fd = _LOADAVG[0]
    if fd < 0:
        return None
    try:
        return int(os.pread(fd, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def _spare_core() -> bool:
    """Whether the machine has an idle core now: fewer runnable threads (this
    one included) than cores. Two workers of a cluster on a 2-core host keep
    both cores busy; a kernel sent to the pool then only queues for a core
    and costs the hop (measured: 11% fewer examples/s with it). Where /proc
    is missing, assume a free core."""
    running = _runnable()
    return running is None or running < _CORES


# ops whose CPU kernel can write its result where ``attrs["_alloc"]`` says
_ARENA_OUT_OPS = frozenset({"MatMul"})


# (op, input index) read only for shape and dtype
_SHAPE_ONLY = frozenset({("SumToShapeOf", 1), ("BroadcastToShapeOf", 1), ("Shape", 0),
                         ("ZerosLike", 0), ("OnesLike", 0)})


_STAND_INS: dict[tuple[Any, tuple[int, ...]], np.ndarray] = {}


def _shape_of(value: Any) -> Any:
    """A stand-in for ``value`` with its shape and dtype and no memory (a
    read-only zero-stride view of one zero, made once per shape and dtype);
    ``value`` itself if it has no such pair."""
    if type(value) is not np.ndarray:
        return value
    key = (value.dtype, value.shape)
    stand_in = _STAND_INS.get(key)
    if stand_in is None:
        if len(_STAND_INS) >= 4096:
            _STAND_INS.clear()
        stand_in = _STAND_INS[key] = np.broadcast_to(np.zeros((), value.dtype), value.shape)
    return stand_in


def _exclusive(args: list[Any], k: int) -> bool:
    """Whether ``args[k]`` is a temporary only this op can see: an ndarray that
    owns its memory (not a view, not a shared-memory or received buffer), is
    writable, and whose only references are ``args`` and this frame. A feed,
    a variable's value, a fetched value, a tensor still waiting to be sent or
    read by another op all have more, so they are never overwritten."""
    a = args[k]
    return (type(a) is np.ndarray and a.base is None and a.flags.writeable
            and a.flags.c_contiguous and sys.getrefcount(a) <= 3)


def _busy(on_pool: list[Any]) -> int:
    """How many of a step's pool kernels still run (their thread may have
    finished before the loop has looked at their futures)."""
    on_pool[:] = [f for f in on_pool if not f.done()]
    return len(on_pool)


# A wait for another task's message that should end within this, by last
# step's timing (a worker's variables from a ps, the ps's answer to its call),
# spins instead of sleeping while a core would idle anyway (see spin_until).
SPIN_S = 0.003


def _core_idle_while_waiting() -> bool:
    """Whether a core would idle while this thread waits: no more runnable
    threads than cores, this one included (False where that is unknown)."""
    running = _runnable()
    return running is not None and running <= _CORES


async def spin_until(done: Callable[[], bool], expected_s: float | None) -> None:
    """Wait for another task's message with the event loop polling instead of
    sleeping in the kernel, for at most SPIN_S, when it should come within
    SPIN_S by last step's timing (``expected_s``: seconds from now, None
    when unknown) and a core would idle anyway.

    On a VM, a message that must wake a halted virtual CPU costs both sides
    0.1-0.7 ms (a loopback round trip takes ~200 us between idle cores and
    ~30 us between busy ones): a worker waiting for its variables, or for a
    ps's answer, and a ps waiting for a worker's next step (see
    WorkerService._linger) pay that every step. A spinning loop's core never halts.
    The spin ends as soon as more threads want to run than there are cores,
    so it never takes a core from work; a long wait (a ps waiting for a
    gradient) never spins."""
    if expected_s is None or expected_s >= SPIN_S or done() or not _core_idle_while_waiting():
        return
    end = time.perf_counter() + SPIN_S
    n = 0
    while not done():
        await asyncio.sleep(0)   # one loop iteration: polls the sockets, never blocks
        n += 1
        if n & 3 == 0 and (time.perf_counter() > end or not _core_idle_while_waiting()):
            return


def _kernel_pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(_inter_op_threads(), thread_name_prefix="distrib-kernel")
    return _POOL


def _pick(heavy_ready: list[int], priority: list[float], cost: list[float],
          lowest: bool = False) -> int:
    """Where in ``heavy_ready`` the kernel with the highest bottom level is
    (``lowest``: the lowest); of equals, the one costlier by itself (so the
    step's last heavy kernel is a short one, and what waits for it, often a
    ps applying a gradient, waits less), then the first."""
    best = 0
    for k in range(1, len(heavy_ready)):
        i, j = heavy_ready[k], heavy_ready[best]
        if lowest:
            better = priority[i] < priority[j] or (priority[i] == priority[j] and cost[i] < cost[j])
        else:
            better = priority[i] > priority[j] or (priority[i] == priority[j] and cost[i] > cost[j])
        if better:
            best = k
    return best


def _weight(op: str, args: list[Any], attrs: dict[str, Any]) -> tuple[int, float]:
    """(0: light; 1: heavy, worth a thread beside other heavy work; 2: too long
    for the event loop's thread) and the cost in units of the heavy threshold
    (to order heavy kernels, see _priorities)."""
    if op == "MatMul" and len(args) == 2:
        a, b = args
        sa, sb = getattr(a, "shape", ()), getattr(b, "shape", ())
        if len(sa) == 2 and len(sb) == 2:
            # (m x k) @ (k x n): m * k * n multiply-adds, whichever operand is transposed
            flops = sa[0] * sa[1] * (sb[0] if attrs.get("transpose_b") else sb[1])
            return (2 if flops > _INLINE_MAX_FLOPS else 1 if flops >= _OFFLOOP_FLOPS else 0,
                    flops / _OFFLOOP_FLOPS)
    total = 0
    for a in args:
        total += getattr(a, "nbytes", 0)
    return (2 if total > _INLINE_MAX_BYTES else 1 if total >= _OFFLOOP_BYTES else 0,
            total / _OFFLOOP_BYTES)


def _to_device(args: list[Any], dev: tuple[str, int]) -> list[Any]:
    from kernels import devices
    return [a if devices.is_device_array(a) else devices.to_device(np.asarray(a), dev[1])
            for a in args]


def _as_var_value(value: Any, attrs: dict[str, Any], name: str, dev: tuple[str, int]) -> Any:
    """The variable's own copy of an assigned value (on the CPU: in the
    shared-memory arena when it is big enough, see variable_store)."""
    dtype = attrs.get("dtype")
    src = np.asarray(_host(value), dtype=dtype) if dtype else np.asarray(_host(value))
    shape = attrs.get("shape")
    if attrs.get("validate_shape", True) and shape is not None and None not in shape \
            and list(src.shape) != list(shape):
        raise InvalidArgumentError(
            f"cannot assign a value of shape {list(src.shape)} to variable {name} of shape "
            f"{list(shape)}; pass validate_shape=False to change its shape")
    if dev[0] == "GPU":
        from kernels import devices
        return devices.to_device(np.array(src), dev[1])
    arr = shared_empty(src.shape, src.dtype)
    np.copyto(arr, src)
    return arr


def _run_stateful(node: Node, args: list[Any], store: VariableStore, wanted: bool,
                  dev: tuple[str, int]) -> list[Any]:
    op, attrs, name = node["op"], node["attrs"], node["attrs"].get("var")
    if op == "VariableV2":
        return [store.get(name, node["name"])]   # no copy: the store copies on write
    if op == "IsVariableInitialized":
        return [np.array(name in store)]
    if op == "Assign":
        store.set(name, _as_var_value(args[0], attrs, name, dev))
        return [args[0]]
    if op in ("AssignAdd", "AssignSub"):
        cur = store.writable(name, node["name"])
        delta = np.asarray(_host(args[0]), dtype=cur.dtype)
        if op == "AssignAdd":
            np.add(cur, delta, out=cur)
        else:
            np.subtract(cur, delta, out=cur)
        return [cur if wanted else None]
    if op == "ApplyGradientDescent" and dev[0] == "CPU" and len(args) == 2:
        # the hot update of parameter servers: written out of place when a
        # reader holds the current version, instead of copy + update
        cur, out = store.update_target(name, node["name"])
        try:
            cpu_update.gradient_descent_into(out, cur, args[0], args[1])
        except BaseException:
            if out is not cur:
                store.set(name, cur)  # a bad gradient leaves the variable as it was
            raise
        return [out if wanted else None]
    var = store.writable(name, node["name"])
    slots = [store.writable(attrs[k], node["name"]) for k in _SLOTS[op]]
    fn = kernels.get_kernel(op, dev[0] if kernels.has_kernel(op, dev[0]) else "CPU")
    fn([var, *slots, *args], attrs)
    return [var if wanted else None]


_SLOTS = {
    "ApplyGradientDescent": (),
    "ApplyMomentum": ("accum",),
    "ApplyAdagrad": ("accum",),
    "ApplyAdam": ("m", "v"),
}


# evaluate() runs a graph in this process without a server (tests, debugging);
# it lives in its own module and is re-exported here, where callers look for it
from distrib.local_eval import evaluate  # noqa: E402,F401
