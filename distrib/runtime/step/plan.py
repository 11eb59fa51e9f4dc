"""Step planning on GraphDefs: prune, place, partition.

The master turns "run these fetches with these feeds" into one partition per
task. Everything here is a pure function on the plain-data GraphDef nodes of
``docs/ops.md`` (dicts), so the same code serves the master service, the
in-process evaluator and the tests, and nothing here touches a socket.

Principles:
- A fed tensor cuts the graph: its producer runs only if something else needs
  it (TensorFlow's rule), so feeding an intermediate tensor is cheap.
- Every edge that crosses tasks becomes one ``_Send`` on the producer's task
  and one ``_Recv`` per consuming task, whatever the number of consumers there
  (each tensor crosses to a task once per step).
- Control edges from several ops of one task into one op of another (the
  ``minimize`` NoOp after the updates on a ps) cross as one message: a
  trigger on the source task waits for all of them.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Iterable

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework.device import DeviceSpec
from distrib.runtime.core.tensor_values import Node


@dataclass(frozen=True)
class Device:
    """A fully or partly specified device; unset fields are None."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @property
    def task_name(self) -> str:
        return f"/job:{self.job}/task:{self.task}"

    @property
    def local_name(self) -> str:
        """The device within its task, e.g. ``GPU:0``."""
        return f"{self.device_type or 'CPU'}:{self.device_index or 0}"

    def canonical(self) -> str:
        return (f"/job:{self.job}/replica:{self.replica or 0}/task:{self.task}"
                f"/device:{self.local_name}")


def parse_device(spec: str) -> Device:
    """Parse any TensorFlow device string ("/job:ps/task:0", "/gpu:1", "GPU:0", "")
    with the one device parser of distrib (:class:`distrib.framework.device.DeviceSpec`)."""
    d = DeviceSpec.from_string(spec)
    return Device(d.job, d.replica, d.task, d.device_type, d.device_index)


def tensor_op(name: str) -> tuple[str, int]:
    """Split "op:3" into ("op", 3); a bare "op" is output 0."""
    op, sep, idx = name.rpartition(":")
    if sep and idx.isdigit():
        return op, int(idx)
    return name, 0


def prune(nodes: dict[str, Node], fetches: Iterable[str], targets: Iterable[str],
          feeds: Iterable[str]) -> list[str]:
    """Names of the nodes needed to compute ``fetches`` and run ``targets``,
    in topological order. ``feeds`` are tensor names ("x:0") whose values are
    given, so their producers are cut off unless needed for another reason."""
    fed = set(feeds)
    roots: list[str] = []
    for t in fetches:
        if t in fed:
            continue
        op, idx = tensor_op(t)
        outs = nodes[op].get("output_dtypes") if op in nodes else None
        if outs is not None and not 0 <= idx < len(outs):
            raise InvalidArgumentError(
                f"cannot fetch {t!r}: op {op!r} has {len(outs)} output(s), "
                f"{op}:0 to {op}:{len(outs) - 1}" if outs else
                f"cannot fetch {t!r}: op {op!r} has no outputs; run it as a target instead")
        roots.append(op)
    roots.extend(targets)
    for r in roots:
        if r not in nodes:
            raise NotFoundError(f"the graph has no op named {r!r}; fetch a tensor or op of "
                                "the session's graph")
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = visiting, 2 = done
    for root in roots:
        _visit(root, nodes, fed, state, order)
    return _creation_order(order, nodes, fed)


def _deps(node: Node, fed: set[str], with_input: bool = False) -> Iterable[Any]:
    """The ops ``node`` waits for (data and control), fed tensors left out;
    with ``with_input``, (input, op) pairs."""
    for inp in node["inputs"]:
        if inp.startswith("^"):
            dep = inp[1:]
        elif inp in fed:
            continue
        else:
            dep = tensor_op(inp)[0]
        yield (inp, dep) if with_input else dep


def _creation_order(needed: list[str], nodes: dict[str, Node], fed: set[str]) -> list[str]:
    """``needed`` (a topological order) re-sorted into the topological order
    that keeps the graph's creation order wherever the edges allow.

    The executor starts ready ops in list order, so this order decides, for
    instance, which variable a parameter server sends first: the first layer's
    weights (created first, needed first) rather than whichever one a
    depth-first walk from the train op happened to reach first."""
    rank = {name: i for i, name in enumerate(nodes)}
    keep = set(needed)
    consumers: dict[str, list[str]] = {name: [] for name in needed}
    indegree = dict.fromkeys(needed, 0)
    for name in needed:
        for dep in _deps(nodes[name], fed):
            if dep in keep:
                consumers[dep].append(name)
                indegree[name] += 1
    heap = [(rank[n], n) for n in needed if indegree[n] == 0]
    heapq.heapify(heap)
    out: list[str] = []
    while heap:
        _, name = heapq.heappop(heap)
        out.append(name)
        for c in consumers[name]:
            indegree[c] -= 1
            if indegree[c] == 0:
                heapq.heappush(heap, (rank[c], c))
    return out


def _visit(root: str, nodes: dict[str, Node], fed: set[str], state: dict[str, int],
           order: list[str]) -> None:
    # iterative DFS: graphs from gradients are deep enough to overflow recursion
    stack: list[tuple[str, bool]] = [(root, False)]
    while stack:
        name, expanded = stack.pop()
        if expanded:
            state[name] = 2
            order.append(name)
            continue
        s = state.get(name)
        if s == 2:
            continue
        if s == 1:
            raise InvalidArgumentError(f"the graph has a cycle through op {name!r}")
        state[name] = 1
        stack.append((name, True))
        for inp, dep in _deps(nodes[name], fed, with_input=True):
            if dep not in nodes:
                raise NotFoundError(f"op {name!r} has input {inp!r}, which is not in the graph")
            if state.get(dep) != 2:
                if state.get(dep) == 1:
                    raise InvalidArgumentError(f"the graph has a cycle through op {dep!r}")
                stack.append((dep, False))


@dataclass
class Partition:
    """The nodes one task runs in a step, and which tensors it reports back."""

    task: str
    nodes: list[Node] = field(default_factory=list)
    fetches: list[str] = field(default_factory=list)   # tensor names this task returns
    feeds: list[str] = field(default_factory=list)     # fed tensor names this task consumes
    peers: set[str] = field(default_factory=set)       # tasks it exchanges tensors with


def place(nodes: dict[str, Node], order: list[str], *, default_job: str, default_task: int,
          tasks: dict[str, list[int]]) -> dict[str, Device]:
    """Give every node a full device. Unpinned ops go to the master's own task;
    a job or task that the cluster lacks is an error naming it."""
    placed: dict[str, Device] = {}
    for name in order:
        d = parse_device(nodes[name].get("device", ""))
        job = d.job if d.job is not None else default_job
        task = d.task if d.task is not None else (default_task if d.job is None else 0)
        if job not in tasks or task not in tasks[job]:
            valid = ", ".join(f"/job:{j}/task:{t}" for j in sorted(tasks) for t in tasks[j])
            raise InvalidArgumentError(
                f"op {name!r} is pinned to /job:{job}/task:{task}, which is not in the cluster; "
                f"valid tasks: {valid}")
        placed[name] = Device(job, 0, task, d.device_type or "CPU",
                              d.device_index if d.device_index is not None else 0)
    return placed


def partition(nodes: dict[str, Node], order: list[str], placed: dict[str, Device],
              fetches: list[str], feeds: Iterable[str],
              targets: Iterable[str] = ()) -> dict[str, Partition]:
    """Split the pruned graph by task, adding _Send/_Recv pairs on crossing edges.

    A target NoOp that nothing in the step consumes (``minimize``'s train op
    after the updates on a ps) keeps only its control inputs from its own
    task: the step ends when every task's partition has run, so the ops of
    another task are done by then without a message saying so."""
    fed = set(feeds)
    placed = dict(placed)   # the control-group triggers are added to it below
    parts: dict[str, Partition] = {}
    consumed = {dep for name in order for dep in _deps(nodes[name], fed)}
    fetched_ops = {tensor_op(t)[0] for t in fetches}
    end_noops = {t for t in targets if t in nodes and nodes[t]["op"] == "NoOp"
                 and t not in consumed and t not in fetched_ops}

    def part(task: str) -> Partition:
        if task not in parts:
            parts[task] = Partition(task)
        return parts[task]

    sends: set[tuple[str, str]] = set()     # (tensor, dst task)
    recvs: dict[tuple[str, str], str] = {}  # (tensor, dst task) -> recv node name
    for name in order:
        node = nodes[name]
        dev = placed[name]
        task = dev.task_name
        new_inputs = []
        inputs = node["inputs"]
        if name in end_noops:
            inputs = [inp for inp in inputs
                      if not (inp.startswith("^") and placed[inp[1:]].task_name != task)]
        inputs, merged = _merge_remote_controls(name, inputs, placed, task)
        for trig_node, src_task in merged:
            # the group's trigger stands in for its ops; it crosses like any control edge
            part(src_task).nodes.append(trig_node)
            src = placed[trig_node["inputs"][0][1:]]
            placed[trig_node["name"]] = Device(src.job, 0, src.task, "CPU", 0)
        for inp in inputs:
            ctrl = inp.startswith("^")
            if not ctrl and inp in fed:
                new_inputs.append(inp)
                if inp not in part(task).feeds:
                    part(task).feeds.append(inp)
                continue
            src = inp[1:] if ctrl else tensor_op(inp)[0]
            src_task = placed[src].task_name
            if src_task == task:
                new_inputs.append(inp)
                continue
            tensor = f"{src}:__ctrl" if ctrl else _full(inp)
            key = f"{tensor}->{task}"
            if (tensor, task) not in sends:
                sends.add((tensor, task))
                _add_send(part(src_task), src, inp, ctrl, key, task, placed[src])
            if (tensor, task) not in recvs:
                rname = f"_recv/{tensor}/{task}"
                recvs[(tensor, task)] = rname
                dtype = "bool" if ctrl else _out_dtype(nodes[src], tensor_op(inp)[1])
                part(task).nodes.append({
                    "name": rname, "op": "_Recv", "inputs": [],
                    "device": f"{task}/device:CPU:0",
                    "attrs": {"key": key, "src_task": src_task, "dst_task": task, "dtype": dtype},
                })
            part(task).peers.add(src_task)
            part(src_task).peers.add(task)
            new_inputs.append(("^" + recvs[(tensor, task)]) if ctrl else recvs[(tensor, task)] + ":0")
        new = dict(node)
        new["inputs"] = new_inputs
        new["device"] = dev.canonical()
        part(task).nodes.append(new)
    for t in fetches:
        if t in fed:
            continue
        op, _ = tensor_op(t)
        part(placed[op].task_name).fetches.append(_full(t))
    return parts


def _merge_remote_controls(name: str, inputs: list[str], placed: dict[str, Device],
                           task: str) -> tuple[list[str], list[tuple[Node, str]]]:
    """``inputs`` with the control inputs that come from another task in
    groups of two or more replaced by one NoOp per source task that waits for
    the group (so the group costs one message instead of one each)."""
    groups: dict[str, list[str]] = {}
    for inp in inputs:
        if inp.startswith("^") and placed[inp[1:]].task_name != task:
            groups.setdefault(placed[inp[1:]].task_name, []).append(inp)
    groups = {t: g for t, g in groups.items() if len(g) > 1}
    if not groups:
        return inputs, []
    grouped = {inp for g in groups.values() for inp in g}
    out = [inp for inp in inputs if inp not in grouped]
    merged = []
    for src_task, group in groups.items():
        trig = {"name": f"_ctrl_group/{name}/{src_task}", "op": "NoOp", "inputs": group,
                "device": f"{src_task}/device:CPU:0", "attrs": {}}
        merged.append((trig, src_task))
        out.append("^" + trig["name"])
    return out, merged


def _full(tensor: str) -> str:
    op, idx = tensor_op(tensor)
    return f"{op}:{idx}"


def _out_dtype(node: Node, index: int) -> str | None:
    dts = node.get("output_dtypes") or []
    return dts[index] if index < len(dts) else None


def _add_send(p: Partition, src: str, inp: str, ctrl: bool, key: str, dst: str,
              dev: Device) -> None:
    src_task = dev.task_name
    if ctrl:
        # a control edge crosses as a tiny tensor produced after the source ran
        trig = f"_ctrl_trigger/{src}/{dst}"
        p.nodes.append({"name": trig, "op": "Const", "inputs": ["^" + src],
                        "device": dev.canonical(),
                        "attrs": {"value": True, "dtype": "bool"}})
        value = trig + ":0"
    else:
        value = _full(inp)
    p.nodes.append({"name": f"_send/{key}", "op": "_Send", "inputs": [value],
                    "device": f"{src_task}/device:CPU:0",
                    "attrs": {"key": key, "src_task": src_task, "dst_task": dst}})
