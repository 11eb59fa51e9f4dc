"""``SlurmClusterResolver``: the cluster of a SLURM job step, from the
environment ``srun`` gives each task.

``srun`` starts one process per task and tells each its rank
(``SLURM_PROCID``), the step's nodes as a compressed *hostlist*
(``SLURM_STEP_NODELIST``, e.g. ``node[01-03,07]``) and how many tasks run on
each (``SLURM_STEP_TASKS_PER_NODE``, e.g. ``2(x3),1``). Every task expands the
same two strings the same way, so all of them agree on the cluster without
talking to each other:

- Ranks are laid out in blocks, as SLURM's default ``--distribution=block``
  does: the first node's tasks get the first ranks. The task with local index
  L on a node listens on ``port_base + L``.
- Ranks are given to the jobs in the order ``jobs`` names them
  (``{"ps": 1, "worker": 3}``: rank 0 is ps 0, ranks 1-3 are workers 0-2);
  without ``jobs`` every task is a ``worker``.

Where srun says where this task really is (``SLURM_LOCALID``,
``SLURMD_NODENAME``) the resolver checks that the block layout agrees, because
a task that guessed a wrong address would only fail later, as a peer nobody
can reach. Everything is read once, when the resolver is made, and any
malformed or missing variable is a ``SchedulerEnvironmentError`` naming it.
"""
from __future__ import annotations

import itertools
import os
import re
import subprocess
from collections.abc import Mapping, MutableMapping

from distrib.cluster.cluster_resolver import ClusterResolver, SchedulerEnvironmentError, parse_job_counts
from distrib.cluster.cluster_spec import ClusterSpec

__all__ = ["SlurmClusterResolver", "expand_hostlist", "expand_tasks_per_node"]

# the variables srun sets for a step, with the job-level ones as fallbacks
# (an sbatch script outside srun sees only those)
_NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_TASKS_PER_NODE_VARS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
_GPU_LIST_VARS = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
# more hosts than any machine room has: a typo such as node[1-99999999] is an
# error, not a list that fills memory
_MAX_HOSTS = 1_000_000
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_hostlist(hostlist: str) -> list[str]:
    """SLURM's compressed host list as host names, in order, duplicates kept.

    ``"node[01-03,07],gpu[1-2]-ib"`` gives ``node01 node02 node03 node07
    gpu1-ib gpu2-ib``. A range keeps the zero padding of its first number;
    several bracket groups in one name expand left to right
    (``r[1-2]n[1-2]`` is ``r1n1 r1n2 r2n1 r2n2``).
    """
    if not isinstance(hostlist, str) or not hostlist.strip():
        raise SchedulerEnvironmentError(f"hostlist {hostlist!r} is empty: expected e.g. 'node[01-03,07]'")
    hosts: list[str] = []
    for name in _split_top_level(hostlist.strip(), hostlist):
        pieces = [_expand_piece(piece, hostlist) for piece in re.split(r"(\[[^\]]*\])", name) if piece]
        for parts in itertools.product(*pieces):
            hosts.append("".join(parts))
            if len(hosts) > _MAX_HOSTS:
                raise SchedulerEnvironmentError(f"hostlist {hostlist!r} names more than {_MAX_HOSTS} hosts")
    return hosts


def _split_top_level(text: str, whole: str) -> list[str]:
    """Split at the commas outside brackets; brackets must pair and not nest."""
    names, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            names.append(text[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise SchedulerEnvironmentError(
                f"hostlist {whole!r}: brackets must pair and not nest, e.g. 'node[01-03,07]'")
    if depth:
        raise SchedulerEnvironmentError(f"hostlist {whole!r}: a '[' is never closed")
    names.append(text[start:])
    if any(not n.strip() for n in names):
        raise SchedulerEnvironmentError(f"hostlist {whole!r} has an empty host name between commas")
    return names


def _expand_piece(piece: str, whole: str) -> list[str]:
    if not piece.startswith("["):
        if any(c.isspace() for c in piece):
            raise SchedulerEnvironmentError(f"hostlist {whole!r}: host name {piece!r} holds a space")
        return [piece]
    values: list[str] = []
    for item in piece[1:-1].split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise SchedulerEnvironmentError(
                f"hostlist {whole!r}: {item!r} in {piece} is not a number or a range "
                "like 01-03")
        first, last = match.group(1), match.group(2) or match.group(1)
        if int(last) < int(first):
            raise SchedulerEnvironmentError(f"hostlist {whole!r}: range {item!r} runs backwards")
        if int(last) - int(first) > _MAX_HOSTS:
            raise SchedulerEnvironmentError(f"hostlist {whole!r}: range {item!r} is too long")
        width = len(first)
        values.extend(str(n).zfill(width) for n in range(int(first), int(last) + 1))
    return values


def expand_tasks_per_node(tasks_per_node: str) -> list[int]:
    """SLURM's tasks-per-node string as one count per node: ``"2(x3),1"`` is ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for part in str(tasks_per_node).split(","):
        match = _TASKS.match(part.strip())
        if match is None or (match.group(2) is not None and int(match.group(2)) < 1):
            raise SchedulerEnvironmentError(
                f"tasks per node {tasks_per_node!r}: {part!r} is not a count like 2 or "
                "2(x3) (two tasks on each of three nodes)")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    for name in names:
        if env.get(name, "").strip():
            return name, env[name].strip()
    return None


def _int_var(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise SchedulerEnvironmentError(f"{name}={text!r} is not a whole number >= 0")
    return int(text)


def _gpu_list(text: str, source: str) -> list[str]:
    ids = [g.strip() for g in text.split(",") if g.strip()]
    if not ids:
        raise SchedulerEnvironmentError(f"{source}={text!r} lists no GPUs")
    return ids


# id(environment) -> (the CUDA_VISIBLE_DEVICES a resolver wrote there, the value before):
# a second resolver in the same process reads the node's GPUs, not the first's share
_WRITTEN: dict[int, tuple[str, str | None]] = {}


def _visible_gpus(env: Mapping[str, str]) -> str | None:
    value = env.get("CUDA_VISIBLE_DEVICES")
    written = _WRITTEN.get(id(env))
    if written is not None and value == written[0]:
        value = written[1]
    return value if value is not None and value.strip() else None


def _set_visible_gpus(env: MutableMapping[str, str], value: str) -> None:
    before = _visible_gpus(env)
    env["CUDA_VISIBLE_DEVICES"] = value
    _WRITTEN[id(env)] = (value, before)


def _count_nvidia_gpus() -> int:
    """The GPUs ``nvidia-smi --list-gpus`` lists (TF's last source); 0 without it."""
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


class SlurmClusterResolver(ClusterResolver):
    """The cluster of this SLURM step, like TF's resolver of that name.

    ``jobs``: ``{job: number of tasks}`` in rank order (a mapping, a JSON
    object string or ``"ps:1,worker:3"``); the counts must add up to the
    step's tasks. ``None``: every task is a worker. ``port_base``: the port of
    the first task on each node; the task with local index L uses
    ``port_base + L``. ``tasks_per_node``: one count for every node instead of
    ``SLURM_STEP_TASKS_PER_NODE``.

    GPUs: with ``gpus_per_task`` = G > 0, the task with local index L gets
    the node's GPUs L*G .. L*G+G-1, counted in ``gpus_per_node`` (a count:
    GPU ids 0..N-1) or else ``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS`` (the
    node's GPU ids) or else 0, 1, ...; ``auto_set_gpu`` writes them to
    ``CUDA_VISIBLE_DEVICES``. Without ``gpus_per_task`` (None), as TF's
    resolver does, each task gets its share: G = the node's GPUs // the most
    tasks on a node (4 GPUs, 2 tasks a node: ``0,1`` and ``2,3``), the node's
    GPUs read from ``gpus_per_node``, the SLURM lists, ``CUDA_VISIBLE_DEVICES``
    or ``nvidia-smi`` (TF's two; the last only without ``env``). Two cases
    leave GPUs alone where TF's would hide them all: no share to give (fewer
    GPUs than tasks on the node), and srun giving each task its GPUs itself
    (``SLURM_GPUS_PER_TASK`` set: ``--gpus-per-task``); ``gpus_per_task=0``
    does too.

    ``env`` replaces ``os.environ`` (a distrib extension, for tests and
    launchers); ``CUDA_VISIBLE_DEVICES`` is written into it when it can be.
    """

    def __init__(self, jobs: Mapping[str, int] | str | None = None, port_base: int = 8888,
                 gpus_per_node: int | None = None, gpus_per_task: int | None = None,
                 tasks_per_node: int | None = None, auto_set_gpu: bool = True,
                 rpc_layer: str | None = None, *,
                 env: Mapping[str, str] | None = None) -> None:
        environ = os.environ if env is None else env
        self._env = environ
        self._rpc_layer = rpc_layer
        if isinstance(port_base, bool) or not isinstance(port_base, int) \
                or not 0 < port_base <= 65535:
            raise SchedulerEnvironmentError(f"port_base must be a port from 1 to 65535; got {port_base!r}")
        self._port_base = port_base
        self.rank = self._read_rank(environ)
        self.nodes, self.tasks_per_node = self._read_layout(environ, tasks_per_node)
        self.num_tasks = sum(self.tasks_per_node)
        if self.rank >= self.num_tasks:
            raise SchedulerEnvironmentError(
                f"SLURM_PROCID={self.rank} but the step has {self.num_tasks} tasks "
                f"({self._layout_source})")
        places = [(node, local) for node, n in zip(self.nodes, self.tasks_per_node)
                  for local in range(n)]
        self.node, self.local_id = places[self.rank]
        self._check_place(environ)
        self._jobs = self._read_jobs(jobs)
        self._cluster, self._task_type, self._task_id = self._assign(places)
        if gpus_per_task is None:
            self.gpu_ids = self._share_gpus(environ, gpus_per_node, probe=env is None)
        else:
            self.gpu_ids = self._assign_gpus(environ, gpus_per_node, gpus_per_task)
        if self.gpu_ids and auto_set_gpu:
            target = os.environ if env is None else env
            if isinstance(target, MutableMapping):
                _set_visible_gpus(target, ",".join(self.gpu_ids))

    # -- reading the environment ---------------------------------------------

    @staticmethod
    def _read_rank(env: Mapping[str, str]) -> int:
        rank = _int_var(env, "SLURM_PROCID")
        if rank is None:
            raise SchedulerEnvironmentError(
                "SLURM_PROCID is not set: run each task with srun (one task per process), "
                "or use another resolver")
        return rank

    def _read_layout(self, env: Mapping[str, str],
                     tasks_per_node: int | None) -> tuple[list[str], list[int]]:
        found = _first(env, _NODELIST_VARS)
        if found is None:
            raise SchedulerEnvironmentError(
                f"none of {', '.join(_NODELIST_VARS)} is set: srun sets them for each task")
        name, text = found
        try:
            nodes = expand_hostlist(text)
        except SchedulerEnvironmentError as exc:
            raise SchedulerEnvironmentError(f"{name}: {exc}") from None
        if tasks_per_node is not None:
            if isinstance(tasks_per_node, bool) or not isinstance(tasks_per_node, int) \
                    or tasks_per_node < 1:
                raise SchedulerEnvironmentError(
                    f"tasks_per_node must be a whole number >= 1; got {tasks_per_node!r}")
            self._layout_source = f"{name}={text}, tasks_per_node={tasks_per_node}"
            return nodes, [tasks_per_node] * len(nodes)
        counts_var = _first(env, _TASKS_PER_NODE_VARS)
        if counts_var is None:
            raise SchedulerEnvironmentError(
                f"none of {', '.join(_TASKS_PER_NODE_VARS)} is set: srun sets them for each "
                "task (or pass tasks_per_node)")
        counts_name, counts_text = counts_var
        try:
            counts = expand_tasks_per_node(counts_text)
        except SchedulerEnvironmentError as exc:
            raise SchedulerEnvironmentError(f"{counts_name}: {exc}") from None
        if len(counts) != len(nodes):
            raise SchedulerEnvironmentError(
                f"{counts_name}={counts_text!r} gives {len(counts)} nodes but {name}={text!r} "
                f"lists {len(nodes)}")
        self._layout_source = f"{name}={text}, {counts_name}={counts_text}"
        total = _int_var(env, "SLURM_STEP_NUM_TASKS")
        if total is not None and total != sum(counts):
            raise SchedulerEnvironmentError(
                f"SLURM_STEP_NUM_TASKS={total} but {counts_name}={counts_text!r} adds up to "
                f"{sum(counts)}")
        return nodes, counts

    def _check_place(self, env: Mapping[str, str]) -> None:
        local = _int_var(env, "SLURM_LOCALID")
        node = env.get("SLURMD_NODENAME", "").strip()
        if (local is not None and local != self.local_id) or \
                (node and node in self.nodes and node != self.node):
            raise SchedulerEnvironmentError(
                f"SLURM_PROCID={self.rank} would be task {self.local_id} on {self.node} in a "
                f"block layout, but srun placed it as SLURM_LOCALID={local} on "
                f"SLURMD_NODENAME={node or '?'}: run srun with --distribution=block")

    def _read_jobs(self, jobs: Mapping[str, int] | str | None) -> dict[str, int]:
        if jobs is None:
            return {"worker": self.num_tasks}
        counts = parse_job_counts(jobs, "jobs")
        if sum(counts.values()) != self.num_tasks:
            raise SchedulerEnvironmentError(
                f"jobs {counts} ask for {sum(counts.values())} tasks but the SLURM step has "
                f"{self.num_tasks} ({self._layout_source}): start as many tasks as the jobs "
                "add up to (srun --ntasks)")
        return counts

    def _assign(self, places: list[tuple[str, int]]) -> tuple[ClusterSpec, str, int]:
        addresses = [f"{node}:{self._port_base + local}" for node, local in places]
        if max(self._port_base + local for _, local in places) > 65535:
            raise SchedulerEnvironmentError(
                f"port_base {self._port_base} plus {max(self.tasks_per_node) - 1} tasks on a node "
                "passes port 65535: choose a lower port_base")
        cluster: dict[str, list[str]] = {}
        start = 0
        task_type, task_id = "", 0
        for job, n in self._jobs.items():
            cluster[job] = addresses[start:start + n]
            if start <= self.rank < start + n:
                task_type, task_id = job, self.rank - start
            start += n
        return ClusterSpec(cluster), task_type, task_id

    def _assign_gpus(self, env: Mapping[str, str], gpus_per_node: int | None,
                     gpus_per_task: int | None) -> tuple[str, ...]:
        if not gpus_per_task:
            return ()
        if isinstance(gpus_per_task, bool) or not isinstance(gpus_per_task, int) or gpus_per_task < 0:
            raise SchedulerEnvironmentError(f"gpus_per_task must be a whole number >= 0; got {gpus_per_task!r}")
        here = self.tasks_per_node[self.nodes.index(self.node)]
        if gpus_per_node is not None:
            node_gpus, source = [str(i) for i in range(gpus_per_node)], f"gpus_per_node={gpus_per_node}"
        elif (found := _first(env, _GPU_LIST_VARS)) is not None:
            node_gpus, source = _gpu_list(found[1], found[0]), f"{found[0]}={found[1]}"
        else:
            node_gpus = [str(i) for i in range(here * gpus_per_task)]
            source = "no GPU list (SLURM_STEP_GPUS unset)"
        mine = node_gpus[self.local_id * gpus_per_task:(self.local_id + 1) * gpus_per_task]
        if len(mine) < gpus_per_task:
            raise SchedulerEnvironmentError(
                f"task {self.local_id} on {self.node} needs GPUs {self.local_id * gpus_per_task}.."
                f"{(self.local_id + 1) * gpus_per_task - 1} of its node ({gpus_per_task} per task), "
                f"but the node has {len(node_gpus)} ({source}): ask SLURM for "
                f"{here * gpus_per_task} GPUs per node (--gres=gpu:{here * gpus_per_task})")
        return tuple(mine)

    def _share_gpus(self, env: Mapping[str, str], gpus_per_node: int | None,
                    probe: bool) -> tuple[str, ...]:
        """TF's default: this task's even share of its node's GPUs (see the class)."""
        if env.get("SLURM_GPUS_PER_TASK", "").strip():
            return ()   # srun binds each task's GPUs itself
        if gpus_per_node is not None:
            if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) \
                    or gpus_per_node < 0:
                raise SchedulerEnvironmentError(
                    f"gpus_per_node must be a whole number >= 0; got {gpus_per_node!r}")
            node_gpus = [str(i) for i in range(gpus_per_node)]
        elif (found := _first(env, _GPU_LIST_VARS)) is not None:
            node_gpus = _gpu_list(found[1], found[0])
        elif (visible := _visible_gpus(env)) is not None:
            node_gpus = [g.strip() for g in visible.split(",") if g.strip()]
        else:
            node_gpus = [str(i) for i in range(_count_nvidia_gpus() if probe else 0)]
        share = len(node_gpus) // max(self.tasks_per_node)
        return tuple(node_gpus[self.local_id * share:(self.local_id + 1) * share])

    # -- the ClusterResolver interface ---------------------------------------

    def cluster_spec(self) -> ClusterSpec:
        return self._cluster

    @property
    def jobs(self) -> dict[str, int]:
        return dict(self._jobs)




    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: object = None) -> dict[str, int]:
        """``{"GPU": gpus_per_task}`` when GPUs were given out, else ``{}``."""
        return {"GPU": len(self.gpu_ids)} if self.gpu_ids else {}
