"""The worker service of a task: runs registered partitions, owns the task's
variables and its rendezvous table.

A step on this task: the master registers the partition once (compiled and
cached by key), then calls ``run_partition`` with a step id per step. ``_Send``
pushes a tensor straight to the consuming task's worker (one-way, worker to
worker; the step's channel holds tensors back per destination and sends
those ready together in one ``recv_tensors`` message); ``_Recv`` awaits it
in the rendezvous table under (step id, key) (:mod:`.rendezvous`). A traced
step (``run_partition(..., trace=True)``) runs through a
:class:`~.step_trace.StepTrace` and returns its record after the fetches.

The worker keeps a few counters (tensors, messages and bytes sent to and
received from other tasks, partitions run, time in them and in their kernels,
the process's CPU time); ``stats``
returns them and ``reset_stats`` zeroes them, so a benchmark can say what one
step costs.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable

import numpy as np

from distrib import errors
from distrib.errors import (
    AbortedError,
    InvalidArgumentError,
    NotFoundError,
    OpError,
    PartitionUnregisteredError,
    UnavailableError,
)
from distrib.runtime.actors.system import ActorSystem, caller_key, in_process_system, session_gc_s
from distrib.runtime.chief.fencing import Fence
from distrib.runtime.core import kernel_pool
from distrib.runtime.core.tensor_values import host_array
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.doors import WorkerDoor
from distrib.runtime.step.executor import CompiledPartition, RunStats
from distrib.runtime.step.rendezvous import Rendezvous
from distrib.runtime.step.step_trace import StepTrace
from transports.shm import ARENA

logger = logging.getLogger(__name__)

# Tensors for one task are held back and sent together in one message until
# this many bytes are waiting, or the partition is about to wait (``flush``):
# each message costs both processes a system call, a wake-up and tens of
# microseconds of Python (~90 us in all on a 2-core VM), and a parameter
# server's sends, or a layer's weight and bias gradients, come in bursts.
# Before a heavy kernel only batches of at least _FLUSH_EARLY_BYTES go, so
# the receiver can work on them meanwhile (a weight gradient's update); a few
# small tensors ride along with the next batch instead.
_FLUSH_BYTES = 1 << 20
_FLUSH_EARLY_BYTES = 1 << 16
# handles on other tasks' workers kept, by (address, task, incarnation)
_MAX_REFS = 1024


class _StepChannel:
    __slots__ = ("worker", "step", "peers", "incarnations", "timeout", "_out", "_out_bytes")

    def __init__(self, worker: WorkerService, step: int, peers: dict[str, str],
                 timeout: float | None, incarnations: dict[str, int] | None = None) -> None:
        self.worker = worker
        self.step = step
        self.peers = peers
        self.incarnations = incarnations or {}
        self.timeout = timeout
        self._out: dict[str, list[list[Any]]] = {}   # dst task -> [[key, value], ...]
        self._out_bytes: dict[str, int] = {}

    def send(self, key: str, dst_task: str, value: Any) -> Awaitable[None] | None:
        w = self.worker
        if dst_task == w.task:
            w.rendezvous.put(self.step, key, w.detached(value), w.task, w.system.incarnation)
            return None
        ref = w.peer(dst_task, self.peers, self.incarnations.get(dst_task)).ref
        if in_process_system(ref.address) is not None:
            value = w.detached(value)   # no wire in between to copy it
        nbytes = getattr(value, "nbytes", 0)
        w.counters["tensors_sent"] += 1
        w.counters["bytes_sent"] += nbytes
        self._out.setdefault(dst_task, []).append([key, value])
        if nbytes > _FLUSH_EARLY_BYTES and ARENA.lookup(value) is not None \
                and w.system.shares_memory_with(ref.address, ref.peer):
            # lent as it is to a peer on this host: no copy to spread out, but
            # still worth sending before a heavy kernel
            nbytes = _FLUSH_EARLY_BYTES
        waiting = self._out_bytes[dst_task] = self._out_bytes.get(dst_task, 0) + nbytes
        if waiting >= _FLUSH_BYTES:
            return self._flush_to(dst_task)
        return None

    def flush(self, early: bool = False) -> Awaitable[None] | None:
        """Send what is held back (``early``: only batches worth sending before
        a heavy kernel); None when there is nothing to send."""
        if not self._out:
            return None
        dsts = [d for d, n in self._out_bytes.items() if n >= _FLUSH_EARLY_BYTES] \
            if early else list(self._out)
        return self._flush_all(dsts) if dsts else None

    async def _flush_all(self, dsts: list[str]) -> None:
        for dst in dsts:
            await self._flush_to(dst)

    async def _flush_to(self, dst_task: str) -> None:
        items = self._out.pop(dst_task)
        del self._out_bytes[dst_task]
        w = self.worker
        w.counters["messages_sent"] += 1
        door = w.peer(dst_task, self.peers, self.incarnations.get(dst_task))
        try:
            if len(items) == 1:
                (key, value), = items
                await door.recv_tensor(self.step, key, value, w.task, w.system.incarnation)
            else:
                await door.recv_tensors(self.step, items, w.task, w.system.incarnation)
        except UnavailableError as e:   # not sent: the receiver is the task that failed
            if e.peer is None:
                e.peer = dst_task
            raise

    def expect(self, key: str, src_task: str) -> asyncio.Future:
        return self.worker.rendezvous.expect(self.step, key)

    def received(self, result: Any) -> Any:
        return self.worker.rendezvous.check(self.step, result)

    def overdue(self, key: str, src_task: str) -> Exception:
        return self.worker.rendezvous.overdue(key, src_task, self.timeout or 0.0)

    @property
    def collectives(self) -> Any:
        """The task's collective engine (runtime.collective.engine), if any."""
        return self.worker.collectives

    def aborted(self, tag: str) -> asyncio.Future:
        """A future that fails (AbortedError) when this step is aborted; ops that
        wait on a resource (a queue, an accumulator) race it so an abort frees them.

        An abort fails every pending receive of the step at once, so a receive
        of a key of its own that nobody sends is exactly that signal."""
        key = "\x00step-aborted/" + tag
        return asyncio.ensure_future(
            self.worker.rendezvous.get(self.step, key, self.worker.task, None))


class WorkerService:
    """Actor "worker" of every task."""

    def __init__(self, system: ActorSystem, task: str, devices: list[dict[str, Any]],
                 variables: VariableStore | None = None) -> None:
        self.system = system
        self.task = task
        self.devices = devices
        self.variables = variables or VariableStore(task)
        self.rendezvous = Rendezvous(task)
        self.collectives: Any = None   # the collective engine, set by the server
        self.fencing = Fence(task)   # the newest chief term seen (chief-only writes)
        self._partitions: dict[str, CompiledPartition] = {}
        # session handle -> generators of its seeded random ops (see register_partition)
        self._generators: dict[str, dict] = {}
        # partition key -> the remote master that registered it, and a timer per
        # such master whose connection closed (see _peer_lost)
        self._owners: dict[str, tuple[str, int]] = {}
        self._gone: dict[tuple[str, int], asyncio.TimerHandle] = {}
        system.on_peer_lost.append(self._peer_lost)
        self._refs: dict[tuple[str, str, int | None], WorkerDoor] = {}
        self._run_stats = RunStats()
        self.counters = _zero_counters()
        self._cpu_at_reset = time.process_time()
        # a remote master's steps: when its last one ended here, and how long
        # it then took to send the next (see _linger)
        self._started = 0
        self._ended_at: dict[tuple[str, int], float] = {}
        self._next_gap: dict[tuple[str, int], float] = {}
        # the polls _linger started: owned here, so stopping the service ends
        # them (a loop stopped under one would destroy it pending)
        self._lingering: set[asyncio.Task] = set()
        self._stopped = False

    def detached(self, value: Any) -> Any:
        """``value`` as another partition in this process may get it: copied
        if it is one of this task's stored variables (the receiver may hand it
        to a client that writes to it) or read-only (a folded constant: that
        client could not write to it)."""
        if self.variables.owns(value) or (type(value) is np.ndarray and not value.flags.writeable):
            return value.copy()
        if type(value) is np.ndarray and value.base is not None and ARENA.lookup(value) is not None:
            # a result computed into the shared arena for other tasks (a
            # weight's gradient) may be lent to a process on this host too: a
            # task here gets it read-only, as that process does
            view = value.view()
            view.flags.writeable = False
            return view
        return value

    @property
    def cpu_count(self) -> int:
        return sum(1 for d in self.devices if d["name"].startswith("CPU:"))

    @property
    def gpu_count(self) -> int:
        return sum(1 for d in self.devices if d["name"].startswith("GPU:"))

    def peer(self, task: str, peers: dict[str, str], incarnation: int | None = None) -> WorkerDoor:
        """The door of the worker of ``task``; with the ``incarnation`` a master
        found there, a tensor may go over the connection that task opened to us."""
        addr = peers.get(task)
        if addr is None:
            raise NotFoundError(f"no address for {task}", task=self.task)
        key = (addr, task, incarnation)
        door = self._refs.get(key)
        if door is None:
            if len(self._refs) >= _MAX_REFS:
                self._refs.clear()
            door = self._refs[key] = WorkerDoor.at(
                self.system, addr, None if incarnation is None else (task, incarnation))
        return door

    # -- messages --------------------------------------------------------------
    def get_status(self) -> dict[str, Any]:
        return {"task": self.task, "incarnation": self.system.incarnation,
                "devices": self.devices, "address": self.system.address,
                "term": self.fencing.term}

    def fence(self, term: int) -> int:
        """A new chief's announcement of its term: later writes of older
        chiefs are refused here (AbortedError if ``term`` is older itself)."""
        return self.fencing.admit(term)

    def register_partition(self, key: str, nodes: list, fetches: list,
                           soft_placement: bool = False, feeds: list | None = None,
                           log_placement: bool = False) -> bool:
        feeds = [] if feeds is None else feeds
        if not isinstance(key, str) or not isinstance(fetches, list) \
                or not all(isinstance(f, str) for f in fetches) or not isinstance(nodes, list) \
                or not isinstance(feeds, list) or not all(isinstance(f, str) for f in feeds) \
                or not all(isinstance(n, dict) and isinstance(n.get("name"), str)
                           and isinstance(n.get("op"), str) and isinstance(n.get("inputs"), list)
                           and isinstance(n.get("attrs", {}), dict) for n in nodes):
            raise InvalidArgumentError(
                "register_partition takes a key, a list of GraphDef nodes (dicts with a "
                "name, an op, a list of inputs and a dict of attrs), a list of fetch names "
                "and a list of fed tensor names",
                task=self.task)
        owner = caller_key()
        if owner is not None:
            self._back(owner)
            self._owners[key] = owner
        if key not in self._partitions:
            # a master's key is "<session handle>/<plan id>": the session's
            # partitions share the generators of its seeded random ops
            session = key.rpartition("/")[0]
            self._partitions[key] = CompiledPartition(
                nodes, fetches, task=self.task, soft_placement=soft_placement,
                gpu_count=self.gpu_count, cpu_count=self.cpu_count,
                generators=self._generators.setdefault(session, {}), feeds=feeds,
                log_placement=bool(log_placement))
            self.counters["partitions_registered"] += 1
        return True

    def deregister_partitions(self, prefix: str) -> int:
        gone = [k for k in self._partitions if k.startswith(prefix)]
        for k in gone:
            del self._partitions[k]
            self._owners.pop(k, None)
        for session in [s for s in self._generators if s.startswith(prefix)]:
            del self._generators[session]
        return len(gone)

    def _peer_lost(self, address: str, peer: Any) -> None:
        # a master that registered partitions here went away: they are freed
        # unless it comes back (and calls again) within the grace period; one
        # that does re-registers what it needs anyway (PartitionUnregisteredError)
        owner = (peer.name, peer.incarnation)
        if owner not in self._gone and owner in self._owners.values():
            self._gone[owner] = asyncio.get_running_loop().call_later(
                session_gc_s(), self._forget, owner)

    def _back(self, owner: tuple[str, int]) -> None:
        timer = self._gone.pop(owner, None)
        if timer is not None:
            timer.cancel()

    def _forget(self, owner: tuple[str, int]) -> None:
        self._gone.pop(owner, None)
        keys = [k for k, o in self._owners.items() if o == owner]
        for k in keys:
            self._partitions.pop(k, None)
            del self._owners[k]
        live = {k.rpartition("/")[0] for k in self._partitions}
        for session in {k.rpartition("/")[0] for k in keys} - live:
            self._generators.pop(session, None)
        logger.info("%s: dropped %d partition(s) of %s, gone for %gs", self.task, len(keys),
                    owner[0], session_gc_s())

    async def run_partition(self, key: str, step: int, feeds: dict[str, Any],
                            incarnations: dict[str, int], peers: dict[str, str],
                            op_timeout: float | None = None, term: int | None = None,
                            trace: bool = False) -> list[Any]:
        """Run one step of a registered partition; ``op_timeout``: the step's
        operation timeout (s); ``term``: the chief term of a chief-only write,
        refused if a newer chief was seen (fencing); ``trace``: record the
        step (step_trace.py), returned as one more value after the fetches."""
        if term is not None:
            self.fencing.admit(term)
        if self._gone:
            owner = caller_key()
            if owner is not None:
                self._back(owner)
        part = self._partitions.get(key)
        if part is None:
            raise PartitionUnregisteredError(
                f"partition is not registered on this task: {key}", task=self.task)
        caller = caller_key()
        self._started += 1
        if caller is not None:
            ended = self._ended_at.get(caller)
            if ended is not None:
                self._next_gap[caller] = time.perf_counter() - ended
        self.rendezvous.begin(step, incarnations)
        t0 = time.perf_counter()
        try:
            channel = _StepChannel(self, step, peers, op_timeout, incarnations)
            if trace:
                return await self._run_traced(part, feeds, channel)
            return await part.run(feeds, self.variables, channel, self._run_stats)
        except OpError as e:
            self.rendezvous.abort(step, e)
            raise
        finally:
            self.rendezvous.end(step)
            self.counters["partitions_run"] += 1
            self.counters["partition_s"] += time.perf_counter() - t0
            if caller is not None:
                self._linger(caller)

    async def _run_traced(self, part: CompiledPartition, feeds: dict[str, Any],
                          channel: _StepChannel) -> list[Any]:
        """A traced run: its fetches, then its record (StepTrace.to_wire)."""
        recorder = StepTrace(self.task, part)
        with recorder.scope():
            out = await part.run(feeds, self.variables, channel, self._run_stats, recorder)
        out.append(recorder.to_wire())
        return out

    def _linger(self, caller: tuple[str, int]) -> None:
        """After a remote caller's step (another task's master; or a client's,
        through this task's own master), keep the loop polling for its next
        one when that came within kernel_pool.SPIN_S last time (a training loop
        calls again at once) and a core would idle anyway.

        The master's request then finds this task awake: on a VM, waking a
        halted virtual CPU for it cost 0.3-0.7 ms (measured on a ps between
        one worker's steps), on the critical path of every step."""
        if self._stopped:   # a step cancelled by the shutdown ends after on_stop
            return
        if len(self._ended_at) >= 1024:
            self._ended_at.clear()
            self._next_gap.clear()
        self._ended_at[caller] = time.perf_counter()
        gap = self._next_gap.get(caller)
        if gap is None or gap >= kernel_pool.SPIN_S:
            return
        started = self._started
        task = asyncio.ensure_future(kernel_pool.spin_until(lambda: self._started != started, gap))
        self._lingering.add(task)
        task.add_done_callback(self._lingering.discard)

    async def on_stop(self) -> None:
        """The actor system is shutting down: end the lingering polls and the
        grace timers of lost masters, so nothing of this service stays
        scheduled on the loop."""
        self._stopped = True
        for timer in self._gone.values():
            timer.cancel()
        self._gone.clear()
        lingering = list(self._lingering)
        for task in lingering:
            task.cancel()
        # a poll ends within SPIN_S anyway; awaiting it makes it done, not just told
        await asyncio.gather(*lingering, return_exceptions=True)

    def recv_tensor(self, step: int, key: str, value: Any, src_task: str, incarnation: int) -> None:
        self.counters["tensors_received"] += 1
        self.counters["bytes_received"] += getattr(value, "nbytes", 0)
        self.rendezvous.put(step, key, value, src_task, incarnation)

    def recv_tensors(self, step: int, items: list, src_task: str, incarnation: int) -> None:
        """Several tensors of one step from one task: ``[[key, value], ...]``."""
        if not isinstance(items, list) or not all(
                isinstance(it, list) and len(it) == 2 and isinstance(it[0], str) for it in items):
            raise errors.InvalidArgumentError(
                "recv_tensors takes a list of [key, value] pairs", task=self.task)
        for key, value in items:
            self.recv_tensor(step, key, value, src_task, incarnation)

    def stats(self) -> dict[str, Any]:
        """The counters since the last ``reset_stats`` (see the module header)."""
        return {**self.counters, "partitions": len(self._partitions),
                "kernel_s": self._run_stats.kernel_s,
                "kernel_busy_s": self._run_stats.busy_s,
                "pool_kernels": self._run_stats.pool_kernels,
                "in_place_kernels": self._run_stats.in_place_kernels,
                # CPU time of this whole process (every thread, every service)
                "process_cpu_s": time.process_time() - self._cpu_at_reset}

    def reset_stats(self) -> None:
        self._cpu_at_reset = time.process_time()
        self.counters = _zero_counters()
        self._run_stats.kernel_s = 0.0
        self._run_stats.busy_s = 0.0
        self._run_stats.pool_kernels = 0
        self._run_stats.in_place_kernels = 0

    def abort_step(self, step: int, error: dict[str, Any]) -> None:
        if not isinstance(step, int) or not isinstance(error, dict):
            raise InvalidArgumentError("abort_step takes a step id and an error record",
                                       task=self.task)
        exc = errors.from_wire(error)
        abort = AbortedError(f"step aborted because another task failed: {exc}", task=self.task,
                             peer=exc.peer or exc.task)
        abort.__cause__ = exc   # its kind (a closed session, say) stays readable by type
        self.rendezvous.abort(step, abort)

    # variables, for Saver and tools
    def list_variables(self) -> dict[str, list]:
        return {n: [str(v.dtype), list(v.shape)] for n in self.variables.names()
                for v in [self.variables.get(n)]}

    def read_variables(self, names: list[str]) -> dict[str, Any]:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidArgumentError("read_variables takes a list of variable names",
                                       task=self.task)
        # copies: the caller (a Saver in this process, say) must never hold the
        # stored array itself, or writing to it would write into the store
        return {n: np.array(host_array(self.variables.get(n)), copy=True) for n in names}

    def write_variables(self, values: dict[str, Any]) -> int:
        if not isinstance(values, dict) or not all(isinstance(n, str) for n in values):
            raise InvalidArgumentError("write_variables takes a dict of name -> value",
                                       task=self.task)
        for n, v in values.items():
            self.variables.set(n, np.array(v, copy=True))
        return len(values)

    def ping(self) -> str:
        return self.task


def _zero_counters() -> dict[str, Any]:
    return {"tensors_sent": 0, "bytes_sent": 0, "messages_sent": 0,
            "tensors_received": 0, "bytes_received": 0,
            "partitions_run": 0, "partition_s": 0.0, "partitions_registered": 0}
