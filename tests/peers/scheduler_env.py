"""The environment a scheduler gives a task, for tests that run our CLIs under
a fake one: what ``srun`` sets (``slurm_env``), free consecutive ports for
``DISTRIB_SLURM_PORT_BASE``, and a child environment with no scheduler in it."""
from __future__ import annotations

import socket

from distrib.cluster import expand_hostlist, expand_tasks_per_node
from tests.helpers import child_env

SCHEDULER_PREFIXES = ("SLURM", "KUBERNETES_", "DISTRIB_K8S", "DISTRIB_SLURM")


def slurm_env(nodelist: str, tasks_per_node: str, rank: int, **extra: str) -> dict[str, str]:
    """What srun sets for task ``rank`` of a step laid out in blocks (its default)."""
    nodes, counts = expand_hostlist(nodelist), expand_tasks_per_node(tasks_per_node)
    places = [(n, node, local) for n, (node, count) in enumerate(zip(nodes, counts))
              for local in range(count)]
    node_id, node, local = places[rank]
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "trainer", "SLURM_JOB_NODELIST": nodelist,
           "SLURM_NODELIST": nodelist, "SLURM_JOB_NUM_NODES": str(len(nodes)),
           "SLURM_TASKS_PER_NODE": tasks_per_node, "SLURM_NTASKS": str(sum(counts)),
           "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_STEP_NODELIST": nodelist,
           "SLURM_STEP_NUM_NODES": str(len(nodes)), "SLURM_STEP_NUM_TASKS": str(sum(counts)),
           "SLURM_STEP_TASKS_PER_NODE": tasks_per_node, "SLURM_PROCID": str(rank),
           "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node_id), "SLURMD_NODENAME": node,
           "SLURM_SUBMIT_DIR": "/home/u", "SLURM_CPUS_ON_NODE": "8"}
    env.update(extra)
    return env


def free_port_base(n: int) -> int:
    """A port p with p .. p+n-1 free on loopback a moment ago."""
    for _ in range(200):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        if base + n > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def no_scheduler_env(**extra: str) -> dict[str, str]:
    """A child's environment (tests.helpers.child_env) without TF_CONFIG or any
    scheduler's variables, plus ``extra``."""
    env = {k: v for k, v in child_env().items()
           if not k.startswith(SCHEDULER_PREFIXES) and k != "TF_CONFIG"}
    env.update(extra)
    return env
