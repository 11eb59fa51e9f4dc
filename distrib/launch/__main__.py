"""``python -m distrib.launch``: run a cluster's tasks on this host.

    python -m distrib.launch --cluster cluster.json [--max_restarts 3] [--only ps,worker:1]
                             [--logdir DIR] -- COMMAND [ARGS...]
    python -m distrib.launch --ps 1 --workers 2 [...] -- COMMAND [ARGS...]  # free loopback ports
    python -m distrib.launch --ps 1 --workers 2                             # bare servers only
    python -m distrib.launch --ps 1 --workers 2:4 --logdir DIR -- COMMAND   # elastic: 2, up to 4
    python -m distrib.launch scale --logdir DIR --workers 3                 # ... grow/shrink it
    srun python -m distrib.launch [...] -- COMMAND [ARGS...]   # under a scheduler: this task

Under a scheduler, with neither ``--cluster`` nor ``--ps/--workers``, the
cluster and this process's task come from the environment, as
``python -m distrib.server`` reads it (``resolvers.resolver_from_environment``:
``TF_CONFIG``, else SLURM's ``SLURM_PROCID``, else a Kubernetes pod's
``KUBERNETES_SERVICE_HOST``, with ``DISTRIB_SLURM_*`` / ``DISTRIB_K8S_*``
settings), and the launcher runs that one task (``--only`` names others): the
scheduler starts one launcher per task, and each launcher gives its task
restarts with backoff. A lone ps task is kept running until it exits by itself
(told to stop by its chief) or a signal comes. Neither flags nor a scheduler
is the usage error below.

A thin CLI over :class:`distrib.launch.Launcher`: it reads the flags (each
with a ``DISTRIB_LAUNCH_<FLAG>`` environment twin; the flag wins), builds the
cluster and the list of tasks, and checks them all before any process
starts, so a bad cluster file, an unknown ``--only`` name, no tasks or a
COMMAND that is not found is one line on stderr and exit code 2. Then the
launcher's exit code: 0 when training is over, 1 when a task failed past its
restarts, 130 after SIGINT, 143 after SIGTERM.

``--workers MIN:MAX`` (with ``--ps``, and ``--logdir`` for the control
socket) is an elastic launch (``distrib.launch.elastic``): MIN workers start,
and ``scale`` grows or shrinks the running job to N between MIN and MAX.
``scale`` exits 0 once the change is under way, 1 when the launcher refuses
it (N outside MIN..MAX, the launcher stopping), 3 when no launcher answers
at ``--logdir``, 2 for a usage error; the reason is one line on stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from distrib.cluster import ClusterSpec
from distrib.cluster.resolvers import detect_scheduler, no_cluster, resolver_from_environment
from distrib.cluster.tf_config import split_command
from distrib.launch.control import ScaleError, request_scale
from distrib.launch.elastic import parse_workers
from distrib.launch.launcher import LaunchConfig, Launcher
from distrib.launch.tasks import loopback_cluster, select_tasks
from distrib.settings import LAUNCH_SETTINGS, SettingError

EXIT_USAGE = 2
PROG = "python -m distrib.launch"
USAGE = (f"{PROG} [--cluster FILE | --ps N --workers M [--chief]] [--only NAMES] [--max_restarts N]\n"
         f"       {' ' * len(PROG)} [--logdir DIR] [options] [-- COMMAND [ARGS...]]")
EPILOG = """\
Without --cluster or --ps/--workers the cluster and this process's task come
from a scheduler's environment, and only that task runs here (--only names
others), restarted as below:

    srun python -m distrib.launch -- python trainer.py   # one launcher per task

The first of: TF_CONFIG; SLURM (SLURM_PROCID, as srun sets it;
DISTRIB_SLURM_JOBS e.g. ps:1,worker:3, default every task a worker;
DISTRIB_SLURM_PORT_BASE, default 8888; DISTRIB_SLURM_GPUS_PER_TASK);
Kubernetes (KUBERNETES_SERVICE_HOST; DISTRIB_K8S_JOBS required,
DISTRIB_K8S_PORT, DISTRIB_K8S_SERVICE, DISTRIB_K8S_STATEFULSETS). A launcher
whose tasks are all ps keeps them until they exit (told to stop by the chief).

Each task runs COMMAND (without one: python -m distrib.server) with TF_CONFIG
set to the cluster and its task, in a process group of its own; its output
lines are printed prefixed [job:index]. A task that dies is restarted after
backoff * 1, 2, 4 ... s, up to --max_restarts times; one that exits 0 is done;
one that exits 42 (preempted: dt.distribute.experimental.PreemptionCheckpointHandler
saved its progress) is restarted after --restart_backoff s, not counted.
When every chief/worker task is done, the ps tasks are told to stop
(request_stop), the rest terminated after --ps_grace, and the exit code is 0.
SIGINT/SIGTERM stop the workers first, then the rest: exit 130/143. A task
that fails past its restarts stops the cluster: exit 1.

Elastic: --workers MIN:MAX (with --ps and --logdir DIR) starts MIN workers;
`python -m distrib.launch scale --logdir DIR --workers N` grows or shrinks
the running job to N (exit 0 under way, 1 refused, 3 no launcher there). A
removed worker stops after its current step and is not restarted; a worker
that dies while more than MIN are live is removed too, not restarted (at
MIN it is restarted in place, under a new membership version that counts
it a new generation); DIR/cluster.json is the live cluster
(python -m distrib.status --cluster).

Every flag has an environment twin DISTRIB_LAUNCH_<FLAG> (e.g.
DISTRIB_LAUNCH_MAX_RESTARTS=5)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:   # one line, as every other usage error
        self.exit(EXIT_USAGE, f"error: {message} (see {PROG} --help)\n")


def _env(flag: str) -> Any:
    """The flag's default: its twin ``DISTRIB_LAUNCH_<FLAG>`` as set, which
    argparse parses as if it were given on the command line (so a bad one is
    a usage error naming the flag, and is not read when the flag is given);
    else the declared default."""
    setting = LAUNCH_SETTINGS[flag]
    text = setting.text()
    return setting.default if text is None else text


def _typed(flag: str) -> Callable[[str], Any]:
    """The flag's type: its text parsed as its twin's is (one rule for both)."""
    setting = LAUNCH_SETTINGS[flag]

    def convert(text: str) -> Any:
        try:
            return setting.parse(text.strip())
        except SettingError as e:
            raise argparse.ArgumentTypeError(f"must be {e.allowed}, not {text!r}") from None
    return convert


def _workers(text: str) -> tuple[int, int | None]:
    """--workers M (a fixed count) or MIN:MAX (elastic)."""
    try:
        return parse_workers(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _chief_default(p: argparse.ArgumentParser) -> bool:
    try:
        return bool(LAUNCH_SETTINGS["chief"].get())
    except SettingError as e:
        p.error(str(e))


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, usage=USAGE, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Run one process per task of a distrib cluster on this host.")
    p.add_argument("--cluster", metavar="FILE", default=_env("cluster"),
                   help='cluster file {"job": ["host:port", ...]}')
    p.add_argument("--ps", type=_typed("ps"), metavar="N", default=_env("ps"),
                   help="N ps tasks on free loopback ports (with --workers)")
    p.add_argument("--workers", type=_workers, metavar="M", default=_env("workers"),
                   help="M worker tasks on free loopback ports (with --ps); MIN:MAX: an "
                        "elastic job of MIN workers, grown or shrunk by `scale` (needs --logdir)")
    p.add_argument("--chief", action="store_true", default=_chief_default(p),
                   help="one chief task too (with --ps/--workers): the coordinator of "
                        "ParameterServerStrategy training")
    p.add_argument("--only", metavar="NAMES", default=_env("only"),
                   help="start only these tasks: comma-separated job (all its tasks) or "
                        "job:index, e.g. ps,worker:1")
    p.add_argument("--max_restarts", type=_typed("max_restarts"), metavar="N", default=_env("max_restarts"),
                   help="restarts allowed per task (default 3)")
    p.add_argument("--restart_backoff", type=_typed("restart_backoff"), metavar="S",
                   default=_env("restart_backoff"),
                   help="seconds before the first restart, doubled each time (default 1)")
    p.add_argument("--max_backoff", type=_typed("max_backoff"), metavar="S", default=_env("max_backoff"),
                   help="the longest wait before a restart (default 60)")
    p.add_argument("--ps_grace", type=_typed("ps_grace"), metavar="S", default=_env("ps_grace"),
                   help="after training, seconds the ps tasks get to stop when told, "
                        "before SIGTERM (default 5)")
    p.add_argument("--stop_timeout", type=_typed("stop_timeout"), metavar="S",
                   default=_env("stop_timeout"),
                   help="seconds a task gets after SIGTERM, before SIGKILL (default 30)")
    p.add_argument("--tail_lines", type=_typed("tail_lines"), metavar="N", default=_env("tail_lines"),
                   help="last output lines kept per task, shown when it fails (default 20)")
    p.add_argument("--threads_per_task", type=_typed("threads_per_task"), metavar="N",
                   default=_env("threads_per_task"),
                   help="OMP/OPENBLAS/MKL_NUM_THREADS for each task where unset "
                        "(default 0: the cores shared out among the tasks)")
    p.add_argument("--gpus_per_task", type=_typed("gpus_per_task"), metavar="N",
                   default=_env("gpus_per_task"),
                   help="give each task its own N GPUs of this host through "
                        "CUDA_VISIBLE_DEVICES: chief, workers, then others take consecutive "
                        "slices of the launcher's own list; ps tasks get none (default 0: "
                        "left as it is)")
    p.add_argument("--logdir", metavar="DIR", default=_env("logdir"),
                   help="also write each task's output to DIR/JOB-INDEX.log")
    return p


def _plan(args: argparse.Namespace) -> tuple[ClusterSpec, list[tuple[str, int]], str | None]:
    """The cluster, the tasks of it to start here, and the scheduler it came
    from (None: the flags)."""
    counted = args.ps is not None or args.workers is not None
    if args.cluster and counted:
        raise ValueError("give either --cluster FILE or --ps N --workers M, not both")
    if args.cluster:
        cluster = ClusterSpec.from_json(args.cluster)
    elif counted:
        workers, most = args.workers or (0, None)
        if most is not None and not args.logdir:
            raise ValueError("--workers MIN:MAX needs --logdir DIR: `scale` finds the launcher there")
        if most is not None and args.only:
            raise ValueError("--workers MIN:MAX starts every task here: drop --only")
        cluster = loopback_cluster(args.ps or 0, workers, 1 if args.chief else 0)
    else:
        return _scheduler_plan(args.only)
    return cluster, select_tasks(cluster, args.only), None


def _scheduler_plan(only: str | None) -> tuple[ClusterSpec, list[tuple[str, int]], str]:
    """The scheduler's cluster, and this process's task of it (or ``only``'s)."""
    kind = detect_scheduler(os.environ)
    if kind is None:
        raise ValueError(no_cluster("--cluster FILE, or --ps N --workers M"))
    # os.environ itself: with DISTRIB_SLURM_GPUS_PER_TASK the resolver sets this
    # task's CUDA_VISIBLE_DEVICES there, and the task inherits it
    resolver = resolver_from_environment(kind=kind)
    cluster = resolver.cluster_spec()
    job, index = resolver.task_type, resolver.task_id
    if not only and (job is None or index is None):
        raise ValueError(f"the {kind} environment gives the cluster but not this process's "
                         "task: name the tasks to start with --only")
    # select_tasks says which task the cluster lacks, and what it has
    return cluster, select_tasks(cluster, only or f"{job}:{index}"), kind


def scale_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"{PROG} scale",
                description="Grow or shrink the elastic launch running with --logdir DIR to N "
                            "workers. Exit 0 once under way, 1 refused, 3 no launcher there.")
    p.add_argument("--logdir", metavar="DIR", required=True,
                   help="the --logdir of the running launcher")
    p.add_argument("--workers", type=int, metavar="N", required=True,
                   help="the number of workers wanted, within the launch's MIN:MAX")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="how long to wait for the launcher's answer (default 30)")
    return p


def scale_main(argv: Sequence[str]) -> int:
    args = scale_parser().parse_args(list(argv))
    try:
        message = asyncio.run(request_scale(args.logdir, args.workers, args.timeout))
    except ScaleError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print(message, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["scale"]:
        return scale_main(argv[1:])
    own, command = split_command(argv)
    args = parser().parse_args(own)
    try:
        cluster, tasks, scheduler = _plan(args)
        if not tasks:
            raise ValueError("no tasks to launch: the cluster has none"
                             + (f" that --only {args.only!r} names" if args.only else ""))
        if command and shutil.which(command[0]) is None:
            raise ValueError(f"command not found: {command[0]!r}")
        if args.logdir:
            os.makedirs(args.logdir, exist_ok=True)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if scheduler is not None:
        print(f"[launch] the cluster from the {scheduler} environment; this launcher runs "
              + ", ".join(f"{job}:{index}" for job, index in tasks), file=sys.stderr, flush=True)
    config = LaunchConfig(max_restarts=args.max_restarts, restart_backoff_s=args.restart_backoff,
                          max_backoff_s=args.max_backoff,
                          ps_grace_s=args.ps_grace, stop_timeout_s=args.stop_timeout,
                          tail_lines=args.tail_lines, threads_per_task=args.threads_per_task,
                          gpus_per_task=args.gpus_per_task,
                          logdir=args.logdir)
    most = args.workers[1] if args.workers and not args.cluster else None
    try:
        launcher = Launcher(cluster, tasks, command or None, config,
                            elastic_workers=None if most is None else (args.workers[0], most))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = asyncio.run(launcher.run())
    except KeyboardInterrupt:   # before the launcher's own handler was in place
        return 130
    if result.message:
        print(f"error: {result.message}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
