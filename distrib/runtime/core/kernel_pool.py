"""The heavy-kernel pool, the core probes and the polling waits: how a step
uses the machine's cores.

Kernels run, as TensorFlow's executor runs them, inline on the thread that
found them ready, here the event loop's: a hop to another thread and back
costs more than a small kernel and, measured on a two-core machine, 2-4 ms
per training step of an MLP (waking threads, handing the GIL over). A kernel
goes to the small pool here (numpy releases the GIL) in two cases only:
another heavy kernel of the step is ready too, so the two run at once (the
two matmuls of a layer's backward pass), or it is too long to hold the loop
(over ~2^28 multiply-adds or 32 MiB), which must keep answering rendezvous
pushes, heartbeats and other sessions (``weigh``). A heavy kernel goes to
the pool only while the machine has an idle core (``spare_core``): when
every core is busy, two kernels of a step at once only queue for one.
``DISTRIB_INTER_OP_THREADS`` (default: the number of cores) is how many heavy
kernels of a step may run at once, the loop's thread included; 1 runs them
one at a time.

A GPU kernel's first run with new argument dtypes and shapes goes to the
pool too, whatever its weight (``launch_key``; the executor remembers the
runs that finished): numba compiles a kernel on its first launch for each
argument types, 0.1-1 s each and seconds for a step's worth, which on the
loop's thread would hold back heartbeats until the task's peers declared it
dead. Compiled kernels are cached on disk (``kernels/cuda/math.py``), so a
later process loads them instead; every later run is inline as before.

A short wait for another task's message polls instead of sleeping while a
core would idle anyway (``spin_until``): on a VM, waking a halted virtual CPU
costs 0.1-0.7 ms a message.
"""
from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from distrib.settings import INTER_OP_THREADS

__all__ = ["SPIN_S", "spin_until", "spare_core", "core_idle_while_waiting", "runnable_threads",
           "inter_op_threads", "parallel_slots", "thread_pool", "timed_kernel",
           "running_on_pool", "may_offload", "span_union", "pick_heavy", "weigh", "launch_key"]


# A kernel above this many multiply-adds or bytes is "heavy": worth a thread hop
# (50-100 us with the GIL handover) when another heavy kernel can run beside it.
_OFFLOOP_FLOPS = 1 << 23


_OFFLOOP_BYTES = 1 << 22


# Above these a kernel never runs on the loop's thread (a few milliseconds and up).
_INLINE_MAX_FLOPS = 1 << 28


_INLINE_MAX_BYTES = 1 << 25


_POOL: ThreadPoolExecutor | None = None


_CORES = os.cpu_count() or 1   # a system call each time it is asked: once, here


def inter_op_threads() -> int:
    """``DISTRIB_INTER_OP_THREADS``, read on each call; 0 (unset): the cores."""
    return max(1, INTER_OP_THREADS.get() or _CORES)


def parallel_slots() -> int:
    """Heavy kernels a step may have on the pool beside the one on the loop."""
    return inter_op_threads() - 1


_LOADAVG: list[int] = []   # an open /proc/loadavg, or -1 where there is none


def runnable_threads() -> int | None:
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


def spare_core() -> bool:
    """Whether the machine has an idle core now: fewer runnable threads (this
    one included) than cores. Two workers of a cluster on a 2-core host keep
    both cores busy; a kernel sent to the pool then only queues for a core
    and costs the hop (measured: 11% fewer examples/s with it). Where /proc
    is missing, assume a free core."""
    running = runnable_threads()
    return running is None or running < _CORES


def may_offload(on_pool: list[Any]) -> bool:
    """Whether a heavy kernel may go to the pool now: a slot is free among the
    step's kernels there (``on_pool``) and the machine has an idle core."""
    return running_on_pool(on_pool) < parallel_slots() and spare_core()


def core_idle_while_waiting() -> bool:
    """Whether a core would idle while this thread waits: no more runnable
    threads than cores, this one included (False where that is unknown)."""
    running = runnable_threads()
    return running is not None and running <= _CORES


# A wait for another task's message that should end within this, by last
# step's timing (a worker's variables from a ps, the ps's answer to its call),
# spins instead of sleeping while a core would idle anyway (see spin_until).
SPIN_S = 0.003


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
    if expected_s is None or expected_s >= SPIN_S or done() or not core_idle_while_waiting():
        return
    end = time.perf_counter() + SPIN_S
    n = 0
    while not done():
        await asyncio.sleep(0)   # one loop iteration: polls the sockets, never blocks
        n += 1
        if n & 3 == 0 and (time.perf_counter() > end or not core_idle_while_waiting()):
            return


def thread_pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(inter_op_threads(), thread_name_prefix="distrib-kernel")
    return _POOL


def timed_kernel(fn: Callable, args: list[Any], attrs: dict[str, Any],
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


def running_on_pool(on_pool: list[Any]) -> int:
    """How many of a step's pool kernels still run (their thread may have
    finished before the loop has looked at their futures)."""
    on_pool[:] = [f for f in on_pool if not f.done()]
    return len(on_pool)


def span_union(spans: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) spans."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def pick_heavy(heavy_ready: list[int], priority: list[float], cost: list[float],
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


def weigh(flops_of: Callable[[list, dict], int | None] | None, args: list[Any],
          attrs: dict[str, Any]) -> tuple[int, float]:
    """(0: light; 1: heavy, worth a thread beside other heavy work; 2: too long
    for the event loop's thread) and the cost in units of the heavy threshold
    (to order heavy kernels, see PartitionGraph._priorities). ``flops_of``:
    the op type's multiply-adds from its inputs (``heavy`` in the op
    catalogue, looked up once per node when the partition is compiled), or
    None: the op is weighed by its inputs' bytes."""
    if flops_of is not None:
        flops = flops_of(args, attrs)
        if flops is not None:
            return (2 if flops > _INLINE_MAX_FLOPS else 1 if flops >= _OFFLOOP_FLOPS else 0,
                    flops / _OFFLOOP_FLOPS)
    total = 0
    for a in args:
        total += getattr(a, "nbytes", 0)
    return (2 if total > _INLINE_MAX_BYTES else 1 if total >= _OFFLOOP_BYTES else 0,
            total / _OFFLOOP_BYTES)


def launch_key(i: int, args: list[Any]) -> tuple:
    """Node ``i``'s run on ``args`` as far as the kernels it compiles go: the
    arguments' dtypes (numba compiles per argument types) and shapes (a shape
    can pick another kernel: a broadcast, an empty input). Holds no array."""
    return (i, *[(getattr(a, "dtype", None), getattr(a, "shape", None)) for a in args])
