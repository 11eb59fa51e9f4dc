"""A step's GPU side outside its kernels: where a fed tensor is copied, which
GPU a pool thread runs on, and the GPU variables that running steps read in
place, with the updates that must not change what those steps read.

A fed tensor whose every consumer runs on one GPU is copied there once a
step (``device_feeds``); a kernel sent to the pool runs with its GPU current
on the pool's thread (``on_gpu``).

A GPU variable read in place (``PartitionGraph.read_var``) is held by its
step from its start to its end (``hold_reads``, counted in ``GPU_READS``):
an update of that variable from another step meanwhile first gives the store
a copy to write into (``unshare``), so the step's reads stay what they were
when it read them, as the store's copy on write does for host arrays.

An update whose kernel may compile (its first run with new argument types),
and every GPU update behind it until it is done, runs on the kernel pool
(``locked_update``; counted in ``VariableStore.offloop_updates`` and counted
down on the loop by ``update_done``); while one does, a step's taking of a
buffer it reads in place goes there too (``locked_read``). The rule that
orders them is the comment on ``GPU_READS``. The executor's run loop
(:mod:`distrib.runtime.step.executor`) calls these by name: no call is added
per op, and a step with no GPU variable takes none of these paths.
"""
from __future__ import annotations

import asyncio
import weakref
from typing import Any

import kernels
from distrib.runtime.state.stateful import run_stateful
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.partition_graph import UPDATE_WRITES
from kernels.cuda import devices

__all__ = ["device_feeds", "on_gpu", "GPU_READS", "hold_reads", "unshare", "locked_update",
           "locked_read", "update_done"]


def locked_update(node: Any, args: list[Any], variables: VariableStore, wanted: bool,
                  dev: tuple[str, int], own_reads: dict[str, int]) -> Any:
    """A GPU variable update on the pool, one at a time (see VariableStore.update_lock),
    its copy for other steps' reads in place (unshare) decided and made under the lock."""
    with variables.update_lock:
        devices.use_gpu(dev[1])   # (the pool's thread: its own current GPU)
        if node["op"] in UPDATE_WRITES and GPU_READS:
            unshare(node, variables, own_reads)
        return run_stateful(node, args, variables, wanted, dev)


def locked_read(node: Any, variables: VariableStore) -> list[Any]:
    """The buffer a step reads in place, taken on the pool under update_lock
    while an update may be writing it there (see GPU_READS)."""
    with variables.update_lock:
        return [variables.get(node["attrs"].get("var"), node["name"])]


def on_gpu(index: int, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` with GPU ``index`` current on this (a pool's) thread."""
    devices.use_gpu(index)
    return fn(*args)


# Variables some running step reads in place on a GPU (PartitionGraph.read_var):
# store -> variable name -> how many running steps hold such a read. Such a
# step holds its reads from its start to its end; an update of the variable
# from another step meanwhile first gives the store a copy to write into
# (unshare), so the step's reads stay what they were when it read them.
#
# One lock, one rule. While an update of a store's GPU variables runs off the
# loop (``offloop_updates`` > 0), every change of them (updates, Assign
# included, and their unshare) and every taking of a buffer that a step reads
# in place (its VariableV2: ``held_fetch``) goes to the pool and runs under
# ``update_lock``; while none does, they all run on the loop's thread, which
# never takes the lock (nothing else changes those variables then: the count
# drops only once the pool's update has left the lock, see update_done). So
# an update's check of the holds, its copy and its write are one step for
# every reader in place: a read takes the buffer either before it (its hold,
# counted on the loop at its step's start, before the step takes any buffer,
# is then seen: the update writes into a copy) or after the write is done.
# The hold itself needs no lock (one dict entry, changed on the loop only).
# This is TensorFlow's order for resource variables: ReadVariableOp takes the
# tensor under the variable's mutex, an update copies it under the same mutex
# when it is shared. A step that overlaps no off-loop update takes no lock.
GPU_READS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def hold_reads(variables: VariableStore, names: dict[str, int], sign: int) -> None:
    held = GPU_READS.get(variables)
    if held is None:
        held = GPU_READS[variables] = {}
    for name, k in names.items():
        left = held.get(name, 0) + sign * k
        if left:
            held[name] = left
        else:
            held.pop(name, None)


def update_done(loop: asyncio.AbstractEventLoop, variables: VariableStore) -> None:
    """An off-loop update has run (or never will: cancelled before it started),
    on the pool's thread: counted down on the loop, where it was counted up (not
    when its step stops waiting for it: a cancelled step's update may still run)."""
    try:
        loop.call_soon_threadsafe(_count_down, variables)
    except RuntimeError:   # the loop has closed: nothing runs on it any more
        pass


def _count_down(variables: VariableStore) -> None:
    variables.offloop_updates -= 1


def unshare(node: Any, variables: VariableStore, own_reads: dict[str, int]) -> None:
    """Before an update writes into a GPU variable (or its slots) that a step
    other than its own (``own_reads``: its own reads in place) reads in place,
    give the store a copy of it to write into: that step's reads keep the
    version they read (as the store's copy on write does for host arrays).
    Runs where the update runs: on the loop, or under update_lock (see GPU_READS)."""
    held = GPU_READS.get(variables)
    if not held:
        return
    attrs = node["attrs"]
    for key in UPDATE_WRITES[node["op"]]:
        name = attrs.get(key)
        if held.get(name, 0) > own_reads.get(name, 0) and name in variables:
            cur = variables.get(name)
            if devices.is_device_array(cur):
                variables.set(name, kernels.get_kernel("Identity", kernels.GPU)([cur], {})[0])


def device_feeds(inputs: list, shape_only: list, placed: list) -> dict[str, tuple[str, int]]:
    """Feed name -> the GPU that every node reading it (for more than its
    shape) runs on, for feeds read only there."""
    on: dict[str, set] = {}
    for i, refs in enumerate(inputs):
        for k, ref in enumerate(refs):
            if type(ref) is str and not shape_only[i][k]:
                on.setdefault(ref, set()).add(tuple(placed[i]))
    return {ref: next(iter(devs)) for ref, devs in on.items()
            if len(devs) == 1 and next(iter(devs))[0] != "CPU"}
