"""The ring: bandwidth-optimal all-reduce and all-gather, chunked and pipelined.

All-reduce of N elements over n ranks (gloo's ``allreduce_ring_chunked``,
TensorFlow's ``ring_reducer.cc``): the flat tensor is cut into n chunks
(``np.array_split`` bounds, so sizes need not divide), each chunk into
segments of at most ``segment_bytes``. Rank r sends to r+1 and receives from
r-1, 2(n-1) steps:

- reduce-scatter, steps t = 0..n-2: send chunk (r-t), receive chunk (r-t-1)
  and reduce it into our own buffer. After it, rank r holds chunk (r+1) fully
  reduced (the final op, Div, is applied to it there, once).
- all-gather, steps t = n-1..2n-3: send the chunk received last, receive the
  next one and copy it into place.

The chunk sent at step t+1 is exactly the chunk received at step t, so each
segment goes on as soon as it is reduced: while rank r reduces segment j,
segment j+1 is on the wire and segment j-1 is being reduced one rank
further. Each rank sends and receives 2(n-1)/n x N elements, whatever n is
(the "bus bandwidth" factor that bench/allreduce.py reports).

Between co-located tasks (a connection through shared memory) the payload
is never copied on its way. The output is an array of the process's
shared-memory arena (``shared_empty``: its buffers are reused, so no page is
faulted in again), and so is the input whenever it is a variable's value or
an earlier collective's output. An arena array is lent whole (its descriptor
crosses the socket, no byte is copied) and the receiver reads the segment it
is told of straight from the mapping: it reduces from it into its own output
or copies it there. Only an input outside the arena (a gradient just
computed) is copied, once, into a segment of the connection's pool.

A lent array's message is a descriptor: it goes out at once on the open
connection (``Exchange.send_now``), without a task per segment, and so does
the ``DONE_TAG``. The chunk bounds are arithmetic (``split_bounds``, the
bounds of ``np.array_split``, without the array it would split).

Lending a buffer that we still write is safe because every range of the
output is written exactly once, before it is sent; the ranges written later
are ones the peer never reads. What the peer reads of our *input* it has
read before we can finish (each reduced segment we wait for was computed from
it). What it reads of our *output* in the last steps nobody waits for, so a
rank that lent its output waits for a ``DONE_TAG`` message from the peer
that read it before it returns the output: whoever gets the output next may
write to it or hand it out. Measured (64 MiB, 2 tasks, 2-core VM): the
one-copy design moved 1.44 GB/s, of which 17 ms of 45 went into the sender's
two 32 MiB copies and ~6 ms into faulting in the fresh output; lending and
the arena brought it to 2.7 GB/s (median of 3 interleaved rounds, 0.48x
the same rounds' memcpy; 1.41 GB/s before), what is left being one
reduction and one copy of 32 MiB per rank, both ranks at once on the
machine's memory bandwidth, and Python per message.

Over TCP nothing of this applies (a lent array would cross whole): segments
go as memoryviews (uvloop copies them into the kernel, no join). Sends are
not awaited one by one, so a segment drains while the next is reduced.
Reducing on the kernel pool so that the loop keeps the socket busy was
measured slower (87 ms against 75 ms per 64 MiB): each process then has two
busy threads on two cores. The n=2 all-reduce over TCP runs at the speed of
two raw sockets doing only its traffic (32 MiB each way, twice, ~75 ms,
see bench/allreduce.py "raw-exchange"): loopback TCP both ways at once is
what bounds it, not the reduction.
"""
from __future__ import annotations

import asyncio
from typing import Callable

import numpy as np

from distrib.runtime.collective.instance import MERGE, Exchange, finalize
from distrib.runtime.core.step_waits import retrieve
from transports.shm import ARENA, shared_empty

__all__ = ["ring_all_reduce", "ring_all_gather", "segments", "split_bounds", "DONE_TAG"]

# the tag of "I have read your buffer" (see the module header)
DONE_TAG = -2


def split_bounds(size: int, n: int) -> list[int]:
    """The n+1 bounds of ``np.array_split`` of ``size`` elements into n chunks
    (the first ``size % n`` one element longer), without an array."""
    q, extra = divmod(size, n)
    return [k * q + min(k, extra) for k in range(n + 1)]


def segments(start: int, stop: int, per: int) -> list[tuple[int, int]]:
    """[start, stop) cut into pieces of at most ``per`` elements (at least one piece)."""
    if stop <= start:
        return [(start, start)]
    return [(a, min(a + per, stop)) for a in range(start, stop, per)]


def _tag(step: int, seg: int) -> int:
    return (step << 32) | seg


def _reduce(merge: Callable | None, mine: np.ndarray, data: np.ndarray, seg: np.ndarray,
            final_op: str, n: int) -> None:
    if merge is None:
        np.copyto(seg, data)
        return
    merge(mine, data, out=seg)
    if final_op != "Id":
        finalize(seg, final_op, n)


async def _ring(ex: Exchange, src: np.ndarray, flat: np.ndarray, bounds: list[int],
                reduce_steps: int, total_steps: int, first_chunk: int, merge: Callable | None,
                final_op: str, per: int) -> None:
    """Run ``total_steps`` steps of the ring into ``flat``; the first
    ``reduce_steps`` reduce (our ``src`` with what came, into ``flat``: each
    chunk comes once in the reduce-scatter, so the input is never copied
    first), the rest copy. Step t sends chunk ``first_chunk - t`` (step 0:
    from ``src``) and receives chunk ``first_chunk - t - 1`` (mod n)."""
    n, r = ex.size, ex.rank
    right, left = (r + 1) % n, (r - 1) % n
    # a co-located right neighbour maps our arena arrays: lend it the whole
    # array (no copy) and let it read the segment it is told of
    near = ex.near(right)
    whole_src = src if near and ARENA.lookup(src) is not None else None
    whole_flat = flat if near and ARENA.lookup(flat) is not None else None
    sends: list[asyncio.Future] = []
    lent_flat = owe_done = False

    def send(t: int, j: int, a: int, b: int) -> None:
        nonlocal lent_flat
        whole = whole_src if t == 0 else whole_flat
        if whole is not None:
            lent_flat = lent_flat or whole is whole_flat
            # a lent array is a descriptor on the wire: a small message, sent
            # at once without a task where the connection is open
            if ex.send_now(right, _tag(t, j), whole):
                return
        payload = whole if whole is not None else (src if t == 0 else flat)[a:b]
        sends.append(asyncio.ensure_future(ex.send(right, _tag(t, j), payload)))

    try:
        chunk = first_chunk % n
        for j, (a, b) in enumerate(segments(bounds[chunk], bounds[chunk + 1], per)):
            send(0, j, a, b)
        for t in range(total_steps):
            chunk = (first_chunk - t - 1) % n
            step_merge = merge if t < reduce_steps else None
            step_final = final_op if t == reduce_steps - 1 else "Id"
            for j, (a, b) in enumerate(segments(bounds[chunk], bounds[chunk + 1], per)):
                data = await ex.recv(left, _tag(t, j))
                if data.size != b - a:     # the sender lent its whole array
                    data = data.reshape(-1)[a:b]
                    owe_done = owe_done or t > 0 or src is flat
                seg = flat[a:b]
                _reduce(step_merge, src[a:b], data, seg, step_final, n)
                del data   # a shared-memory view goes back to its sender now
                if t + 1 < total_steps:
                    send(t + 1, j, a, b)
                while sends and sends[0].done():
                    sends.pop(0).result()
        if owe_done and not ex.send_now(left, DONE_TAG, None):
            # the left neighbour may now write (or hand out) what it lent us
            sends.append(asyncio.ensure_future(ex.send(left, DONE_TAG, None)))
        for fut in sends:
            await fut
        sends.clear()
        if lent_flat:
            await ex.recv(right, DONE_TAG)
    finally:
        for fut in sends:
            fut.cancel()
            fut.add_done_callback(retrieve)



# gloo's ring_chunked segments are 1 MiB. Here each message also costs tens of
# microseconds of Python on both sides, and measured on a 2-core VM 1 MiB
# segments halved the bandwidth of a 16 MiB all-reduce against 4 segments per
# chunk: so (unless DISTRIB_COLLECTIVE_SEGMENT_BYTES says) a segment is at
# least 1 MiB and a quarter of a chunk, which keeps 4 in flight per step.
MIN_SEGMENT_BYTES = 1 << 20
SEGMENTS_PER_CHUNK = 4


def _per_segment(itemsize: int, segment_bytes: int, chunk_elems: int) -> int:
    if segment_bytes <= 0:
        segment_bytes = max(MIN_SEGMENT_BYTES,
                            -(-chunk_elems * itemsize // SEGMENTS_PER_CHUNK))
    return max(1, segment_bytes // max(1, itemsize))


async def ring_all_reduce(ex: Exchange, value: np.ndarray, merge_op: str, final_op: str,
                          segment_bytes: int) -> np.ndarray:
    """The all-reduce of ``value`` over the ring; a new array of its shape
    (``segment_bytes`` 0: see ``_per_segment``)."""
    n = ex.size
    src = np.ascontiguousarray(value).reshape(-1)
    out = shared_empty(value.shape, value.dtype)
    flat = out.reshape(-1)
    bounds = split_bounds(flat.size, n)
    await _ring(ex, src, flat, bounds, n - 1, 2 * (n - 1), ex.rank, MERGE[merge_op], final_op,
                _per_segment(out.dtype.itemsize, segment_bytes, bounds[1] - bounds[0]))
    return out


async def ring_all_gather(ex: Exchange, value: np.ndarray, segment_bytes: int) -> np.ndarray:
    """Every rank's ``value`` concatenated along axis 0 in rank order."""
    n, r = ex.size, ex.rank
    shape = value.shape if value.ndim else (1,)
    out = shared_empty((n * shape[0], *shape[1:]), value.dtype)
    flat = out.reshape(-1)
    size = value.size
    bounds = [k * size for k in range(n + 1)]
    flat[bounds[r]:bounds[r + 1]] = value.reshape(-1)
    # all-gather alone: step t sends chunk r - t and receives r - t - 1
    await _ring(ex, flat, flat, bounds, 0, n - 1, r, None, "Id",
                _per_segment(value.dtype.itemsize, segment_bytes, size))
    return out
