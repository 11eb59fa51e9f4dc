"""Runs one partition of a graph on one task: the worker's inner loop.

A partition compiled once (:class:`~distrib.runtime.step.partition_graph.PartitionGraph`)
runs each step as a dataflow machine: a node runs as soon as its inputs are
ready, and ``_Recv`` nodes wait concurrently. Ordering by readiness, not by
list position, matters: two tasks that exchange tensors both ways would
deadlock if either blocked on a receive that the other can only satisfy
after its own receive.

Kernels come from the one registry in ``kernels`` and run inline on the
event loop's thread, or on the pool beside another heavy kernel, when too
long for the loop, or on a GPU node's first run with new argument types,
which may compile its kernels (:mod:`distrib.runtime.core.kernel_pool` says
when and why; the first run of a GPU variable's update goes there too).
Which nodes are heavy is learnt from the step before (the first step runs
inline).

Order: ready ops run depth first (the consumers a result unblocks come next,
so a value reaches its ``_Send`` early), light ops before heavy ones (so two
heavy ones can meet and run side by side), and of the ready heavy ones the
one on the critical path first (see ``PartitionGraph._priorities``). When two
heavy kernels run side by side, the critical one keeps the loop's thread and
the other goes to the pool (a backward pass's dX, which the next layer's
gradients wait for, and its dW, which only an update does). Tensors for
another task are batched by the step's channel and flushed before the
partition waits.

Memory and in-place kernels: :mod:`distrib.runtime.core.tensor_values`. Stateful
ops (variables, updates): :mod:`distrib.runtime.state.stateful`.

GPUs: an op on ``GPU:i`` runs with GPU i current on whichever thread runs it
(``kernels.cuda.devices.use_gpu``, one thread-local check when it already is), so
its launches, allocations (one pool per device), copies and default stream
are that GPU's; with several GPUs an input from another GPU is copied device
to device first. A GPU variable read in place (``PartitionGraph.read_var``)
is held by its step until the step ends (``GPU_READS``): an update of that
variable from another step meanwhile writes into a copy (``unshare``); the
update's check and write, and the read's taking of the buffer, are ordered by
``VariableStore.update_lock`` whenever an update runs off the loop
(:mod:`distrib.runtime.step.gpu_step`).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, NoReturn

import kernels
from distrib.errors import InvalidArgumentError, NotFoundError, OpError, UnknownError
from distrib.framework.op_def import op_types
from distrib.runtime.collective.engine import run_collective
from distrib.runtime.core import kernel_pool
from distrib.runtime.core.step_waits import Pending, StepChannel, flush_channel
from distrib.runtime.core.tensor_values import args_to_device, exclusive, host_array, shape_stand_in
from distrib.runtime.state.resources import run_resource_op
from distrib.runtime.state.stateful import run_stateful
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.gpu_step import (
    GPU_READS,
    device_feeds,
    hold_reads,
    locked_read,
    locked_update,
    on_gpu,
    unshare,
    update_done,
)
from distrib.runtime.step.partition_graph import UPDATE_WRITES, PartitionGraph
from distrib.runtime.step.step_trace import StepTrace, active_trace
from kernels.cuda import devices
from kernels.cuda.fusion import fuse_gpu_nodes

logger = logging.getLogger(__name__)

__all__ = ["CompiledPartition", "RunStats"]

# ops without a kernel that the run loop hands to the task's collective engine
# and resource store (facts of the op catalogue, derived once: a set test per op)
_COLLECTIVE_OPS = op_types(lambda d: d.is_collective)
_RESOURCE_OPS = op_types(lambda d: d.is_resource)
_UPDATES = op_types(lambda d: d.is_update)
# updates of a GPU variable that launch a kernel (Assign only copies the value in)
_GPU_KERNEL_UPDATES = _UPDATES - {"Assign"}


class CompiledPartition(PartitionGraph):
    """A compiled partition that runs steps (the dataflow loop)."""

    def __init__(self, nodes: list, fetches: list[str], **kwargs: Any) -> None:
        # on a task with GPUs, GPU patterns fused into one kernel (kernels.cuda.fusion)
        nodes = fuse_gpu_nodes(nodes, fetches, kwargs.get("gpu_count", 0), kwargs.get("feeds", ()))
        super().__init__(nodes, fetches, **kwargs)
        # (GPU node, argument dtypes and shapes) that have run once: the first
        # such run may compile its kernels and goes to the pool (kernel_pool.launch_key)
        self.gpu_warm: set[tuple] = set()
        # fed tensors whose every consumer runs on one GPU: copied there once a step
        self.device_feeds = device_feeds(self.inputs, self.shape_only, self.devices)
        # several GPUs: a device array from another GPU is copied to the op's (device to device)
        self.multi_gpu = len({d for d in self.devices if d[0] != "CPU"}) > 1
        # the variables this partition reads in place on a GPU, and how many times
        self.gpu_reads: dict[str, int] = {}
        # the VariableV2 nodes whose buffer such a read takes (see GPU_READS)
        self.held_fetch = [False] * len(self.nodes)
        for i, var in enumerate(self.read_var):
            if var is not None:
                self.gpu_reads[var] = self.gpu_reads.get(var, 0) + 1
                self.held_fetch[self.inputs[i][0][0]] = True  # type: ignore[index]

    def _on_device(self, i: int, args: list[Any], feeds: dict[str, Any],
                   dev: tuple[str, int]) -> list[Any]:
        """A GPU node's inputs on its device; a fed tensor that only this
        device reads is copied once per step: the copy replaces it in the
        step's own feeds dict for its other consumers."""
        if self.multi_gpu:   # (kernels.cuda.devices.to_device: host arrays in, other GPUs' across)
            args = [devices.to_device(a, dev[1]) for a in args]
        else:
            args = args_to_device(args, dev)
        if self.device_feeds:
            for k, ref in enumerate(self.inputs[i]):
                if type(ref) is str and self.device_feeds.get(ref) == dev:
                    feeds[ref] = args[k]
        return args

    def _cold_gpu_run(self, i: int, args: list[Any]) -> tuple | None:
        """The key of node ``i``'s GPU run on ``args`` when none like it has
        finished yet (numba may compile now: it must not hold the loop), else None."""
        key = kernel_pool.launch_key(i, args)
        if key in self.gpu_warm:
            return None
        if len(self.gpu_warm) >= 4096:   # shapes that never repeat: forget, stay bounded
            self.gpu_warm.clear()
        return key

    def _to_pool(self, key: tuple | None, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the kernel pool; a cold GPU run's key turns warm when it succeeds."""
        trace = active_trace()   # a traced step's kernels run in its context (its counters)
        pool = kernel_pool.thread_pool()
        fut = pool.submit(fn, *args) if trace is None else trace.submit(pool, fn, args)
        if key is not None:
            fut.add_done_callback(lambda f: not f.cancelled() and f.exception() is None
                                  and self.gpu_warm.add(key))
        return fut

    async def run(self, feeds: dict[str, Any], variables: VariableStore,
                  channel: StepChannel | None = None, stats: RunStats | None = None,
                  trace: StepTrace | None = None) -> list[Any]:
        """Run one step; returns the values of ``self.fetches`` (on the host).
        ``trace``: a traced step's recorder (step_trace.py): the one check a
        run makes for it; its ops then run through its timed wrappers."""
        run_node = self._run_node if trace is None else trace.node_runner(self._run_node)
        result = self._result if trace is None else trace.result_taker(self._result)
        n = len(self.nodes)
        values: list[list[Any] | None] = list(self.start_values)   # folded constants
        shapes: list[list[Any] | None] = list(self.start_shapes)   # for shape-only readers
        remaining = list(self.indegree)
        uses = list(self.uses)
        ready = list(reversed(self.sources))   # a stack: see _finished
        heavy_ready: list[int] = []            # ready nodes that were heavy last step
        pending = Pending()
        for i in self.recv_nodes:
            if remaining[i] == 0:
                self._expect(i, channel, pending)
        done = self.n_folded
        # seconds in kernels (summed over threads), in-place kernels, and every
        # kernel's (start, end) span (for the time in which any kernel ran)
        clock: list[Any] = [0.0, 0, []]
        on_pool: list[Any] = []   # this step's kernels on the pool (concurrent futures)
        pooled = [0]              # how many went there
        collectives: list[asyncio.Future] = []   # this step's collectives, started
        if self.gpu_reads:   # held until the step ends (see GPU_READS)
            hold_reads(variables, self.gpu_reads, 1)
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
                                   and kernel_pool.may_offload(on_pool))
                        i = heavy_ready.pop(kernel_pool.pick_heavy(
                            heavy_ready, self.priority, self.heavy, lowest=to_pool))
                        await flush_channel(channel, early=True)  # the other task gets on meanwhile
                        if collectives and not all(f.done() for f in collectives):
                            # a started all-reduce (a gradient's) moves on between the
                            # backward pass's kernels instead of after all of them
                            await asyncio.sleep(0)
                    out = run_node(i, values, uses, feeds, variables, channel,
                                   clock, heavy_ready, on_pool, shapes)
                    if type(out) is not list:
                        if not asyncio.isfuture(out):
                            await self._sent(i, out)   # a send waiting for its connection
                            out = []
                        else:   # a heavy kernel now on the pool, or a waiting resource op
                            pending.add(out, i)
                            if self.nodes[i]["op"] in _COLLECTIVE_OPS:
                                collectives.append(out)
                            pooled[0] += self.kernels[i] is not None
                            continue
                    if self.keeps_shape[i]:
                        shapes[i] = [shape_stand_in(o) for o in out]
                    values[i] = out if self.uses[i] else None
                    out = None   # values[i] alone holds it (see exclusive)
                    done += 1
                    self._finished(i, remaining, ready, pending, channel)
                if done < n:
                    await flush_channel(channel)
                    if not pending.futs:
                        raise UnknownError("partition stalled with no runnable op",
                                           task=self.task or None)
                    if pending.since and not pending.finished:
                        await kernel_pool.spin_until(lambda: bool(pending.finished),
                                                     self._eta(pending))
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
                                if trace is not None:   # its wait, this step's
                                    trace.starts[i] = since
                        out = result(i, fut, channel)
                        if self.keeps_shape[i]:
                            shapes[i] = [shape_stand_in(o) for o in out]
                        values[i] = out if self.uses[i] else None
                        out = None
                        done += 1
                        self._finished(i, remaining, ready, pending, channel)
                    finished = fut = None   # a finished future holds its result,
                    kernel_pool.running_on_pool(on_pool)   # and so does a pool one
            await flush_channel(channel)
            if self.heavy != self._priced:   # costs learnt (the first step) or changed
                self._priorities()
        finally:
            if self.gpu_reads:
                hold_reads(variables, self.gpu_reads, -1)
            for fut in pending.futs:
                fut.cancel()
            if stats is not None:
                stats.kernel_s += clock[0]
                stats.pool_kernels += pooled[0]
                stats.in_place_kernels += clock[1]
                stats.busy_s += kernel_pool.span_union(clock[2])
        try:
            return [self._fetched(values[i][out], variables)  # type: ignore[index]
                    for i, out in self.fetch_refs]
        except IndexError:   # a GraphDef without output_dtypes escaped the master's check
            bad = next(f for f, (i, out) in zip(self.fetches, self.fetch_refs)
                       if not 0 <= out < len(values[i] or ()))
            raise InvalidArgumentError(f"cannot fetch {bad!r}: its op has no such output",
                                       task=self.task or None) from None

    def _finished(self, i: int, remaining: list[int], ready: list[int],
                  pending: Pending, channel: StepChannel | None) -> None:
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

    def _expect(self, i: int, channel: StepChannel | None, pending: Pending) -> None:
        """Wait for the tensor of ``_Recv`` node ``i`` (the rendezvous's own
        future: no task per receive)."""
        attrs = self.nodes[i]["attrs"]
        if channel is None:
            raise UnknownError(f"op {self.nodes[i]['name']!r} receives from another task, "
                               "but this step has no channel", task=self.task or None)
        pending.add(channel.expect(attrs["key"], attrs["src_task"]), i,
                    None if channel.timeout is None else channel.timeout)
        pending.since[i] = time.perf_counter()

    def _eta(self, pending: Pending) -> float | None:
        """Seconds until the first pending receive's tensor should come, if it
        takes as long as it did last step (None: no receive has a history)."""
        now = time.perf_counter()
        soonest = None
        for i, since in pending.since.items():
            took = self.recv_took.get(i)
            if took is not None and (soonest is None or since + took - now < soonest):
                soonest = since + took - now
        return soonest

    def _overdue(self, pending: Pending, channel: StepChannel | None) -> Exception | None:
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
        value = host_array(value)
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
            dev = self.devices[i]
            if dev[0] != "CPU":
                # every launch, allocation, copy of this op on its own GPU
                devices.use_gpu(dev[1])
            if fn is not None:
                if self.alias[i]:
                    return [args[0]]
                if dev[0] != "CPU":
                    args = self._on_device(i, args, feeds, dev)
                else:
                    args = [host_array(a) for a in args]
                attrs = self.kernel_attrs[i]
                weight, cost = kernel_pool.weigh(self.flops_of[i], args, attrs)
                self.heavy[i] = cost if weight > 0 else 0.0
                cold = self._cold_gpu_run(i, args) if dev[0] != "CPU" else None
                if cold is not None or weight == 2 or (
                        weight == 1 and on_pool is not None and heavy_ready
                        and kernel_pool.may_offload(on_pool)):
                    fut = (self._to_pool(cold, kernel_pool.timed_kernel, fn, args, attrs, clock)
                           if dev[0] == "CPU" else
                           self._to_pool(cold, on_gpu, dev[1], kernel_pool.timed_kernel, fn,
                                         args, attrs, clock))
                    if on_pool is not None:
                        on_pool.append(fut)
                    return asyncio.wrap_future(fut)
                t0 = time.perf_counter()
                ip = self.in_place[i]
                out = None
                if ip is not None and exclusive(args, ip[0]):
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
                res = channel.send(attrs["key"], attrs["dst_task"],  # type: ignore[union-attr]
                                   host_array(args[0]))
                return [] if res is None else res
            if op in _COLLECTIVE_OPS:
                # a future, pending like a receive (collective.engine)
                return run_collective(node, [host_array(a) for a in args], channel, self.task)
            if op in _RESOURCE_OPS:
                # a waiting one (take, dequeue) returns a future, pending like a receive
                return run_resource_op(node, [host_array(a) for a in args], variables.resources,
                                       channel, self.task)
            if dev[0] != "CPU" and op in _UPDATES:
                cold = self._cold_gpu_run(i, args) if op in _GPU_KERNEL_UPDATES else None
                if cold is not None or variables.offloop_updates:
                    # its kernel may compile now: off the loop, and every GPU update
                    # behind it too until it is done (updates never overlap; and
                    # see GPU_READS)
                    variables.offloop_updates += 1
                    fut = self._to_pool(cold, locked_update, node, args, variables,
                                        self.wanted[i], dev, self.gpu_reads)
                    loop = asyncio.get_running_loop()
                    fut.add_done_callback(lambda _f: update_done(loop, variables))
                    return asyncio.wrap_future(fut)
            elif self.held_fetch[i] and variables.offloop_updates:
                # a buffer this step reads in place, which an update may be writing
                return asyncio.wrap_future(self._to_pool(None, locked_read, node, variables))
            if op in UPDATE_WRITES and GPU_READS:   # (on the loop: no update is off it now)
                unshare(node, variables, self.gpu_reads)
            t0 = time.perf_counter()
            out = run_stateful(node, args, variables, self.wanted[i], dev)
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


class RunStats:
    """Time a worker's partitions spent in kernels (summed over the pool's
    threads, so it can exceed the wall time), for benchmarks and tools."""

    __slots__ = ("kernel_s", "busy_s", "pool_kernels", "in_place_kernels")

    def __init__(self) -> None:
        self.kernel_s = 0.0
        self.busy_s = 0.0           # time in which at least one kernel ran
        self.pool_kernels = 0       # kernels that ran on the pool, not the loop's thread
        self.in_place_kernels = 0   # kernels that wrote into a dead input
