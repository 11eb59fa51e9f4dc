"""A regroup's collectives: who sends, what is sent, and a leave's barrier.

At a regroup (and a newcomer's first use) the member with state furthest
ahead sends every mirrored variable of the strategy (model, optimizer
slots, global step) and the input position to the others: the highest input
position (a survivor that finished the step another one failed), ties: the
lowest rank; when no member has state, as at the start, rank 0 initializes
the variables and sends them. One tiny all-reduce MAX of
:func:`sender_code` finds it. The variables go in variable-name order, so a
fresh newcomer's build order cannot mismatch the keys; the broadcasts take
instance keys from :data:`BROADCAST_KEYS` up, apart from the steps' keys,
each bounded. A member that leaves first waits, in one tiny all-reduce on
:data:`BARRIER_KEY`, for every member of the old group to finish the agreed
step, so none of its messages is lost with its process.
"""
from __future__ import annotations

import itertools
from typing import Any

from distrib.distribute.core.values import MirroredVariable
from distrib.distribute.elastic import group
from distrib.framework import dtypes
from distrib.ops import collective_ops
from distrib.ops import math_ops as ops

__all__ = ["sender_code", "sender_rank", "broadcast_state", "leave_barrier", "BROADCAST_KEYS",
           "BARRIER_KEY"]

BROADCAST_KEYS = 1 << 24   # a regroup's broadcasts: instance keys from here up
BARRIER_KEY = BROADCAST_KEYS - 1   # a leave's barrier, once per (old) group


def sender_code(has_state: bool, position: int, rank: int, n: int) -> int:
    """A member's input to the all-reduce MAX that picks a regroup's sender: the
    member with state furthest ahead, ties: the lowest rank (-1: no state)."""
    return max(position, 0) * (n + 1) + (n - rank) if has_state else -1


def sender_rank(top: int, n: int) -> int:
    """The rank the MAX of :func:`sender_code` names (none has state: 0)."""
    return 0 if top < 0 else n - top % (n + 1)


async def broadcast_state(strategy: Any, session: Any, containers: list[MirroredVariable],
                          has_state: bool, iterator: Any, timeout: float) -> None:
    """The values of ``containers`` (in name order) and ``iterator``'s position
    (None: no elastic input), from the member with state furthest ahead
    (ties: the lowest rank; none: rank 0, initializing them) to the others;
    the sender's pick bounded by ``timeout`` s, each broadcast by
    :data:`REGROUP_TIMEOUT_S`. A receiver's iterator seeks to the position."""
    s = strategy
    n, rank = s.num_workers, s.worker_index
    if n == 1:
        if not has_state:
            await session.run([c.initializer for c in containers])
        return
    graph = session.graph
    gk = s.collective_keys.group_key
    instance = itertools.count(BROADCAST_KEYS)
    ordered = sorted(containers, key=lambda c: c.values[0].op.name)
    at = -1 if iterator is None else iterator.position
    with graph.as_default(), graph.device(s.replica_devices[0]):
        code = collective_ops.all_reduce(   # who sends (see sender_code)
            ops.constant(sender_code(has_state, at, rank, n), dtypes.int64), n, gk,
            next(instance), merge_op="Max", timeout=timeout, name="elastic_broadcaster")
    top = int(await session.run(code))
    src = sender_rank(top, n)
    if top < 0 and rank == src:
        await session.run([c.initializer for c in ordered])
    sending = rank == src
    todo: list[Any] = []
    with graph.as_default(), graph.device(s.replica_devices[0]):
        for c in ordered:
            key = next(instance)
            if sending:
                todo.append(collective_ops.broadcast_send(
                    c.values[0].value(), c.shape, c.dtype, n, gk, key,
                    timeout=group.REGROUP_TIMEOUT_S))
            else:
                got = collective_ops.broadcast_recv(c.shape, c.dtype, n, gk, key,
                                                    timeout=group.REGROUP_TIMEOUT_S)
                todo += [comp.assign(got, read_value=False) for comp in c.values]
        key = next(instance)
        if sending:
            position = collective_ops.broadcast_send(
                ops.constant(at, dtypes.int64), [], dtypes.int64, n, gk, key,
                timeout=group.REGROUP_TIMEOUT_S)
        else:
            position = collective_ops.broadcast_recv([], dtypes.int64, n, gk, key,
                                                     timeout=group.REGROUP_TIMEOUT_S)
    got_position, _ = await session.run([position, todo])
    if not sending and iterator is not None and int(got_position) >= 0:
        iterator.seek(int(got_position))


async def leave_barrier(strategy: Any, session: Any) -> None:
    """Wait until every member of ``strategy``'s (old) group finished the step."""
    s = strategy
    graph = session.graph
    keys = s.collective_keys
    with graph.as_default(), graph.device(s.replica_devices[0]):
        done = collective_ops.all_reduce(ops.constant(1, dtypes.int32), s.num_workers,
                                         keys.group_key, BARRIER_KEY, timeout=group.REGROUP_TIMEOUT_S,
                                         name="elastic_leave_barrier")
    await session.run(done)
