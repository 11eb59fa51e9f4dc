"""A partition compiled for running: GraphDef nodes (in topological order,
see ``distrib.runtime.step.plan``) turned once into flat index arrays, with what
every step reuses decided here: each node's device and kernel, its
consumers and uses (so a value is dropped after its last reader), inputs
read only for their shape, variable reads that alias the stored array (a
GPU variable's where no update of the partition can race its buffer's readers),
matmuls that write straight into shared memory, updates ordered after this
step's reads of the same variable, and constants folded.

Order, for the run loop (``distrib.runtime.step.executor``): of the ready heavy
kernels the one on the critical path runs first: the highest bottom level,
its own cost plus the costliest chain of heavy work after it, by last
step's costs (``_priorities``; ties: the longer kernel, so the step ends on
a short one and a ps applies a smaller last gradient).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

import numpy as np

import kernels
from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework.op_def import op_defs, op_types
from distrib.runtime.core.tensor_values import shape_stand_in
from distrib.runtime.step.plan import Node, tensor_op
from kernels.cpu import math as cpu_math
from transports.shm import shared_empty

logger = logging.getLogger(__name__)
placement_logger = logging.getLogger("distrib.placement")

__all__ = ["PartitionGraph", "log_device_placement"]

# The op catalogue's facts this module tests per node (distrib.framework.op_def),
# derived once: ops the runtime runs itself (no kernel here), updates of a
# variable, CPU kernels that can write into the arena, (op, input) pairs read
# only for shape and dtype, and the multiply-adds of a heavy op's run
_NO_KERNEL = op_types(lambda d: not d.runs_kernel)
_UPDATE_OPS = op_types(lambda d: d.is_update)
_ARENA_OUT_OPS = op_types(lambda d: d.arena_out)
_SHAPE_ONLY = frozenset((d.name, k) for d in op_defs() for k in d.shape_only_inputs)
_FLOPS = {d.name: d.heavy for d in op_defs() if d.heavy is not None}
# what each update writes into in place (Assign replaces the stored array instead)
UPDATE_WRITES = {d.name: ("var", *d.slot_attrs) for d in op_defs() if d.is_update and d.name != "Assign"}
# GPU kernels whose output may be (a view of) their input 0: a variable's buffer
# read in place flows on through them (and through an Assign, which outputs its
# input) to their own readers
_GPU_VIEW_OPS = frozenset({"Reshape", "ExpandDims", "Squeeze", "SumToShapeOf"})


def log_device_placement(task: str, nodes: list[Node], devices: list[tuple[str, int]]) -> None:
    """TF's ``log_device_placement`` lines, ``name: (Op): /job:J/replica:0/task:T/device:CPU:0``,
    one per node as the task places it, on the ``distrib.placement`` logger (to
    stderr at INFO where nothing else is configured: the user asked to see them)."""
    if not placement_logger.handlers and not logging.getLogger().handlers:
        placement_logger.addHandler(logging.StreamHandler())
        placement_logger.setLevel(logging.INFO)
    job, _, index = task.partition("/task:")
    prefix = f"{job}/replica:0/task:{index}" if task else ""
    for node, (dtype, idx) in zip(nodes, devices):
        placement_logger.info("%s: (%s): %s/device:%s:%d", node["name"], node["op"], prefix,
                              dtype, idx)


def _device_of(node: Node) -> tuple[str, int]:
    dev = node.get("device") or ""
    _, sep, local = dev.rpartition("/device:")
    if not sep:
        return "CPU", 0
    dtype, _, idx = local.partition(":")
    return dtype.upper(), int(idx) if idx.isdigit() else 0


class PartitionGraph:
    """A partition turned into index arrays, ready to run many steps."""

    def __init__(self, nodes: list[Node], fetches: list[str], *, task: str = "",
                 soft_placement: bool = False, gpu_count: int = 0, cpu_count: int = 1,
                 generators: dict | None = None, feeds: Iterable[str] = (),
                 log_placement: bool = False) -> None:
        self.task = task
        # a seeded random op keeps its generator from step to step, in
        # ``generators`` (the worker passes one dict to all the partitions of a
        # session); its node here is a copy: the caller's graph stays as it was
        gens: dict = {} if generators is None else generators
        self.nodes = [{**node, "attrs": cpu_math.rng_attrs(node["attrs"], node["name"], gens)}
                      if node["op"] in cpu_math.RANDOM_OPS else node for node in nodes]
        self.fetches = list(fetches)
        fed = {"{}:{}".format(*tensor_op(t)) for t in feeds}
        index = {n["name"]: i for i, n in enumerate(nodes)}
        n = len(nodes)
        self.inputs: list[list[tuple[int, int] | str]] = [[] for _ in range(n)]
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        self.preds: list[list[int]] = [[] for _ in range(n)]
        self.indegree = [0] * n
        for i, node in enumerate(nodes):
            for inp in node["inputs"]:
                if inp.startswith("^"):
                    src = index[inp[1:]]
                    self._edge(src, i)
                    continue
                op, out = tensor_op(inp)
                if op in index and f"{op}:{out}" not in fed:
                    self.inputs[i].append((index[op], out))
                    self._edge(index[op], i)
                else:  # a fed tensor, looked up in the step's feeds (even where
                    # its producer runs too: a target, a control input)
                    self.inputs[i].append(inp if ":" in inp else f"{inp}:0")
        self.fetch_refs = [(index[tensor_op(t)[0]], tensor_op(t)[1]) for t in self.fetches]
        self.devices = [self._resolve_device(node, soft_placement, gpu_count, cpu_count)
                        for node in nodes]
        if log_placement:   # ConfigProto(log_device_placement=True): TF's lines, here where it places
            log_device_placement(task, nodes, self.devices)
        self.kernels = [self._kernel(node, dev) for node, dev in zip(nodes, self.devices)]
        # CPU ops that may write their result into a dead input (see exclusive)
        self.in_place = [cpu_math.IN_PLACE.get(node["op"]) if dev[0] == "CPU" else None
                         for node, dev in zip(nodes, self.devices)]
        self.recv_nodes = [i for i, node in enumerate(nodes) if node["op"] == "_Recv"]
        self.is_recv = [node["op"] == "_Recv" for node in nodes]
        # inputs read only for their shape and dtype (the reference of a gradient's
        # SumToShapeOf, say): they get a stand-in, so the tensor itself can go
        # (and be overwritten in place, see exclusive) once its real readers ran
        self.shape_only = [[self.devices[i][0] == "CPU" and (node["op"], k) in _SHAPE_ONLY
                            and type(ref) is not str for k, ref in enumerate(self.inputs[i])]
                           for i, node in enumerate(nodes)]
        # data uses of each node's outputs; a fetched node is never released
        self.uses = [0] * n
        all_uses = [0] * n
        self.keeps_shape = [False] * n   # some reader wants only its outputs' shapes
        for i, refs in enumerate(self.inputs):
            for k, ref in enumerate(refs):
                if type(ref) is not str:
                    all_uses[ref[0]] += 1
                    if self.shape_only[i][k]:
                        self.keeps_shape[ref[0]] = True
                    else:
                        self.uses[ref[0]] += 1
        for i, _ in self.fetch_refs:
            self.uses[i] = all_uses[i] = -1
        # an update whose value nobody reads returns nothing: the step must not
        # hold the stored array (it would look shared to the next update)
        self.wanted = [u != 0 for u in all_uses]
        self.producers = [[ref[0] for k, ref in enumerate(refs)
                           if type(ref) is not str and not self.shape_only[i][k]]
                          for i, refs in enumerate(self.inputs)]
        # a variable's read (the Identity that Variable() puts after it) forwards
        # the stored array: the store copies on write, so no copy is needed here
        reads = [node["op"] == "Identity" and len(self.inputs[i]) == 1
                 and type(self.inputs[i][0]) is not str
                 and nodes[self.inputs[i][0][0]]["op"] == "VariableV2"
                 for i, node in enumerate(nodes)]
        self.alias = [r and self.devices[i][0] == "CPU" for i, r in enumerate(reads)]
        # a GPU read that uses the variable's device buffer in place (no
        # snapshot copy): the variable's name, where _gpu_reads_in_place allows it
        self.read_var: list[str | None] = [None] * n
        # a CPU MatMul whose result goes only to other tasks (a weight's
        # gradient on its way to a ps) writes it straight into the shared-memory
        # arena: a co-located receiver then reads it where it is, and the send
        # copies nothing (a remote one gets the same bytes over TCP)
        fetched = {i for i, _ in self.fetch_refs}
        self.kernel_attrs = [node["attrs"] for node in self.nodes]
        for i, node in enumerate(self.nodes):
            if node["op"] in _ARENA_OUT_OPS and self.devices[i][0] == "CPU" \
                    and i not in fetched and self.consumers[i] \
                    and all(self.nodes[c]["op"] == "_Send"
                            and self.nodes[c]["attrs"].get("dst_task") != task
                            for c in self.consumers[i]):
                self.kernel_attrs[i] = {**node["attrs"], "_alloc": shared_empty}
        gpu_reads = self._gpu_read_candidates(reads, fetched)
        self._order_updates_after_reads()
        self._gpu_reads_in_place(gpu_reads)
        self._fold_constants()
        self.sources = [i for i in range(n) if self.indegree[i] == 0 and not self.is_recv[i]
                        and not self.folded[i]]
        # the cost of each node's kernel if it was heavy in the last step, else 0
        # (see the executor's _run_node and kernel_pool.weigh, which weighs a
        # node by flops_of when its op type has a cost, else by its bytes)
        self.heavy = [0.0] * n
        self.flops_of = [_FLOPS.get(node["op"]) for node in nodes]
        # each node's heavy work from it to the end of the step, its own
        # included (by the costs in self.heavy; see _priorities)
        self.priority = [0.0] * n
        self._priced: list[float] = list(self.heavy)
        # each receive's wait last step: seconds from when the step could take
        # its tensor to when it came (see spin_until)
        self.recv_took: dict[int, float] = {}
        self._topo = self._topological()

    def _order_updates_after_reads(self) -> None:
        """Let an update of a variable wait for this step's readers of it.

        Nothing in the graph orders ``dX = dY @ w.T`` before ``w``'s update
        (both only need ``dY``); run concurrently, the update would find ``w``
        shared and copy it. An extra edge from each reader makes the step read
        before it writes, as a serial run would, unless the reader itself
        depends on the update (that edge would be a cycle) or waits for another
        task (which might wait for the update: a cycle through two partitions)."""
        readers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            if node["op"] == "VariableV2":
                found = readers.setdefault(node["attrs"].get("var"), [])
                for c in self.consumers[i]:
                    if c in self._gpu_readers:   # a GPU read in place: all that read its buffer
                        found.extend(self._gpu_readers[c])
                    elif self.alias[c]:
                        found.extend(c2 for c2 in self.consumers[c] if self._reads(c2, c))
                    elif self._reads(c, i):
                        found.append(c)
        for i, node in enumerate(self.nodes):
            if node["op"] not in _UPDATE_OPS or not readers.get(node["attrs"].get("var")):
                continue
            after = self._descendants(i)
            for r in set(readers[node["attrs"]["var"]]):
                if r != i and r not in after and not self._waits_for_recv(r):
                    self._edge(r, i)

    def _gpu_read_candidates(self, reads: list[bool], fetched: set[int]) -> dict[int, str]:
        """The GPU reads of a variable (its ``Identity``) that may use its
        device buffer in place, so far as their readers go: on the variable's
        GPU, not fetched, and every op that reads the buffer (through views:
        ``_GPU_VIEW_OPS``) a GPU op of that same device (one stream: ordered
        with the variable's updates) or a host op (it copies the value out when
        it runs). Those readers stand for the read in
        ``_order_updates_after_reads`` (ordered before the updates where the
        graph allows); ``_gpu_reads_in_place`` then decides. Returns read
        node -> variable name."""
        self._gpu_readers: dict[int, list[int]] = {}
        found: dict[int, str] = {}
        for i, is_read in enumerate(reads):
            dev = self.devices[i]
            if not is_read or dev[0] == "CPU" or i in fetched \
                    or self.devices[self.inputs[i][0][0]] != dev:  # type: ignore[index]
                continue
            readers, stack, ok = [], [i], True
            while stack and ok:
                j = stack.pop()
                for c in self.consumers[j]:
                    if not self._reads(c, j) or c in readers:
                        continue
                    readers.append(c)
                    on, op = self.devices[c], self.nodes[c]["op"]
                    if on[0] != "CPU" and on != dev:
                        ok = False   # another GPU's stream: not ordered with the updates
                    elif (op == "Assign" or (on == dev and op in _GPU_VIEW_OPS)) \
                            and self.inputs[c][0] == (j, 0):   # (the others: shapes)
                        ok = c not in fetched   # its output may be the buffer itself
                        stack.append(c)
            if ok:
                found[i] = self.nodes[self.inputs[i][0][0]]["attrs"].get("var")  # type: ignore[index]
                self._gpu_readers[i] = readers
        return found

    def _gpu_reads_in_place(self, candidates: dict[int, str]) -> None:
        """Keep a candidate GPU read in place where every op reading its buffer
        runs before every update of this partition that writes into the
        variable (by the graph's edges, the read-before-update ones included);
        else it copies, as ``Identity`` does, ordered before those updates.
        (Another step's update meanwhile: ``gpu_step.unshare``.)"""
        if not candidates:
            return
        writers: dict[str, list[int]] = {}
        for u, node in enumerate(self.nodes):
            for key in UPDATE_WRITES.get(node["op"], ()):
                writers.setdefault(node["attrs"].get(key), []).append(u)
        after: dict[int, set[int]] = {}
        for i, var in candidates.items():
            ws = writers.get(var, [])
            safe = True
            for r in self._gpu_readers[i] if ws else ():
                if r not in after:
                    after[r] = self._descendants(r)
                safe = safe and all(u in after[r] for u in ws)
            if safe:
                self.alias[i] = True
                self.read_var[i] = var
                continue
            self.alias[i] = False   # a snapshot copy, read before the updates
            for u in ws:
                if i not in self._descendants(u) and not self._waits_for_recv(i):
                    self._edge(i, u)

    def _topological(self) -> list[int]:
        """The nodes in an order where each comes after its inputs (the
        extra read-before-update edges included)."""
        indeg = [len(p) for p in self.preds]   # every edge (self.indegree omits folded ones)
        order = [i for i in range(len(self.nodes)) if indeg[i] == 0]
        for i in order:   # grows as it goes
            for c in self.consumers[i]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    order.append(c)
        return order

    def _priorities(self) -> None:
        """The bottom level of every node: its heavy cost plus the costliest
        chain of heavy work after it (list scheduling's classic priority).
        Of two ready heavy kernels the higher one is on the step's critical
        path: it runs first, and on the loop's own thread when the other
        goes to the pool."""
        cost, prio, consumers = self.heavy, self.priority, self.consumers
        for i in reversed(self._topo):
            after = 0.0
            for c in consumers[i]:
                if prio[c] > after:
                    after = prio[c]
            prio[i] = cost[i] + after
        self._priced = list(cost)

    def _fold_constants(self) -> None:
        """Evaluate the CPU ``Const`` nodes once, here, instead of every step.

        A step starts with their values in place and their consumers' counts
        of missing inputs already lowered (``start_values``, ``indegree``).
        The values are made read-only, so no kernel writes into them (see
        exclusive); a fetch of one, or of a view of one, copies it (see
        _const_view), and so does a send to a task in this process (see the
        channel's send)."""
        n = len(self.nodes)
        self.start_values: list[list[Any] | None] = [None] * n
        self.start_shapes: list[list[Any] | None] = [None] * n
        self.const_ids: set[int] = set()
        self._const_arrays: list[np.ndarray] = []
        self.folded = [False] * n
        for i, node in enumerate(self.nodes):
            if node["op"] != "Const" or self.devices[i][0] != "CPU" or self.inputs[i] \
                    or self.preds[i] or self.kernels[i] is None:
                continue
            try:
                out = self.kernels[i]([], node["attrs"])
            except Exception:
                continue   # a bad constant fails in its step, as an op error
            if type(out) is not list or not all(type(o) is np.ndarray for o in out):
                continue
            for o in out:
                o.setflags(write=False)
                # numpy's views point at the array that owns the memory: that one too
                root = o
                while isinstance(root.base, np.ndarray):
                    root = root.base
                for a in (o, root):
                    self.const_ids.add(id(a))
                    self._const_arrays.append(a)   # alive, so their ids stay theirs
            self.folded[i] = True
            self.start_values[i] = out if self.uses[i] else None
            if self.keeps_shape[i]:
                self.start_shapes[i] = [shape_stand_in(o) for o in out]
            for c in self.consumers[i]:
                self.indegree[c] -= 1
        self.n_folded = sum(self.folded)

    def _const_view(self, value: Any) -> bool:
        """Whether ``value`` is one of this partition's folded constants or a
        view of one (only read-only arrays can be)."""
        if type(value) is not np.ndarray or value.flags.writeable or not self.const_ids:
            return False
        while isinstance(value, np.ndarray):   # a base may be bytes, an mmap...
            if id(value) in self.const_ids:
                return True
            value = value.base
        return False

    def _waits_for_recv(self, i: int) -> bool:
        seen = {i}
        stack = [i]
        while stack:
            j = stack.pop()
            if self.is_recv[j]:
                return True
            for p in self.preds[j]:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return False

    def _reads(self, consumer: int, producer: int) -> bool:
        return any(type(ref) is not str and ref[0] == producer for ref in self.inputs[consumer])

    def _descendants(self, i: int) -> set[int]:
        seen: set[int] = set()
        stack = [i]
        while stack:
            for c in self.consumers[stack.pop()]:
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return seen

    def _edge(self, src: int, dst: int) -> None:
        self.consumers[src].append(dst)
        self.preds[dst].append(src)
        self.indegree[dst] += 1

    def _resolve_device(self, node: Node, soft: bool, gpu_count: int,
                        cpu_count: int = 1) -> tuple[str, int]:
        dtype, idx = _device_of(node)
        # a CPU index the task lacks still runs on its CPU (they share the host's cores;
        # a strategy may ask for logical CPUs after the process's local server started):
        # TF would refuse it
        if dtype == "CPU" or (dtype == "GPU" and idx < gpu_count):
            return dtype, idx
        if soft:
            return "CPU", 0
        have = [f"CPU:{i}" for i in range(cpu_count)] + [f"GPU:{i}" for i in range(gpu_count)]
        raise InvalidArgumentError(
            f"op {node['name']!r} is pinned to {dtype}:{idx}, which this task does not have "
            f"(devices: {', '.join(have)}); pin it to an existing device or pass "
            "ConfigProto(allow_soft_placement=True)", task=self.task or None, op=node["name"])

    def _kernel(self, node: Node, dev: tuple[str, int]) -> Callable | None:
        op = node["op"]
        if op in _NO_KERNEL:   # a feed, a send or receive, a stateful op, a collective
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
