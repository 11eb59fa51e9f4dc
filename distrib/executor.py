"""Runs one partition of a graph on one task: the worker's inner loop.

A partition (a list of GraphDef nodes in topological order, see
``distrib.plan``) is compiled once into flat index arrays; each step then
runs it as a dataflow machine: a node runs as soon as its inputs are ready,
and ``_Recv`` nodes wait concurrently. Ordering by readiness, not by list
position, matters: two tasks that exchange tensors both ways would deadlock if
either blocked on a receive that the other can only satisfy after its own
receive.

Kernels come from the one registry in ``kernels``. A kernel that costs more
than a fraction of a millisecond runs on a thread (numpy releases the GIL), so
the event loop keeps answering heartbeats, rendezvous pushes and other
sessions while a big matmul runs.

Stateful ops (variables and their updates, ``docs/ops.md``) run here against
the task's :class:`VariableStore`, which outlives steps and sessions.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Awaitable, Callable, Protocol

import numpy as np

import kernels
from distrib.errors import (FailedPreconditionError, InvalidArgumentError, NotFoundError,
                            OpError, UnknownError)
from distrib.plan import Node, tensor_op

logger = logging.getLogger(__name__)

# Work above this many multiply-adds or bytes moves off the event loop: a thread
# hop costs ~50 us, so only kernels that take longer than that are worth it.
_OFFLOOP_FLOPS = 1 << 18
_OFFLOOP_BYTES = 1 << 20

STATEFUL_OPS = frozenset({
    "VariableV2", "Assign", "AssignAdd", "AssignSub", "IsVariableInitialized",
    "ApplyGradientDescent", "ApplyMomentum", "ApplyAdagrad", "ApplyAdam",
})


class StepChannel(Protocol):
    """How a partition talks to the other partitions of the same step."""

    def send(self, key: str, dst_task: str, value: Any) -> Awaitable[None] | None: ...

    async def recv(self, key: str, src_task: str) -> Any: ...


class VariableStore:
    """The variables a task owns, by shared name. They outlive steps and
    sessions: every client that names a variable sees the same storage."""

    def __init__(self, task: str = "") -> None:
        self.task = task
        self._values: dict[str, Any] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def names(self) -> list[str]:
        return sorted(self._values)

    def get(self, name: str, op: str | None = None) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise FailedPreconditionError(
                f"attempting to use uninitialized value {name}: run its initializer "
                "(e.g. dt.global_variables_initializer()) or restore a checkpoint first",
                task=self.task or None, op=op) from None

    def set(self, name: str, value: Any) -> None:
        self._values[name] = value

    def delete(self, name: str) -> None:
        self._values.pop(name, None)

    def clear(self) -> None:
        self._values.clear()


def _device_of(node: Node) -> tuple[str, int]:
    dev = node.get("device") or ""
    _, sep, local = dev.rpartition("/device:")
    if not sep:
        return "CPU", 0
    dtype, _, idx = local.partition(":")
    return dtype.upper(), int(idx) if idx.isdigit() else 0


def _host(x: Any) -> Any:
    if type(x) is np.ndarray or x is None:
        return x
    from kernels import devices
    return devices.to_host(x) if devices.is_device_array(x) else np.asarray(x)


class CompiledPartition:
    """A partition turned into index arrays, ready to run many steps."""

    def __init__(self, nodes: list[Node], fetches: list[str], *, task: str = "",
                 soft_placement: bool = False, gpu_count: int = 0) -> None:
        self.task = task
        self.nodes = nodes
        self.fetches = list(fetches)
        index = {n["name"]: i for i, n in enumerate(nodes)}
        n = len(nodes)
        self.inputs: list[list[tuple[int, int] | str]] = [[] for _ in range(n)]
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        self.indegree = [0] * n
        for i, node in enumerate(nodes):
            for inp in node["inputs"]:
                if inp.startswith("^"):
                    src = index[inp[1:]]
                    self._edge(src, i)
                    continue
                op, out = tensor_op(inp)
                if op in index:
                    self.inputs[i].append((index[op], out))
                    self._edge(index[op], i)
                else:  # a fed tensor, looked up in the step's feeds
                    self.inputs[i].append(inp if ":" in inp else f"{inp}:0")
        self.fetch_refs = [(index[tensor_op(t)[0]], tensor_op(t)[1]) for t in self.fetches]
        self.devices = [self._resolve_device(node, soft_placement, gpu_count) for node in nodes]
        self.kernels = [self._kernel(node, dev) for node, dev in zip(nodes, self.devices)]
        self.wanted = [bool(c) for c in self.consumers]
        for i, _ in self.fetch_refs:
            self.wanted[i] = True
        self.recv_nodes = [i for i, node in enumerate(nodes) if node["op"] == "_Recv"]

    def _edge(self, src: int, dst: int) -> None:
        self.consumers[src].append(dst)
        self.indegree[dst] += 1

    def _resolve_device(self, node: Node, soft: bool, gpu_count: int) -> tuple[str, int]:
        dtype, idx = _device_of(node)
        if dtype == "CPU":
            return dtype, idx
        if dtype == "GPU" and idx < gpu_count:
            return dtype, idx
        if soft:
            return "CPU", 0
        have = ["CPU:0"] + [f"GPU:{i}" for i in range(gpu_count)]
        raise InvalidArgumentError(
            f"op {node['name']!r} is pinned to {dtype}:{idx}, which this task does not have "
            f"(devices: {', '.join(have)}); pin it to an existing device or pass "
            "ConfigProto(allow_soft_placement=True)", task=self.task or None, op=node["name"])

    def _kernel(self, node: Node, dev: tuple[str, int]) -> Callable | None:
        op = node["op"]
        if op in STATEFUL_OPS or op in ("_Send", "_Recv", "Placeholder", "NoOp"):
            return None
        if dev[0] != "CPU" and kernels.has_kernel(op, dev[0]):
            return kernels.get_kernel(op, dev[0])
        if not kernels.has_kernel(op, "CPU"):
            raise NotFoundError(f"no kernel for op type {op!r} (op {node['name']!r}); "
                                "see docs/ops.md for the supported ops",
                                task=self.task or None, op=node["name"])
        if dev[0] != "CPU":
            logger.debug("op %s has no %s kernel; running it on CPU", op, dev[0])
        return kernels.get_kernel(op, "CPU")

    async def run(self, feeds: dict[str, Any], variables: VariableStore,
                  channel: StepChannel | None = None) -> list[Any]:
        """Run one step; returns the values of ``self.fetches`` (on the host)."""
        n = len(self.nodes)
        values: list[list[Any] | None] = [None] * n
        remaining = list(self.indegree)
        ready = deque(i for i in range(n) if remaining[i] == 0 and self.nodes[i]["op"] != "_Recv")
        pending: dict[asyncio.Future, int] = {}
        for i in self.recv_nodes:
            if remaining[i] == 0:
                pending[asyncio.ensure_future(self._recv(i, channel))] = i
        done = 0
        loop = asyncio.get_running_loop()
        try:
            while done < n:
                while ready:
                    i = ready.popleft()
                    values[i] = await self._run_node(i, values, feeds, variables, channel, loop)
                    done += 1
                    for c in self.consumers[i]:
                        remaining[c] -= 1
                        if remaining[c] == 0:
                            if self.nodes[c]["op"] == "_Recv":
                                pending[asyncio.ensure_future(self._recv(c, channel))] = c
                            else:
                                ready.append(c)
                if done < n:
                    if not pending:
                        raise UnknownError("partition stalled with no runnable op",
                                           task=self.task or None)
                    finished, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for fut in finished:
                        i = pending.pop(fut)
                        values[i] = [fut.result()]
                        done += 1
                        for c in self.consumers[i]:
                            remaining[c] -= 1
                            if remaining[c] == 0:
                                ready.append(c)
        finally:
            for fut in pending:
                fut.cancel()
        return [_host(values[i][out]) for i, out in self.fetch_refs]  # type: ignore[index]

    async def _recv(self, i: int, channel: StepChannel | None) -> Any:
        attrs = self.nodes[i]["attrs"]
        if channel is None:
            raise UnknownError(f"op {self.nodes[i]['name']!r} receives from another task, "
                               "but this step has no channel", task=self.task or None)
        return await channel.recv(attrs["key"], attrs["src_task"])

    def _gather(self, i: int, values: list, feeds: dict[str, Any]) -> list[Any]:
        args = []
        for ref in self.inputs[i]:
            if type(ref) is str:
                try:
                    args.append(feeds[ref])
                except KeyError:
                    raise InvalidArgumentError(
                        f"you must feed a value for tensor {ref!r}", task=self.task or None,
                        op=self.nodes[i]["name"]) from None
            else:
                args.append(values[ref[0]][ref[1]])
        return args

    async def _run_node(self, i: int, values: list, feeds: dict[str, Any],
                        variables: VariableStore, channel: StepChannel | None,
                        loop: asyncio.AbstractEventLoop) -> list[Any]:
        node = self.nodes[i]
        op = node["op"]
        try:
            args = self._gather(i, values, feeds)
            fn = self.kernels[i]
            if fn is not None:
                dev = self.devices[i]
                args = _to_device(args, dev) if dev[0] != "CPU" else [_host(a) for a in args]
                if _heavy(op, args):
                    return await loop.run_in_executor(None, fn, args, node["attrs"])
                return fn(args, node["attrs"])
            if op == "Placeholder":
                name = node["name"] + ":0"
                if name not in feeds:
                    raise InvalidArgumentError(
                        f"you must feed a value for placeholder tensor {name!r} "
                        f"(dtype {node['attrs'].get('dtype')}, shape {node['attrs'].get('shape')})",
                        task=self.task or None, op=node["name"])
                return [feeds[name]]
            if op == "NoOp":
                return []
            if op == "_Send":
                attrs = node["attrs"]
                res = channel.send(attrs["key"], attrs["dst_task"], _host(args[0]))  # type: ignore[union-attr]
                if res is not None:
                    await res
                return []
            return _run_stateful(node, args, variables, self.wanted[i], self.devices[i])
        except OpError as e:
            if e.op is None:
                e.op = node["name"]
            if e.task is None and self.task:
                e.task = self.task
            raise
        except (ValueError, TypeError, IndexError, ArithmeticError) as e:
            raise InvalidArgumentError(f"{op} failed: {e}", task=self.task or None,
                                       op=node["name"]) from e
        except kernels.KernelNotFound as e:
            raise NotFoundError(str(e), task=self.task or None, op=node["name"]) from e
        except Exception as e:  # a kernel bug must still name the op and keep the server up
            logger.exception("op %s (%s) failed", node["name"], op)
            raise UnknownError(f"{op} failed: {type(e).__name__}: {e}",
                               task=self.task or None, op=node["name"]) from e


def _heavy(op: str, args: list[Any]) -> bool:
    if op == "MatMul" and len(args) == 2:
        a, b = args
        sa, sb = getattr(a, "shape", ()), getattr(b, "shape", ())
        if len(sa) == 2 and len(sb) == 2:
            return sa[0] * sa[1] * max(sb) >= _OFFLOOP_FLOPS
    total = 0
    for a in args:
        total += getattr(a, "nbytes", 0)
    return total >= _OFFLOOP_BYTES


def _to_device(args: list[Any], dev: tuple[str, int]) -> list[Any]:
    from kernels import devices
    return [a if devices.is_device_array(a) else devices.to_device(np.asarray(a), dev[1])
            for a in args]


def _as_var_value(value: Any, attrs: dict[str, Any], name: str, dev: tuple[str, int]) -> Any:
    dtype = attrs.get("dtype")
    arr = np.array(_host(value), dtype=dtype, copy=True) if dtype else np.array(_host(value))
    shape = attrs.get("shape")
    if attrs.get("validate_shape", True) and shape is not None and None not in shape \
            and list(arr.shape) != list(shape):
        raise InvalidArgumentError(
            f"cannot assign a value of shape {list(arr.shape)} to variable {name} of shape "
            f"{list(shape)}; pass validate_shape=False to change its shape")
    if dev[0] == "GPU":
        from kernels import devices
        return devices.to_device(arr, dev[1])
    return arr


def _run_stateful(node: Node, args: list[Any], store: VariableStore, wanted: bool,
                  dev: tuple[str, int]) -> list[Any]:
    op, attrs, name = node["op"], node["attrs"], node["attrs"].get("var")
    if op == "VariableV2":
        value = store.get(name, node["name"])
        return [value.copy() if type(value) is np.ndarray else value]
    if op == "IsVariableInitialized":
        return [np.array(name in store)]
    if op == "Assign":
        store.set(name, _as_var_value(args[0], attrs, name, dev))
        return [args[0]]
    if op in ("AssignAdd", "AssignSub"):
        cur = store.get(name, node["name"])
        delta = np.asarray(_host(args[0]), dtype=cur.dtype)
        if op == "AssignAdd":
            np.add(cur, delta, out=cur)
        else:
            np.subtract(cur, delta, out=cur)
        return [cur.copy() if wanted else None]
    var = store.get(name, node["name"])
    slots = [store.get(attrs[k], node["name"]) for k in _SLOTS[op]]
    fn = kernels.get_kernel(op, dev[0] if kernels.has_kernel(op, dev[0]) else "CPU")
    fn([var, *slots, *args], attrs)
    return [var.copy() if wanted and type(var) is np.ndarray else var]


_SLOTS = {
    "ApplyGradientDescent": (),
    "ApplyMomentum": ("accum",),
    "ApplyAdagrad": ("accum",),
    "ApplyAdam": ("m", "v"),
}


# -- in-process evaluation (tests, debugging) ---------------------------------

_LOCAL_VARIABLES = VariableStore("/job:local/task:0")


def evaluate(fetches: Any, feed_dict: dict | None = None, graph: Any = None, *,
             variables: VariableStore | None = None) -> Any:
    """Run ``fetches`` in this process, without a server, like ``sess.run``.

    Every op runs on this process's CPU whatever its device pin (soft
    placement); variables persist across calls in a module-level store (or
    ``variables``). Meant for tests of the graph layer and gradients; real
    programs use a Session.
    """
    from distrib.fetches import FetchPlan, check_feed, feed_name
    from distrib.plan import prune
    if graph is None:
        from distrib.graph import get_default_graph
        graph = get_default_graph()
    gd = graph.as_graph_def()
    nodes = {n["name"]: n for n in gd["nodes"]}
    plan = FetchPlan(fetches)
    feeds: dict[str, Any] = {}
    for key, value in (feed_dict or {}).items():
        name = feed_name(key)
        op, idx = tensor_op(name)
        if op not in nodes:
            raise NotFoundError(f"cannot feed {name!r}: the graph has no such tensor")
        n = nodes[op]
        dts, shapes = n.get("output_dtypes") or [], n.get("output_shapes") or []
        feeds[name] = check_feed(name, value, dts[idx] if idx < len(dts) else None,
                                 shapes[idx] if idx < len(shapes) else None)
    order = prune(nodes, plan.tensors, plan.targets, feeds)
    part_nodes = [dict(nodes[n], device="") for n in order]
    fetch_names = [f"{tensor_op(t)[0]}:{tensor_op(t)[1]}" for t in plan.tensors]
    computed = [t for t in fetch_names if t not in feeds]
    compiled = CompiledPartition(part_nodes, computed, soft_placement=True)
    store = variables if variables is not None else _LOCAL_VARIABLES

    async def go() -> list[Any]:
        return await compiled.run(feeds, store)

    results = _run_coro(go())
    by_name = dict(zip(computed, results))
    return plan.build([feeds[t] if t in feeds else by_name[t] for t in fetch_names])


def _run_coro(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
