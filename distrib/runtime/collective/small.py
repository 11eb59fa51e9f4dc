"""The latency-bound collectives: one round of direct messages.

Every participant sends every other one message, its *header* (what it
issued: op, shape, dtype, ...; see collective_instance), and for a small
tensor its data too. That one round is the whole collective for small
tensors: each participant then reduces (or concatenates) the n tensors
itself, in rank order, so every participant computes bit-for-bit the same
result (float addition is not associative: a reduction in a different order
on each rank would leave replicas that drift apart). It costs one message
latency, against the 2(n-1) sequential hops of a ring; the bytes moved are
(n-1) x size per participant, which is why only small tensors take it
(``DIRECT_MAX_BYTES``). Broadcast goes the same way: the source's header
carries the data, the receivers' headers carry none.

Large tensors send the header round alone (so that every participant has
checked every other before a byte of data is reduced), then run the ring
(collective.ring). The round also opens a connection to every member, which
the failure detector then watches: a member that dies fails the collective
even if it was not the next one in the ring.

A header that has not come yet is waited for with the loop polling
(kernel_pool.spin_until) when the last wait was short and a core idles
anyway: on a VM, waking a halted virtual CPU costs 0.1-0.7 ms a message,
more than the whole round. Measured (1 KiB, 2 tasks, 50 chained): within
the noise of a 2-core VM (~350-450 us either way), so it is no cure: what
was left was Python per op in the engine (two tasks, a wait with timers,
the abort signal). Once the group is formed the round runs without any of
them (collective.direct, with ``check_header`` and ``direct_result`` from
here); ``exchange_headers`` is the task path's (a group's first run, the
ring's header round).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.runtime.collective.instance import HEADER_TAG, MERGE, Exchange, finalize, header_mismatch
from distrib.runtime.core.kernel_pool import spin_until
from distrib.settings import COLLECTIVE_DIRECT_BYTES

__all__ = ["exchange_headers", "check_header", "direct_result", "broadcast_result",
           "reduce_direct", "gather_direct", "DIRECT_MAX_BYTES"]

# Up to this many bytes a reduce or gather takes the one-round algorithm
# (DISTRIB_COLLECTIVE_DIRECT_BYTES overrides it). Not tuned yet: a ring step
# costs about one message latency, so the round wins while (n-1) x size moves
# faster than 2(n-1) latencies; bench/allreduce.py measures both sides.
DIRECT_MAX_BYTES: int = COLLECTIVE_DIRECT_BYTES.default   # 64 KiB

# how long the last header round that had to wait waited (see spin_until)
_WAITED: list[float | None] = [None]


async def exchange_headers(ex: Exchange, header: list, data: Any,
                           devices: list[str]) -> list[list]:
    """Send ``[header, data]`` to every other rank; return every rank's
    ``[header, data]`` (ours included), after checking every header against ours."""
    me = ex.rank
    sends = [ex.send(r, HEADER_TAG, [header, data]) for r in range(ex.size) if r != me]
    for s in sends:
        await s
    got: list[list] = [[header, data]] * ex.size
    inst = ex.instance
    for r in range(ex.size):
        if r == me:
            continue
        if not inst.ready(r, HEADER_TAG):
            started = time.perf_counter()
            await spin_until(lambda: inst.ready(r, HEADER_TAG), _WAITED[0])
            msg = await ex.recv(r, HEADER_TAG)
            _WAITED[0] = time.perf_counter() - started
        else:
            msg = await ex.recv(r, HEADER_TAG)
        got[r] = check_header(msg, header, devices, me, r)
    return got


def check_header(msg: Any, header: list, devices: list[str], me: int, r: int) -> list:
    """Rank ``r``'s ``[header, data]`` message, checked against our ``header``."""
    if not isinstance(msg, list) or len(msg) != 2 or not isinstance(msg[0], list):
        raise InvalidArgumentError(f"bad collective header from {devices[r]}: {msg!r}")
    theirs, payload = msg
    wrong = header_mismatch(header, theirs, devices[me], devices[r])
    if wrong is not None:
        raise InvalidArgumentError(wrong)
    return [theirs, payload]


def direct_result(op: str, merge_op: str, final_op: str, got: list[list], devices: list[str],
                  dtype: np.dtype, shape: tuple, value: np.ndarray | None) -> np.ndarray:
    """The result of a one-round collective from every rank's ``[header, data]``
    (``op``: CollectiveReduce, CollectiveGather or CollectiveBcast)."""
    if op == "CollectiveBcast":
        return broadcast_result(got, devices, dtype, shape, value)
    if op == "CollectiveReduce":
        return reduce_direct([d for _, d in got], merge_op, final_op, dtype, shape)
    return gather_direct([d for _, d in got], dtype, shape)


def broadcast_result(got: list[list], devices: list[str], dtype: np.dtype, shape: tuple,
                     value: np.ndarray | None) -> np.ndarray:
    senders = [r for r, (h, _) in enumerate(got) if h[-1] == "send"]
    if len(senders) != 1:
        names = ", ".join(devices[r] for r in senders) or "none of " + ", ".join(devices)
        raise InvalidArgumentError(f"a broadcast needs exactly one broadcast_send; sent by: "
                                   f"{names}")
    if value is not None:
        return np.array(value, copy=True)
    return np.array(got[senders[0]][1], dtype=dtype, copy=True).reshape(shape)


def reduce_direct(datas: list[np.ndarray], merge_op: str, final_op: str,
                  dtype: np.dtype, shape: tuple) -> np.ndarray:
    """The reduction of every rank's tensor, in rank order."""
    merge = MERGE[merge_op]
    acc = np.array(datas[0], dtype=dtype, copy=True).reshape(shape)
    for d in datas[1:]:
        merge(acc, np.asarray(d).reshape(shape), out=acc)
    finalize(acc, final_op, len(datas))
    return acc


def gather_direct(datas: list[np.ndarray], dtype: np.dtype, shape: tuple) -> np.ndarray:
    """Every rank's tensor, concatenated along axis 0 in rank order."""
    parts = [np.asarray(d, dtype=dtype).reshape(shape) for d in datas]
    if not shape:
        return np.stack(parts)
    return np.concatenate(parts, axis=0)
