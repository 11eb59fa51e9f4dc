"""The collective engine of a task: actor ``collective``, and the entry point
the executor calls for the collective ops (``is_collective`` in the op
catalogue, :mod:`distrib.framework.op_def`).

One run of a collective op on a device goes:

1. *Group*: the member list of ``group_key``, cached, else asked of the group
   leader (:mod:`.group`), which answers once ``group_size`` devices joined.
2. *Instance*: ``(group_key, group signature, instance_key, seq)``: the nth run
   of an instance key on this device pairs with the nth on every other member.
3. *Header round*: every member sends every other its header (op, merge and
   final op, shape, dtype, algorithm), with the data when the tensor is small
   (collective_small); a mismatch fails all of them naming both sides.
4. *Data*: small tensors are done after the header round; large ones run the
   ring (collective.ring).

Never a silent hang: a watchdog logs the late participants (by device, with
what this one waits for) after half of the op's ``timeout_seconds``, and fails
the collective with ``DeadlineExceededError`` at the timeout; without a
timeout it logs every ``DISTRIB_COLLECTIVE_STALL_S`` (default 60 s) and keeps
waiting, as TF would, unless the members issued different collectives (a
cross wait: collective.stall), which fails every side at the next stall
check, or at the deadline, whichever comes first, with ``InvalidArgumentError``.
A group that waits for a member task that never comes (one named by
``expect_tasks``) fails naming it (collective.group); a member waits for
a group leader that has not started yet within the registration bound
(collective.registration). A member whose
connection is lost (a killed process closes its sockets; a stopped one
misses three heartbeats, see failure_detector) fails every live instance of
its groups with ``UnavailableError`` naming it; a member that restarted (new incarnation)
fails at once the instance a peer sends it. A step abort (another op of the
step failed) ends the collective with ``AbortedError``.

A failure poisons nothing: the failing member tells every other member
(``abort_instance``), which fail the same instance (or, when they have not
reached it yet, fail it at once when they do), and the instance's state is
dropped everywhere; the next collective runs on the same servers.
"""
from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict
from typing import Any

import numpy as np

from distrib import errors
from distrib.cluster import ClusterSpec
from distrib.errors import (
    AbortedError,
    DeadlineExceededError,
    InvalidArgumentError,
    OpError,
    UnavailableError,
)
from distrib.runtime.actors.system import ActorSystem, in_process_system, task_name
from distrib.runtime.collective.direct import DirectOp, EngineSide, Watch
from distrib.runtime.collective.doors import CollectiveDoor, deliver_now
from distrib.runtime.collective.group import Group, GroupLeader, Member, leader_task, task_address
from distrib.runtime.collective.instance import HEADER_TAG, Exchange, InstanceKey, InstanceTable, check_dtype
from distrib.runtime.collective.registration import Sayer, reach_until_registered
from distrib.runtime.collective.ring import ring_all_gather, ring_all_reduce
from distrib.runtime.collective.small import direct_result, exchange_headers
from distrib.runtime.collective.spec import CollectiveSpec, plan, segment_bytes, stall_s
from distrib.runtime.collective.stall import StallCheck
from distrib.runtime.core.step_waits import abort_signal, retrieve

logger = logging.getLogger(__name__)

__all__ = ["CollectiveEngine", "run_collective"]

_MAX_COUNTERS = 1 << 16


class CollectiveEngine:
    """Actor ``collective`` of every task (see the module header)."""

    def __init__(self, system: ActorSystem, task: str, cluster: ClusterSpec) -> None:
        self.system = system
        self.task = task
        self.cluster = cluster
        self.leader_task, self.leader_address = leader_task(cluster)
        self.leader = GroupLeader(
            task, lambda t: system.spawn_task(self._reach(t), f"reach collective member {t}"))
        # group key -> the tasks that make up the group, where the caller knows
        # them (see expect_tasks): every join names them, and the leader watches
        # those that have not joined (collective.group)
        self.expected_members: dict[int, tuple[str, ...]] = {}
        self._leader_reached = self.leader_task == task
        self._leader_lost = False   # this system heard the leader, then lost it
        self._say = Sayer()
        self.groups: dict[int, Group] = {}
        self.table = InstanceTable()
        self._counters: OrderedDict[tuple, int] = OrderedDict()
        self._refs: dict[tuple[str, str, int], CollectiveDoor] = {}
        self._specs: dict[int, tuple[dict, CollectiveSpec]] = {}   # id(node) -> its spec
        # what the collectives in flight without a task use of this engine
        self.stall_check = StallCheck(task, self.table, self.groups, self._issued,
                                      self._spawn_abort)
        self.side = EngineSide(task, self.table, self._post_headers, self._fail, self._late,
                               self.stall_check)
        self.watchdog = self.side.watchdog
        system.on_peer_lost.append(self._peer_lost)

    # -- messages from peers -----------------------------------------------------
    async def join_group(self, group_key: int, group_size: int, member: list,
                         expected: list | None = None) -> list:
        """(Leader) the group's member list once ``group_size`` members joined;
        ``expected``: the tasks the member knows make up the group."""
        return await self.leader.join(int(group_key), int(group_size), Member.from_wire(member),
                                      [str(t) for t in expected or ()])

    def deliver(self, key: list, dst_incarnation: int, src: list, tag: int,
                payload: Any) -> None:
        """A message of instance ``key`` (on our device) from member ``src``
        = [rank, device, task, address, incarnation]."""
        gk, sig, ik, seq, device = key
        rank, src_device, src_task, src_address, src_inc = src
        if dst_incarnation != self.system.incarnation:
            # the sender's group names an earlier process of this task
            err = UnavailableError(
                f"collective group {gk}: {self.task} restarted (incarnation "
                f"{self.system.incarnation:x}, the group knew {dst_incarnation:x}); the "
                "collective fails and the next one forms the group again", task=self.task,
                peer=self.task)
            self._spawn_abort(Member(src_device, src_task, src_address, src_inc),
                              [gk, sig, ik, seq, src_device], errors.to_wire(err))
            return
        group = self.groups.get(gk)
        if group is not None:
            known = group.members[group.ranks[src_device]] if src_device in group.ranks else None
            if known is not None and known.incarnation != src_inc:
                self._drop_group(gk, UnavailableError(
                    f"collective group {gk}: {src_task} restarted (incarnation {src_inc:x}, "
                    f"was {known.incarnation:x}); the collective fails and the next one "
                    "forms the group again", task=self.task, peer=src_task))
        self.table.get((gk, sig, ik, seq, device)).put(rank, tag, payload)

    def abort_instance(self, key: list, error: dict) -> None:
        """A member failed instance ``key``: fail it here too (now or when it starts)."""
        gk, sig, ik, seq, device = key
        self.table.get((gk, sig, ik, seq, device)).fail(errors.from_wire(error))

    def ping(self) -> str:
        return self.task

    def expect_tasks(self, group_keys: list[int] | tuple[int, ...],
                     tasks: list[str] | tuple[str, ...]) -> None:
        """The groups ``group_keys`` are made of ``tasks`` (``/job:J/task:T``):
        a group that waits for one that is lost, or never starts, fails naming
        it instead of waiting for ever (collective.group)."""
        for gk in group_keys:
            self.expected_members[int(gk)] = tuple(str(t) for t in tasks)

    # -- failure detection ---------------------------------------------------------
    async def _reach(self, task: str) -> None:
        """(Leader) connect to a named member that has not joined and hear from
        it: from then on the failure detector watches that connection."""
        if self.system.closed:
            raise asyncio.CancelledError
        door = CollectiveDoor.at(self.system, task_address(self.cluster, task))
        await door.ping()

    async def _reach_leader(self, group_key: int) -> None:
        """Before the first join: the group leader, which may start later than
        this task, within the registration bound (collective.registration)."""
        door = CollectiveDoor.at(self.system, self.leader_address)
        await reach_until_registered(
            door.ping, self.leader_task,
            f"collective group {group_key} (on {self.task}, group leader)", self.task,
            self._say, self._leader_gone)
        self._leader_reached = True

    def _leader_gone(self) -> UnavailableError | None:
        """Why waiting for the leader to start is pointless: this system stopped, or
        it had a connection to the leader and lost it (a leader that ran is not starting)."""
        if self.system.closed:
            return UnavailableError(f"{self.task}: its actor system shut down while it "
                                    f"waited for the group leader {self.leader_task}",
                                    task=self.task)
        if self._leader_lost:
            return UnavailableError(
                f"the collective group leader {self.leader_task} at {self.leader_address} "
                "stopped or crashed (its connection to this task was lost) before this "
                "task's first collective; restart the job", task=self.task,
                peer=self.leader_task)
        return None

    def _peer_lost(self, address: str, peer: Any) -> None:
        if peer.name == self.leader_task and not self._leader_reached:
            self._leader_lost = True
        self.leader.lost(peer.name, peer.incarnation)
        for gk, group in list(self.groups.items()):
            if group.has(peer.name, peer.incarnation):
                self._drop_group(gk, UnavailableError(
                    f"collective group {gk}: lost the connection to member {peer.name} "
                    f"(incarnation {peer.incarnation:x}); it stopped, crashed or missed "
                    "3 heartbeats", task=self.task, peer=task_name(peer.name)))

    def _drop_group(self, gk: int, err: OpError) -> None:
        group = self.groups.pop(gk, None)
        for inst in self.table.groups_of(gk):
            if group is None or inst.key[1] == group.sig:
                inst.fail(err)

    # -- running a collective --------------------------------------------------------
    def start(self, node: dict[str, Any], args: list[Any], channel: Any) -> asyncio.Future:
        """The future of the op's outputs (a list of one array): without a
        task when the group is known and the op takes one round (collective.direct)."""
        spec = self._spec(node)
        value = None
        if spec.op != "CollectiveBcastRecv":
            if len(args) != 1:
                raise InvalidArgumentError(f"{spec.op} takes one input, not {len(args)}")
            value = np.require(args[0], requirements="C")   # (ascontiguousarray makes a scalar 1-d)
            check_dtype(value.dtype, spec.op)
        group = self.groups.get(spec.group_key)
        if group is not None and group.size == spec.group_size and group.size > 1 \
                and spec.device in group.ranks:
            header, data, ring, shape, dtype = plan(spec, value, group)
            if not ring:
                watch = Watch("header round", spec.group_key)
                watch.group = group
                key = self._next_key(spec, group)
                watch.instance = self.table.get(key, start=True)
                op = DirectOp(self.side, spec, watch, header, data, value, dtype, shape)
                return op.start(channel, stall_s())
        return asyncio.ensure_future(self._run(spec, value, channel))

    def _spec(self, node: dict[str, Any]) -> CollectiveSpec:
        """The op's checked attrs (parsed once per node of a compiled partition)."""
        hit = self._specs.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        spec = CollectiveSpec(node)
        if not spec.device:
            raise InvalidArgumentError(f"collective op {spec.name!r} has no device")
        if len(self._specs) >= 4096:
            self._specs.clear()
        self._specs[id(node)] = (node, spec)
        return spec

    async def _run(self, spec: CollectiveSpec, value: np.ndarray | None, channel: Any) -> list:
        loop = asyncio.get_running_loop()
        watch = Watch(f"the other members of group {spec.group_key} to join it at the group "
                       f"leader {self.leader_task}", spec.group_key)
        work = asyncio.ensure_future(self._collective(spec, value, watch))
        abort = abort_signal(channel, f"collective/{spec.name}/{id(work)}")
        waits = {work} if abort is None else {work, abort}
        started = loop.time()
        op_timeout = getattr(channel, "timeout", None)
        limits = [t for t in (spec.timeout or None,
                              None if op_timeout is None else 0.9 * op_timeout) if t]
        deadline = started + min(limits) if limits else None
        warn_at = started + (spec.timeout / 2 if spec.timeout else stall_s())
        try:
            while True:
                until = warn_at if deadline is None else min(warn_at, deadline)
                done, _ = await asyncio.wait(waits, timeout=max(0.0, until - loop.time()),
                                             return_when=asyncio.FIRST_COMPLETED)
                if work in done:
                    return [work.result()]
                if abort is not None and abort in done:
                    cause = abort.exception()
                    raise AbortedError(f"{spec.op} {spec.name} on {spec.device} stopped: "
                                       f"{cause}", task=self.task, op=spec.name,
                                       peer=getattr(cause, "peer", None))
                now = loop.time()
                if deadline is not None and now >= deadline:
                    mismatch = self.stall_check(spec, watch, final=True)
                    if mismatch is not None:
                        raise mismatch
                    raise DeadlineExceededError(
                        f"{spec.op} {spec.name} (group_key={spec.group_key}, instance_key="
                        f"{spec.instance_key}) on {spec.device} timed out after "
                        f"{now - started:.1f}s waiting for {self._late(watch)}",
                        task=self.task, op=spec.name)
                if now >= warn_at:
                    mismatch = self.stall_check(spec, watch)
                    if mismatch is not None:
                        raise mismatch
                    logger.warning(
                        "%s: collective %s %s (group_key=%d, instance_key=%d) on %s has "
                        "waited %.1fs for %s%s", self.task, spec.op, spec.name, spec.group_key,
                        spec.instance_key, spec.device, now - started, self._late(watch),
                        "" if deadline is not None else
                        "; it keeps waiting (DISTRIB_COLLECTIVE_STALL_S sets how often this "
                        "is logged)")
                    warn_at = math.inf if spec.timeout else now + stall_s()
        except BaseException as e:
            self._fail(spec, watch, e)
            raise
        finally:
            if abort is not None:
                abort.cancel()
            if not work.done():
                work.cancel()
                work.add_done_callback(retrieve)

    def _late(self, watch: Watch) -> str:
        """Whom (or what) the run of ``watch`` waits for, for a warning."""
        inst, group = watch.instance, watch.group
        if inst is None or group is None:
            joined = self.leader.joined(watch.group_key)   # known on the leader only
            return watch.phase + (f" (joined: {', '.join(joined)})" if joined else "")
        late = [group.members[r].device for r in sorted(inst.waiting)]
        if not late:
            return f"its own work ({inst.phase})"
        return f"{', '.join(late)} ({inst.phase})" + (
            "" if watch.suspect is None else watch.suspect.hint())

    def _issued(self, key: InstanceKey) -> bool:
        """Whether this engine started run ``key`` (or a later run of its instance key)."""
        gk, sig, ik, seq, device = key
        return self._counters.get((gk, sig, ik, device), 0) > seq

    def _fail(self, spec: CollectiveSpec, watch: Watch, e: BaseException) -> None:
        """Fail our instance and tell every other member, unless the error
        came from one of them."""
        inst, group = watch.instance, watch.group
        if inst is None or group is None or inst.error is not None:
            return
        err = e if isinstance(e, OpError) else AbortedError(
            f"{spec.op} {spec.name} on {spec.device} was cancelled (its step ended)",
            task=self.task, op=spec.name)
        if isinstance(e, OpError) and e.task is None:
            e.task = self.task
        inst.fail(err)
        gk, sig, ik, seq, _ = inst.key
        wire = errors.to_wire(err, task=self.task)
        for m in group.members:
            if m.device != spec.device:
                self._spawn_abort(m, [gk, sig, ik, seq, m.device], wire)

    async def _collective(self, spec: CollectiveSpec, value: np.ndarray | None,
                          watch: Watch) -> np.ndarray:
        group = await self._resolve(spec, watch)
        watch.group = group
        key = self._next_key(spec, group)
        inst = self.table.get(key, start=True)
        watch.instance = inst
        try:
            if inst.error is not None:
                raise inst.error
            send, send_now = self._sender(group, key)
            ex = Exchange(group.ranks[spec.device], group.size, inst, send, self._linker(group),
                          send_now)
            return await self._algorithm(spec, value, ex, group)
        finally:
            self.table.end(key)

    def _next_key(self, spec: CollectiveSpec, group: Group) -> InstanceKey:
        """The key of this run: the nth run of an instance key on a device."""
        ckey = (spec.group_key, group.sig, spec.instance_key, spec.device)
        seq = self._counters.pop(ckey, 0)
        self._counters[ckey] = seq + 1
        if len(self._counters) > _MAX_COUNTERS:
            self._counters.popitem(last=False)
        return (spec.group_key, group.sig, spec.instance_key, seq, spec.device)

    async def _resolve(self, spec: CollectiveSpec, watch: Watch) -> Group:
        gk = spec.group_key
        group = self.groups.get(gk)
        if group is None or spec.device not in group.ranks:
            me = Member(spec.device, self.task, self.system.address, self.system.incarnation)
            if spec.group_size == 1:
                return Group(gk, [me])
            if not self._leader_reached:
                await self._reach_leader(gk)
            leader = CollectiveDoor.at(self.system, self.leader_address)
            try:
                members = await leader.join_group(gk, spec.group_size, me.as_wire(),
                                                  list(self.expected_members.get(gk, ())),
                                                  timeout=None)
            except UnavailableError as e:
                if e.peer is not None and e.peer != self.leader_task:
                    raise   # the leader's answer: another member is gone (collective.group)
                raise UnavailableError(
                    f"collective group {gk}: cannot reach the group leader {self.leader_task} "
                    f"at {self.leader_address}: {e}", task=self.task, op=spec.name,
                    peer=e.peer or self.leader_task) from None
            group = Group(gk, [Member.from_wire(m) for m in members])
            if spec.device not in group.ranks:
                raise InvalidArgumentError(f"collective group {gk} formed without "
                                           f"{spec.device}", task=self.task)
            self.groups[gk] = group
        if group.size != spec.group_size:
            raise InvalidArgumentError(
                f"collective group {gk} has {group.size} members "
                f"({', '.join(m.device for m in group.members)}), but {spec.name} on "
                f"{spec.device} says group_size={spec.group_size}", task=self.task)
        return group

    def _sender(self, group: Group, key: InstanceKey) -> tuple[Any, Any]:
        """(send, send_now) of instance ``key`` by rank (see Exchange)."""
        gk, sig, ik, seq, device = key
        rank = group.ranks[device]
        src = [rank, device, self.task, self.system.address, self.system.incarnation]

        def send(dst: int, tag: int, payload: Any) -> Any:
            m = group.members[dst]
            return self._door(m).deliver([gk, sig, ik, seq, m.device], m.incarnation, src, tag,
                                         payload)

        def send_now(dst: int, tag: int, payload: Any) -> bool:
            m = group.members[dst]
            return deliver_now(self._door(m), [gk, sig, ik, seq, m.device], m.incarnation, src,
                               tag, payload)
        return send, send_now

    def _post_headers(self, group: Group, key: InstanceKey, message: list) -> list:
        """Send ``message`` (a header round's) to every other member of
        ``group`` at once where a connection is open; the awaitables of the
        sends that must wait for one (none once the group's connections are up)."""
        gk, sig, ik, seq, device = key
        src = [group.ranks[device], device, self.task, self.system.address,
               self.system.incarnation]
        late = []
        for m in group.members:
            if m.device == device:
                continue
            door, dst = self._door(m), [gk, sig, ik, seq, m.device]
            if not deliver_now(door, dst, m.incarnation, src, HEADER_TAG, message):
                late.append(door.deliver(dst, m.incarnation, src, HEADER_TAG, message))
        return late

    def _linker(self, group: Group) -> Any:
        def link(rank: int) -> str:
            m = group.members[rank]
            if m.address == self.system.address or in_process_system(m.address) is not None:
                return "local"
            shm = self.system.shares_memory_with(m.address, (m.task, m.incarnation))
            return "shm" if shm else "tcp"
        return link

    def _door(self, m: Member) -> CollectiveDoor:
        k = (m.address, m.task, m.incarnation)
        door = self._refs.get(k)
        if door is None:
            if len(self._refs) > 1024:
                self._refs.clear()
            door = self._refs[k] = CollectiveDoor.at(self.system, m.address,
                                                     (m.task, m.incarnation))
        return door

    def _spawn_abort(self, m: Member, key: list, error: dict) -> None:
        """Tell member ``m`` that instance ``key`` failed, without waiting."""
        async def tell() -> None:
            try:
                await self._door(m).abort_instance(key, error)
            except OpError as e:   # that member is gone: nothing to tell
                logger.debug("abort_instance to %s not sent: %s", m.device, e)
        asyncio.ensure_future(tell()).add_done_callback(retrieve)

    async def _algorithm(self, spec: CollectiveSpec, value: np.ndarray | None, ex: Exchange,
                         group: Group) -> np.ndarray:
        inst = ex.instance
        devices = [m.device for m in group.members]
        header, data, ring, shape, dtype = plan(spec, value, group)
        inst.phase = "header round"
        got = await exchange_headers(ex, header, data, devices)
        inst.phase = "ring" if ring else "direct"
        if not ring:
            return direct_result(header[0], spec.merge_op, spec.final_op, got, devices, dtype,
                                 shape, value)
        if spec.op == "CollectiveReduce":
            return await ring_all_reduce(ex, value, spec.merge_op, spec.final_op,
                                         segment_bytes())
        return await ring_all_gather(ex, value, segment_bytes())


def run_collective(node: dict[str, Any], args: list[Any], channel: Any,
                   task: str) -> asyncio.Future:
    """The executor's entry: the future of a collective op's outputs."""
    engine = getattr(channel, "collectives", None)
    if engine is None:
        raise UnavailableError(f"{node['op']} {node['name']!r} needs a server's collective "
                               "engine, and this step has none", task=task or None,
                               op=node["name"])
    return engine.start(node, args, channel)
