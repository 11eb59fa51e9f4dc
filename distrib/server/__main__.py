"""``python -m distrib.server``: run one task's server until SIGINT/SIGTERM.

    python -m distrib.server --cluster cluster.json --job_name worker --task_index 0
    python -m distrib.server --ps_hosts h:2222 --worker_hosts h:2223,h:2224 --job_name ps --task_index 0
    python -m distrib.server            # with TF_CONFIG set
    srun python -m distrib.server       # under SLURM: one task per process
    python -m distrib.server            # in a StatefulSet pod, with DISTRIB_K8S_JOBS set

Without ``--cluster`` or ``--ps_hosts/--worker_hosts`` the cluster and the
task come from the environment, by the first of: ``TF_CONFIG``; SLURM
(``SLURM_PROCID`` set: ``SlurmClusterResolver``, jobs from ``--jobs`` or
``DISTRIB_SLURM_JOBS``, default every task a worker; ports from ``--port`` or
``DISTRIB_SLURM_PORT_BASE``, default 8888, plus the task's local index);
Kubernetes (``KUBERNETES_SERVICE_HOST`` set: ``KubernetesClusterResolver``,
jobs from ``--jobs`` or ``DISTRIB_K8S_JOBS``, port from ``--port`` or
``DISTRIB_K8S_PORT``, default 2222). ``--resolver`` names the source instead.
``--job_name``/``--task_index`` still override the task.

The server listens on its cluster address's host, except where that cannot
reach peers: a name that resolves only to loopback here (Debian's /etc/hosts
maps a host's own name to 127.0.1.1), or that does not resolve or is not an
address of this host (a Kubernetes pod before its Service publishes it), is
replaced by ``0.0.0.0`` on the same port, with one log line saying why.
``--bind HOST`` (or ``DISTRIB_BIND_ADDRESS``) says where to listen instead.
The address printed, and the one the cluster knows, stays the cluster's
(``distrib/server/bind_address.py``).

Prints one line ``serving /job:J/task:T at HOST:PORT`` when ready. Bad
configuration (malformed cluster file, unknown job, task index outside the
job, port in use, a ``--bind`` host that cannot be bound) is one line on
stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from distrib.cluster import ClusterSpec
from distrib.cluster.resolvers import add_resolver_flags, detect_scheduler, no_cluster, resolver_from_flags
from distrib.server.bind_address import bind_override
from distrib.server.server_lib import ServerCore, resolve_task

EXIT_USAGE = 2
ENVIRONMENT_HELP = (
    "Without --cluster or --ps_hosts/--worker_hosts the cluster and this task come from the "
    "environment, the first of: TF_CONFIG; SLURM (SLURM_PROCID, as srun sets it; "
    "DISTRIB_SLURM_JOBS, DISTRIB_SLURM_PORT_BASE, DISTRIB_SLURM_GPUS_PER_TASK); Kubernetes "
    "(KUBERNETES_SERVICE_HOST; the pod's name <statefulset>-<ordinal>; DISTRIB_K8S_JOBS "
    "required, DISTRIB_K8S_PORT, DISTRIB_K8S_SERVICE, DISTRIB_K8S_STATEFULSETS, "
    "DISTRIB_K8S_CLUSTER_DOMAIN, POD_NAMESPACE). Flags win over the variables.")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m distrib.server",
                                description="Run the server of one distrib task.",
                                epilog=ENVIRONMENT_HELP)
    p.add_argument("--cluster", help="JSON file {\"job\": [\"host:port\", ...]}")
    p.add_argument("--ps_hosts", help="comma-separated host:port list of the ps job")
    p.add_argument("--worker_hosts", help="comma-separated host:port list of the worker job")
    p.add_argument("--job_name", help="this task's job")
    p.add_argument("--task_index", type=int, help="this task's index in its job")
    add_resolver_flags(p, "where the cluster comes from without --cluster")
    p.add_argument("--bind", metavar="HOST",
                   help="listen on HOST (e.g. 0.0.0.0) instead of this task's host in the "
                        "cluster, which peers still dial; the port stays the cluster's "
                        "(env DISTRIB_BIND_ADDRESS)")
    p.add_argument("--log_level", default="INFO")
    return p


def _config(args: argparse.Namespace) -> tuple[ClusterSpec, str | None, int | None]:
    if args.cluster:
        return ClusterSpec.from_json(args.cluster), args.job_name, args.task_index
    if args.ps_hosts or args.worker_hosts:
        return (ClusterSpec.from_flags(ps_hosts=args.ps_hosts, worker_hosts=args.worker_hosts),
                args.job_name, args.task_index)
    if args.resolver is None and detect_scheduler(os.environ) is None:
        raise ValueError(no_cluster("--cluster FILE, or --ps_hosts/--worker_hosts"))
    resolver = resolver_from_flags(args)
    return (resolver.cluster_spec(), args.job_name or resolver.task_type,
            args.task_index if args.task_index is not None else resolver.task_id)


async def _serve(cluster: ClusterSpec, job: str | None, index: int | None,
                 bind: str | None) -> int:
    core = ServerCore(cluster, job, index, bind_address=bind)
    try:
        await core.start()
    except OSError as e:
        addr = cluster.task_address(core.job_name, core.task_index)
        where = f"{bind}:{addr.rpartition(':')[2]} (cluster address {addr})" if bind else addr
        print(f"error: cannot listen on {where} for {core.task}: {e.strerror or e}",
              file=sys.stderr)
        return EXIT_USAGE
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # before the ready line: whoever saw it may signal at once (a launcher did,
    # and the default handlers killed the server uncleanly)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"serving {core.task} at {core.system.address}", flush=True)
    waiter = asyncio.ensure_future(core.wait_stop_requested())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    stopper.cancel()
    await core.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cluster, job, index = _config(args)
        resolve_task(cluster, job, index)
        bind = bind_override(args.bind)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    import uvloop
    try:
        return uvloop.run(_serve(cluster, job, index, bind))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
