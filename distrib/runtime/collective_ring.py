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

Between co-located tasks a segment crosses through shared memory (one copy,
on the sender's side, into a segment the receiver maps); the receiver reduces
straight from that mapping into its buffer, so the payload is never copied
through a socket. Sends are one-way actor messages: a sender never waits for
the receiver, only for its connection to take the bytes.

All-gather is the second half alone, with chunk r being rank r's tensor.
Nothing sent is written again before the peer that got it has used it (by
causality: the chunk that overwrites it went round the ring through that
peer), so a peer in this process may get a buffer by reference.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from distrib.runtime.collective_instance import MERGE, Exchange, finalize

__all__ = ["ring_all_reduce", "ring_all_gather", "segments"]


def segments(start: int, stop: int, per: int) -> list[tuple[int, int]]:
    """[start, stop) cut into pieces of at most ``per`` elements (at least one piece)."""
    if stop <= start:
        return [(start, start)]
    return [(a, min(a + per, stop)) for a in range(start, stop, per)]


def _tag(step: int, seg: int) -> int:
    return (step << 32) | seg


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
    chunk = first_chunk % n
    for j, (a, b) in enumerate(segments(bounds[chunk], bounds[chunk + 1], per)):
        await ex.send(right, _tag(0, j), src[a:b])
    for t in range(total_steps):
        chunk = (first_chunk - t - 1) % n
        last_reduce = t == reduce_steps - 1
        for j, (a, b) in enumerate(segments(bounds[chunk], bounds[chunk + 1], per)):
            data = await ex.recv(left, _tag(t, j))
            seg = flat[a:b]
            if t < reduce_steps:
                merge(src[a:b], data, out=seg)  # type: ignore[misc]
                if last_reduce:
                    finalize(seg, final_op, n)
            else:
                seg[...] = data
            del data   # a shared-memory view goes back to its sender now
            if t + 1 < total_steps:
                await ex.send(right, _tag(t + 1, j), seg)


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
    out = np.empty(value.shape, value.dtype)
    flat = out.reshape(-1)
    bounds = [0, *np.cumsum([len(c) for c in np.array_split(np.empty(flat.size, np.int8), n)])]
    bounds = [int(b) for b in bounds]
    await _ring(ex, src, flat, bounds, n - 1, 2 * (n - 1), ex.rank, MERGE[merge_op], final_op,
                _per_segment(out.dtype.itemsize, segment_bytes, bounds[1] - bounds[0]))
    return out


async def ring_all_gather(ex: Exchange, value: np.ndarray, segment_bytes: int) -> np.ndarray:
    """Every rank's ``value`` concatenated along axis 0 in rank order."""
    n, r = ex.size, ex.rank
    shape = value.shape if value.ndim else (1,)
    out = np.empty((n * shape[0], *shape[1:]), value.dtype)
    flat = out.reshape(-1)
    size = value.size
    bounds = [k * size for k in range(n + 1)]
    flat[bounds[r]:bounds[r + 1]] = value.reshape(-1)
    # all-gather alone: step t sends chunk r - t and receives r - t - 1
    await _ring(ex, flat, flat, bounds, 0, n - 1, r, None, "Id",
                _per_segment(value.dtype.itemsize, segment_bytes, size))
    return out
