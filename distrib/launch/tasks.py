"""Which tasks the launcher starts on this host, and what each one is told.

A launch is a ``ClusterSpec`` (from a cluster file, or ``--ps N --workers M``
on free loopback ports) and the tasks of it that run here (all, or those
``--only`` names). Each task learns its place the way a scheduler would tell
it: ``TF_CONFIG`` in its environment, ``{"cluster": {...}, "task": {"type":
J, "index": I}}``, so the same program runs unchanged under the launcher,
SLURM or Kubernetes.

Everything here is a pure function of its arguments (``free_ports`` aside,
which asks the kernel), so the CLI can reject a bad cluster or ``--only``
name with one line before any process starts.
"""
from __future__ import annotations

import json
import socket
from typing import Sequence

from distrib.cluster import ClusterSpec

__all__ = ["TRAINING_JOBS", "free_ports", "loopback_cluster", "select_tasks", "tf_config", "task_argv",
           "gpu_slice"]

# The jobs whose end is the end of training: when every launched task of
# these is done, the launcher releases the rest (ps tasks, evaluators).
TRAINING_JOBS = ("chief", "worker")
LOOPBACK = "127.0.0.1"


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct ports that were free on ``host`` a moment ago.

    All sockets are bound before any is closed, so the kernel hands out ``n``
    different ports; another process may still take one before our task
    binds it (the task then exits 2 and the launcher restarts it)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def loopback_cluster(ps: int, workers: int, chief: int = 0) -> ClusterSpec:
    """``chief`` chief tasks (0 or 1), ``ps`` ps tasks and ``workers`` worker
    tasks on free loopback ports."""
    if ps < 0 or workers < 0 or chief not in (0, 1):
        raise ValueError(f"--ps and --workers count tasks, --chief adds one: got --ps {ps} "
                         f"--workers {workers} chief={chief}")
    ports = iter(free_ports(ps + workers + chief))
    jobs = {job: [f"{LOOPBACK}:{next(ports)}" for _ in range(n)]
            for job, n in (("chief", chief), ("ps", ps), ("worker", workers)) if n}
    return ClusterSpec(jobs)


def select_tasks(cluster: ClusterSpec, only: str | None = None) -> list[tuple[str, int]]:
    """The ``(job, index)`` pairs to start, in cluster order.

    ``only`` is a comma-separated list of ``job`` (every task of it) or
    ``job:index`` names; ``None`` or empty means every task. An unknown job or
    index is a ``ValueError`` that lists what the cluster has."""
    every = [(job, i) for job in cluster.jobs for i in cluster.task_indices(job)]
    if not only or not only.strip():
        return every
    wanted: set[tuple[str, int]] = set()
    for name in (part.strip() for part in only.split(",")):
        if not name:
            continue
        job, sep, index = name.partition(":")
        if job not in cluster.jobs:
            raise ValueError(f"--only {name!r}: no job {job!r} in the cluster; "
                             f"its jobs are {', '.join(cluster.jobs) or 'none'}")
        if not sep:
            wanted.update((job, i) for i in cluster.task_indices(job))
            continue
        if not index.strip().isdigit() or int(index) not in cluster.task_indices(job):
            raise ValueError(f"--only {name!r}: job {job!r} has no task {index.strip()!r}; "
                             f"its tasks are {cluster.task_indices(job)}")
        wanted.add((job, int(index)))
    return [task for task in every if task in wanted]


def tf_config(cluster: ClusterSpec, job: str, index: int) -> str:
    """The ``TF_CONFIG`` value for task ``index`` of ``job``."""
    return json.dumps({"cluster": json.loads(cluster.to_json()),
                       "task": {"type": job, "index": index}}, sort_keys=True)


def task_argv(argv: Sequence[str], cluster: ClusterSpec, job: str, index: int) -> list[str]:
    """``argv`` with ``{job_name}``, ``{task_index}`` and ``{<job>_hosts}`` (that
    job's comma-separated addresses: ``{ps_hosts}``, ``{worker_hosts}``) written
    in, so a TF1 script that takes its place as flags (``mnist_replica.py``'s
    ``--job_name --task_index --ps_hosts --worker_hosts``) runs unchanged under
    the launcher. Other braces are left as they are."""
    values = {"{job_name}": job, "{task_index}": str(index)}
    for name in cluster.jobs:
        hosts = [a for a in cluster.job_tasks(name) if a is not None]
        values["{" + name + "_hosts}"] = ",".join(hosts)
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def gpu_slice(cluster: ClusterSpec, job: str, index: int, per_task: int,
              visible: str | None) -> str:
    """``--gpus_per_task N``: the task's ``CUDA_VISIBLE_DEVICES``, its own N of
    this host's GPUs (``visible``: the launcher's own CUDA_VISIBLE_DEVICES,
    None or empty: GPUs 0, 1, ...). The chief, then the workers by index,
    then the other jobs' tasks (evaluators) take consecutive slices; a ps
    task gets none (its variables live on its CPU), as the seed sets by hand.
    Raises ValueError when ``visible`` lists too few GPUs."""
    if job == "ps":
        return ""
    order = [(j, i) for j in ("chief", "worker", *sorted(set(cluster.jobs) - {"chief", "worker", "ps"}))
             if j in cluster.jobs for i in cluster.task_indices(j)]
    slot = order.index((job, index)) if (job, index) in order else len(order)
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else None
    first = slot * per_task
    if ids is None:
        return ",".join(str(first + k) for k in range(per_task))
    if first + per_task > len(ids):
        raise ValueError(f"--gpus_per_task {per_task}: task {job}:{index} needs GPUs "
                         f"{first}..{first + per_task - 1} of CUDA_VISIBLE_DEVICES={visible!r}, "
                         f"which lists {len(ids)}")
    return ",".join(ids[first:first + per_task])
