"""Stateful ops: variables and their updates, run against the task's
:class:`VariableStore`, which outlives steps and sessions (``docs/ops.md``).

Reading a variable does not copy it: the store copies on write instead (an
update finds the array shared, by its reference count, only while some step,
fetch or send still holds a read of it), so a read is always a snapshot and a
training step whose reads are done before its updates copies nothing.
Updates run on the event loop, so they are atomic with respect to reads and
to each other (no lost updates between asynchronous replicas); the
exceptions: a GPU variable's update on its first run with new argument
types, which may compile its kernel and so runs on the kernel pool (the
executor), and the copy of a big Assign's value (too long for the loop,
``kernel_pool.weigh``), which runs there too, its swap into the store on the loop. A GPU variable is a device array: its updates run GPU kernels
(numpy cannot write into device memory), or a CPU kernel on host copies
written back where the update has no GPU kernel. The ops on
accumulators and queues (``is_resource`` in the op catalogue,
:mod:`distrib.framework.op_def`) are in :mod:`distrib.runtime.state.resources`.
"""
from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import kernels
from distrib.errors import InvalidArgumentError, OutOfRangeError
from distrib.framework.op_def import op_defs
from distrib.runtime.core import kernel_pool
from distrib.runtime.core.tensor_values import Node, host_array
from distrib.runtime.state.variable_store import VariableStore
from kernels.cpu import update as cpu_update
from transports.shm import shared_empty

__all__ = ["run_stateful"]


def _as_var_value(value: Any, attrs: dict[str, Any], name: str, dev: tuple[str, int]) -> Any:
    """The variable's own copy of an assigned value (on the CPU: in the
    shared-memory arena when it is big enough, see variable_store)."""
    dtype = attrs.get("dtype")
    src = np.asarray(host_array(value), dtype=dtype) if dtype else np.asarray(host_array(value))
    shape = attrs.get("shape")
    if attrs.get("validate_shape", True) and shape is not None and None not in shape \
            and list(src.shape) != list(shape):
        raise InvalidArgumentError(
            f"cannot assign a value of shape {list(src.shape)} to variable {name} of shape "
            f"{list(shape)}; pass validate_shape=False to change its shape")
    if dev[0] == "GPU":
        from kernels.cuda import devices
        return devices.to_device(np.array(src), dev[1])
    arr = shared_empty(src.shape, src.dtype)
    np.copyto(arr, src)
    return arr


def run_stateful(node: Node, args: list[Any], store: VariableStore, wanted: bool,
                  dev: tuple[str, int]) -> list[Any]:
    op, attrs, name = node["op"], node["attrs"], node["attrs"].get("var")
    if op == "VariableV2":
        return [store.get(name, node["name"])]   # no copy: the store copies on write
    if op == "IsVariableInitialized":
        return [np.array(name in store)]
    if op == "ResourceGather":   # rows read now (input 0 is the variable, for its shape)
        table = store.get(name, node["name"])
        on = dev[0] if not isinstance(table, np.ndarray) else "CPU"
        return kernels.get_kernel(op, on)([table, args[1]], attrs)
    if op == "CountUpTo":   # TF's: the old value; OutOfRangeError once it reached the limit
        cur = store.get(name, node["name"])
        if int(cur) >= int(attrs["limit"]):
            raise OutOfRangeError(f"reached limit of {attrs['limit']} (variable {name}): the "
                                  "input's epochs are done", op=node["name"])
        store.set(name, np.array(cur + 1, dtype=cur.dtype))
        return [np.array(cur)]
    if op == "Assign":
        if dev[0] == "CPU" and kernel_pool.weigh(None, args[:1], attrs)[0] == 2 and _on_loop():
            return _assign_off_loop(store, name, args[0], attrs, dev)
        store.set(name, _as_var_value(args[0], attrs, name, dev))
        return [args[0]]
    if op in ("AssignAdd", "AssignSub"):
        cur = store.writable(name, node["name"])
        if not isinstance(cur, np.ndarray):   # a GPU variable: numpy cannot write into it
            kernels.get_kernel(op, kernels.GPU)([cur, args[0]], attrs)
            return [cur if wanted else None]
        delta = np.asarray(host_array(args[0]), dtype=cur.dtype)
        if op == "AssignAdd":
            np.add(cur, delta, out=cur)
        else:
            np.subtract(cur, delta, out=cur)
        return [cur if wanted else None]
    if op == "ApplyGradientDescent" and dev[0] == "CPU" and len(args) == 2:
        # the hot update of parameter servers: written out of place when a
        # reader holds the current version, instead of copy + update
        cur, out = store.update_target(name, node["name"])
        try:
            cpu_update.gradient_descent_into(out, cur, args[0], args[1])
        except BaseException:
            if out is not cur:
                store.set(name, cur)  # a bad gradient leaves the variable as it was
            raise
        return [out if wanted else None]
    var = store.writable(name, node["name"])
    slots = [store.writable(attrs[k], node["name"]) for k in _SLOTS[op]]
    on = dev[0] if kernels.has_kernel(op, dev[0]) else "CPU"
    if on == "CPU" and not isinstance(var, np.ndarray):
        _update_on_host(kernels.get_kernel(op, on), [var, *slots], args, attrs)
    else:
        kernels.get_kernel(op, on)([var, *slots, *args], attrs)
    return [var if wanted else None]


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:   # a pool thread (a GPU update's locked run): already off the loop
        return False
    return True


def _assign_off_loop(store: VariableStore, name: str, value: Any, attrs: dict[str, Any],
                     dev: tuple[str, int]) -> asyncio.Future:
    """A big Assign (a table's initial value: 1.28 GB is ~2 s of copying): its copy
    into shared memory runs on the kernel pool, and only the swap into the store
    on the loop, which meanwhile answers heartbeats, pings and other steps. The
    executor waits for the future as for a kernel on the pool."""
    copied = kernel_pool.thread_pool().submit(_as_var_value, value, attrs, name, dev)

    async def swap() -> list[Any]:
        store.set(name, await asyncio.wrap_future(copied))
        return [value]
    return asyncio.ensure_future(swap())


def _update_on_host(fn: Any, state: list[Any], args: list[Any], attrs: dict[str, Any]) -> None:
    """A GPU variable updated by a CPU kernel (an update with no GPU kernel):
    on host copies of it and its slots, written back to the device."""
    from kernels.cuda import devices
    hosts = [devices.to_host(s) for s in state]
    fn([*hosts, *[host_array(a) for a in args]], attrs)
    for s, h in zip(state, hosts):
        if not isinstance(s, np.ndarray):
            devices.copy_in(s, h)   # (counted: kernels.counters)


# each update's slot variables, by the attrs that name them (ApplyAdam: m, v)
_SLOTS = {d.name: d.slot_attrs for d in op_defs() if d.is_update}
