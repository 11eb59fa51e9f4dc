"""The master service of a task: sessions, step planning and step dispatch.

A client sends its GraphDef once per graph version (``create_session`` /
``extend_session``), then steps (``run``). For each distinct (fetches,
targets, fed tensors) the master prunes, places and partitions the graph once
(``distrib.runtime.step.plan``), registers each partition on its task's worker once per
incarnation of that task, and from then on a step is one ``run_partition``
call per involved task, all at once, under one step id. Only the tasks a step
uses are contacted: a dead task that the step does not touch cannot hang it.

When any partition fails, the master tells every other involved worker to
abort the step (their pending receives fail at once) and raises the first
error, which names the task and op, and as its ``peer`` the task whose
failure caused it (one it could not reach or lost, say) when known.

A traced step (run option ``trace_level``, ``output_partition_graphs``)
asks each task for its record and returns the fetches and then the step's
metadata (``step_trace.metadata_record``), which the session takes off.

What the master keeps per session and per task, and the checks on what a
client sends (its GraphDef, config, a run's arguments), are
:mod:`distrib.runtime.step.sessions`.

Counters for benchmarks (``stats`` / ``reset_stats``): steps run, partition
calls to other tasks (each one request and one reply message), bytes fed and
fetched.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
from typing import Any

from distrib import errors
from distrib.client.run_metadata import PARTITION_GRAPHS_OPTION, TRACE_OPTION
from distrib.errors import (
    AbortedError,
    OpError,
    PartitionUnregisteredError,
    PeerRestartedError,
    SessionClosedError,
    UnavailableError,
)
from distrib.runtime.actors.system import ActorSystem, caller_key, session_gc_s
from distrib.runtime.core.kernel_pool import spin_until
from distrib.runtime.step.device_filters import place_filtered
from distrib.runtime.step.doors import RegisterPartition, WorkerDoor
from distrib.runtime.step.graph_optimizer import optimize_partitions
from distrib.runtime.step.plan import partition, prune, tensor_op
from distrib.runtime.step.sessions import (
    SessionState,
    StepPlan,
    TaskState,
    check_options,
    check_run,
    find_session,
    index_graph,
    split_task,
)
from distrib.runtime.step.step_trace import metadata_record

logger = logging.getLogger(__name__)

_WAIT_LOG_S = 1.0  # a task slower than this to answer is named in a warning
# how long closing a session waits for its aborted steps to end (a client's
# close_session call gives up after 5 s)
_CLOSE_WAIT_S = 2.0


class MasterService:
    """Actor "master" of every task."""

    def __init__(self, system: ActorSystem, cluster: Any, job: str, task_index: int) -> None:
        self.system = system
        self.cluster = cluster
        self.job = job
        self.task_index = task_index
        self.task = f"/job:{job}/task:{task_index}"
        self._sessions: dict[str, SessionState] = {}
        self._tasks: dict[str, TaskState] = {}
        self._status_locks: dict[str, asyncio.Lock] = {}
        self._workers: dict[str, WorkerDoor] = {}   # task -> the door of its worker
        self._plan_ids = itertools.count(1)
        self._valid = {j: list(cluster.task_indices(j)) for j in cluster.jobs}
        self._joined: dict[str, str] = {}   # task -> address: tasks that joined later (add_task)
        system.on_peer_lost.append(self._peer_lost)
        self.counters = _zero_counters()

    def stats(self) -> dict[str, int]:
        return {**self.counters, "sessions_open": len(self._sessions)}

    def reset_stats(self) -> None:
        self.counters = _zero_counters()

    def cluster_info(self) -> dict[str, Any]:
        """This task's name and its cluster ({job: {index: address}}): what a
        Supervisor on this task needs to find the chief's arbiter and the ps
        tasks."""
        return {"task": self.task,
                "cluster": {j: {str(i): self.address_of(f"/job:{j}/task:{i}")
                                for i in self.cluster.task_indices(j)}
                            for j in self.cluster.jobs}}

    # -- addresses -------------------------------------------------------------
    def add_task(self, task: str, address: str) -> None:
        """``task`` joined after this master started (an elastic launch): steps
        may be placed on it, at ``address`` (a task known already keeps its own)."""
        job, idx = split_task(task)
        if idx not in self._valid.setdefault(job, []):
            self._valid[job].append(idx)
            self._joined[task] = address

    def address_of(self, task: str) -> str:
        if task == self.task:
            return self.system.address
        if task in self._joined:
            return self._joined[task]
        job, idx = split_task(task)
        return self.cluster.task_address(job, idx)

    def worker(self, task: str) -> WorkerDoor:
        door = self._workers.get(task)
        if door is None:
            door = self._workers[task] = WorkerDoor.at(self.system, self.address_of(task))
        return door

    def _peer_lost(self, address: str, peer: Any) -> None:
        for task, st in list(self._tasks.items()):
            if self.address_of(task) == address or peer.name == task:
                self._tasks.pop(task, None)
        # the sessions of a client whose connection closed: freed unless it
        # comes back within the grace period (a dead client never does)
        gone = (peer.name, peer.incarnation)
        for s in self._sessions.values():
            if s.owner == gone and s.collect is None:
                s.collect = asyncio.get_running_loop().call_later(
                    session_gc_s(), self._collect_session, s.handle)

    def _collect_session(self, handle: str) -> None:
        s = self._sessions.get(handle)
        if s is None or s.collect is None:
            return
        logger.info("%s: closing session %s: its client %s has been gone for %gs",
                    self.task, handle, s.owner[0] if s.owner else "?", session_gc_s())
        self.system.spawn_task(self.close_session(handle), "close_session")

    # -- sessions --------------------------------------------------------------
    def create_session(self, graph_def: dict[str, Any], config: dict[str, Any] | None = None) -> str:
        check_options(config, "config")
        handle = os.urandom(8).hex()
        self._sessions[handle] = SessionState(handle, index_graph(graph_def), graph_def.get("version", 0),
                                               dict(config or {}), owner=caller_key())
        return handle

    def extend_session(self, handle: str, graph_def: dict[str, Any]) -> int:
        s = find_session(self._sessions, handle, self.task)
        s.nodes = index_graph(graph_def)   # checked before anything changes
        s.version = graph_def.get("version", s.version + 1)
        s.plans.clear()
        return s.version

    async def close_session(self, handle: str) -> bool:
        s = self._sessions.pop(handle, None)
        if s is None:
            return False
        if s.collect is not None:
            s.collect.cancel()
        await self._end_steps(s)
        for task, st in list(self._tasks.items()):
            keys = [k for k in st.registered if k.startswith(handle)]
            if not keys:
                continue
            st.registered.difference_update(keys)
            try:
                await self.worker(task).deregister_partitions(handle, timeout=5)
            except OpError as e:
                logger.debug("could not deregister on %s: %s", task, e)
        return True

    async def _end_steps(self, s: SessionState) -> None:
        """Abort the steps of a closing session (a step blocked in a queue or
        accumulator wait would otherwise wait forever, and take the next token
        or gradient sum with it), then wait a little for their runs to end, so
        that each run's error reaches its caller before the close returns."""
        s.closed = True
        if s.runs == 0:
            return
        wire = errors.to_wire(SessionClosedError(
            f"the session was closed while the step waited (session {s.handle})",
            task=self.task))
        await asyncio.gather(*(self._tell_abort(t, step, wire)
                               for step, tasks in list(s.steps.items()) for t in tasks))
        s.drained = asyncio.Event()
        try:
            await asyncio.wait_for(s.drained.wait(), _CLOSE_WAIT_S)
        except asyncio.TimeoutError:
            logger.warning("%s: %d step(s) of closed session %s still running after %gs",
                           self.task, s.runs, s.handle, _CLOSE_WAIT_S)

    async def list_devices(self) -> list[dict[str, Any]]:
        tasks = [(job, idx) for job in self.cluster.jobs for idx in self.cluster.task_indices(job)]
        # all tasks at once: each down task costs a connect deadline, which must
        # not add up over the cluster
        statuses = await asyncio.gather(*(self._status_or_none(f"/job:{j}/task:{i}")
                                          for j, i in tasks))
        out = []
        for (job, idx), st in zip(tasks, statuses):
            for d in (st or {}).get("devices", []):
                out.append({"name": f"/job:{job}/replica:0/task:{idx}/device:{d['name']}",
                            "device_type": d["name"].split(":")[0],
                            "memory_limit_bytes": d.get("memory_bytes", 0)})
        return out

    async def _status_or_none(self, task: str) -> dict[str, Any] | None:
        try:
            return await self.worker(task).get_status(timeout=2.0)
        except OpError as e:
            logger.info("list_devices: %s unreachable (%s)", task, e)
            return None

    # -- steps -----------------------------------------------------------------
    async def run(self, handle: str, fetches: list[str], targets: list[str],
                  feeds: dict[str, Any], options: dict[str, Any] | None = None) -> list[Any]:
        s = find_session(self._sessions, handle, self.task)
        feeds = check_run(s.nodes, fetches, targets, feeds, options)
        opts = {**s.config, **(options or {})}
        plan = self._plan(s, fetches, targets, feeds)
        c = self.counters
        c["steps"] += 1
        c["feed_bytes"] += sum(getattr(v, "nbytes", 0) for v in feeds.values())
        s.runs += 1
        try:
            return await self._run_attempts(s, plan, feeds, opts)
        except OpError as e:
            if not s.closed or isinstance(e, (UnavailableError, SessionClosedError)):
                raise
            # whatever the step saw first (an aborted receive, say), the cause is the close
            raise SessionClosedError("the session was closed while the step waited: "
                                     f"{e.message}", task=e.task, op=e.op,
                                     peer=e.peer) from None
        finally:
            s.runs -= 1
            if s.runs == 0 and s.drained is not None:
                s.drained.set()

    async def _run_attempts(self, s: SessionState, plan: StepPlan, feeds: dict[str, Any],
                            opts: dict[str, Any]) -> list[Any]:
        c = self.counters
        for attempt in range(2):
            try:
                out = await self._run_step(s, plan, feeds, opts)
                c["fetch_bytes"] += sum(getattr(v, "nbytes", 0) for v in out)
                return out
            except PartitionUnregisteredError as e:
                if attempt:
                    raise
                # a worker restarted since we registered: forget it and register again
                self._tasks.pop(e.task or "", None)
            except PeerRestartedError:
                # our view of some task's incarnation is stale: contact the step's
                # tasks afresh next time, or every retry would abort the same way
                for t in plan.parts:
                    self._tasks.pop(t, None)
                raise
        raise AssertionError("unreachable")

    def _plan(self, s: SessionState, fetches: list[str], targets: list[str],
              feeds: dict[str, Any]) -> StepPlan:
        key = (tuple(fetches), tuple(targets), tuple(sorted(feeds)))
        plan = s.plans.get(key)
        if plan is None:
            order = prune(s.nodes, fetches, targets, feeds)
            placed = place_filtered(s.nodes, order, default_job=self.job, default_task=self.task_index,
                                    tasks=self._valid, filters=s.config.get("device_filters"))
            full = [f"{tensor_op(t)[0]}:{tensor_op(t)[1]}" for t in fetches]
            parts = partition(s.nodes, order, placed, full, feeds, targets)
            # each partition rewritten once, here, before it is registered and cached
            optimize_partitions(parts, s.nodes, targets, s.config.get("graph_options"))
            plan = StepPlan(f"{s.handle}/{next(self._plan_ids)}", parts, full,
                             {t: self.address_of(t) for t in parts})
            s.plans[key] = plan
        return plan

    async def _ensure_task(self, task: str, limit: float | None) -> TaskState:
        st = self._tasks.get(task)
        if st is not None:
            return st
        lock = self._status_locks.setdefault(task, asyncio.Lock())
        async with lock:
            st = self._tasks.get(task)
            if st is None:
                status = await self._contact(task, limit)
                st = self._tasks[task] = TaskState(int(status["incarnation"]))
        return st

    async def _contact(self, task: str, limit: float | None) -> dict[str, Any]:
        addr = self.address_of(task)
        call = asyncio.ensure_future(self.worker(task).get_status(timeout=limit or 30.0))
        # a session waits only for the tasks its graph uses; when it waits, say for whom
        done, _ = await asyncio.wait([call], timeout=_WAIT_LOG_S)
        if not done:
            logger.warning("%s: waiting for %s at %s", self.task, task, addr)
        try:
            return await call
        except UnavailableError as e:
            raise UnavailableError(f"{task} is unavailable: {e.message}",
                                   task=self.task, peer=task) from None

    async def _prepare(self, task: str, plan: StepPlan, soft: bool, limit: float | None,
                       log_placement: bool = False) -> int:
        st = await self._ensure_task(task, limit)
        if plan.key not in st.registered:
            part = plan.parts[task]
            try:
                await self.worker(task).register_partition(
                    RegisterPartition(key=plan.key, nodes=part.nodes, fetches=part.fetches,
                                      soft_placement=soft, feeds=part.feeds,
                                      log_placement=log_placement),
                    timeout=limit or 60.0)
            except OpError as e:
                if task != self.task:
                    _blame(e, task)
                raise
            st.registered.add(plan.key)
        return st.incarnation

    async def _run_step(self, s: SessionState, plan: StepPlan, feeds: dict[str, Any],
                        opts: dict[str, Any]) -> list[Any]:
        soft = bool(opts.get("allow_soft_placement", False))
        timeout = opts.get("operation_timeout_s")
        term = opts.get("fencing_term")   # a chief-only write (see runtime/chief/fencing.py)
        tasks = plan.tasks
        incarnations = self._ready_incarnations(plan)
        if incarnations is None:
            # operation_timeout_s bounds the control calls too: a stuck task must not hold
            # a step for the 30-60 s defaults of get_status/register_partition
            placement = bool(opts.get("log_device_placement", False))
            incs = await asyncio.gather(*(self._prepare(t, plan, soft, timeout, placement)
                                          for t in tasks))
            incarnations = dict(zip(tasks, incs))
        if s.closed:   # closed while this step was being prepared: nobody would end it
            raise SessionClosedError("the session was closed while the step waited "
                                     f"(session {s.handle})", task=self.task)
        step = random.getrandbits(62)
        s.steps[step] = tasks
        # a traced step (RunOptions.trace_level, output_partition_graphs): its
        # values then end with the step's metadata (step_trace.metadata_record)
        graphs = bool(opts.get(PARTITION_GRAPHS_OPTION))
        trace = bool(opts.get(TRACE_OPTION))
        try:
            if trace or graphs:
                return await self._traced(plan, feeds, step, incarnations, timeout, term,
                                          trace, graphs)
            return await self._dispatch(plan, feeds, step, incarnations, timeout, term)
        finally:
            s.steps.pop(step, None)

    async def _traced(self, plan: StepPlan, feeds: dict[str, Any], step: int,
                      incarnations: dict[str, int], timeout: float | None, term: Any,
                      trace: bool, graphs: bool) -> list[Any]:
        records: dict[str, Any] = {}
        values = await self._dispatch(plan, feeds, step, incarnations, timeout, term,
                                      records if trace else None)
        parts = {t: p.nodes for t, p in plan.parts.items()} if graphs else None
        return [*values, metadata_record(records, parts)]

    async def _dispatch(self, plan: StepPlan, feeds: dict[str, Any], step: int,
                        incarnations: dict[str, int], timeout: float | None,
                        term: Any, records: dict[str, Any] | None = None) -> list[Any]:
        """The step's fetched values; ``records`` (a traced step): each
        task's trace record goes there."""
        trace = records is not None
        tasks = plan.tasks
        call_timeout = None if timeout is None else timeout + 5.0
        if len(tasks) == 1 and tasks[0] == self.task:
            # the common local step: no fan-out, no task, straight into the worker
            part = plan.parts[self.task]
            out = await self._local_worker.run_partition(
                plan.key, step, {n: feeds[n] for n in part.feeds}, incarnations,
                plan.peers, timeout, term, trace)
            return self._collect(plan, feeds, {self.task: out}, records)
        calls = {}
        for t in tasks:
            part = plan.parts[t]
            local_feeds = {n: feeds[n] for n in part.feeds}
            if t == self.task:
                calls[t] = asyncio.ensure_future(self._local_worker.run_partition(
                    plan.key, step, local_feeds, incarnations, plan.peers, timeout, term, trace))
            else:
                self.counters["remote_calls"] += 1
                calls[t] = self.worker(t).run_partition(
                    plan.key, step, local_feeds, incarnations, plan.peers, timeout, term,
                    trace, timeout=call_timeout)
        if len(calls) == 1:
            (t, fut), = calls.items()
            try:
                out = await fut
            except OpError as e:
                if t != self.task:
                    _blame(e, t)
                raise
            return self._collect(plan, feeds, {t: out}, records)
        return self._collect(plan, feeds, await self._gather_step(step, calls, plan), records)

    @property
    def _local_worker(self) -> Any:
        return self.system.actor("worker")

    def _ready_incarnations(self, plan: StepPlan) -> dict[str, int] | None:
        """The incarnations of the step's tasks when all are known and hold the
        plan already (every step after the first), else None."""
        out = {}
        for t in plan.tasks:
            st = self._tasks.get(t)
            if st is None or plan.key not in st.registered:
                return None
            out[t] = st.incarnation
        return out

    @staticmethod
    def _collect(plan: StepPlan, feeds: dict[str, Any], results: dict[str, list],
                 records: dict[str, Any] | None = None) -> list[Any]:
        values: dict[str, Any] = dict(feeds)
        for t, out in results.items():
            values.update(zip(plan.parts[t].fetches, out))
            if records is not None:   # a traced step: the record after the fetches
                records[t] = out[-1]
        return [values[f] for f in plan.fetches]

    async def _gather_step(self, step: int, calls: dict[str, asyncio.Future],
                           plan: StepPlan) -> dict[str, list]:
        pending = set(calls.values())
        local = calls.get(self.task)
        tail_from = None   # when this task's part ended, with others still to answer
        while pending:
            if tail_from is None and local is not None and local.done():
                tail_from = time.perf_counter()
                await spin_until(lambda: all(f.done() for f in pending), plan.tail_s)
            # (each completion, so the wait above starts when this task's part ends)
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if tail_from is not None and not pending:
                plan.tail_s = time.perf_counter() - tail_from
            failed = [f for f in done if f.exception() is not None]
            if failed:
                for t, fut in calls.items():
                    if fut in failed and t != self.task:
                        _blame(fut.exception(), t)
                first = _primary_error(failed)
                wire = errors.to_wire(first, task=self.task)
                for t, fut in calls.items():
                    if fut in pending:
                        # the late replies are not awaited: retrieve them so that
                        # asyncio does not log "exception was never retrieved"
                        fut.add_done_callback(_discard)
                        # fire and forget: telling a task whose connection is gone
                        # means reconnecting, which must not delay the error either
                        self.system.spawn_task(self._tell_abort(t, step, wire),
                                                f"abort_step on {t}")
                # Raise now, not after the other partitions return: a task that is
                # stuck (not dead) would otherwise hold the step for its call timeout,
                # well past the operation timeout that failed it.
                raise first
        return {t: f.result() for t, f in calls.items()}

    async def _tell_abort(self, task: str, step: int, wire: dict[str, Any]) -> None:
        try:
            await self.worker(task).abort_step(step, wire)
        except OpError as e:
            logger.debug("could not abort step on %s: %s", task, e)


def _zero_counters() -> dict[str, int]:
    return {"steps": 0, "remote_calls": 0, "feed_bytes": 0, "fetch_bytes": 0}


def _discard(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


def _blame(e: BaseException | None, task: str) -> None:
    """Name ``task`` as ``e``'s failed peer when ``e`` is the failure of a call
    to it raised here, not there (no ``task``: it could not be reached, say):
    the actor system knows only the address it dialed, the master whose it is."""
    if isinstance(e, UnavailableError) and e.peer is None and e.task is None:
        e.peer = task


def _primary_error(failed: list[asyncio.Future]) -> BaseException:
    # an AbortedError is a consequence of another failure: report the cause
    excs = [f.exception() for f in failed]
    for e in excs:
        if not isinstance(e, AbortedError):
            return e  # type: ignore[return-value]
    return excs[0]  # type: ignore[return-value]
