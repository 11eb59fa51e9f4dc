"""``python -m distrib.status``: how every task of a cluster is, at a glance.

    python -m distrib.status --cluster cluster.json    # or TF_CONFIG, or a scheduler's env
    python -m distrib.status --cluster cluster.json --watch 1
    python -m distrib.status --cluster cluster.json --json

Without ``--cluster`` the cluster is the one the tasks themselves resolve
(``resolvers.resolver_from_environment``): ``TF_CONFIG``, else SLURM
(``SLURM_PROCID`` and the step's node list, with ``DISTRIB_SLURM_JOBS`` and
``DISTRIB_SLURM_PORT_BASE``), else a Kubernetes pod of the cluster
(``KUBERNETES_SERVICE_HOST``, ``DISTRIB_K8S_*``). Under SLURM, run it where
it sees the training step's layout: in the batch script of a step that uses
the whole allocation, or as that step's own task.

One row per task (docs/CONTRACT.md, "Command lines"): up or down and why,
incarnation, uptime, chief role and term, global step and steps/s, the last
loss the task's process logged (its summaries: the chief's), last
checkpoint (with ``--checkpoint_dir``), open sessions, connections by
transport, memory. ``--json`` prints one object ``{"tasks": [...]}`` (one per line
under ``--watch``). Exit code 0 when every task is up, 1 otherwise (under
``--watch``: that of the last refresh, after Ctrl-C), 2 for a usage error
(no cluster, a malformed cluster file), as one line on stderr.

The cluster secret and, once the transport has it, TLS come from the
environment as for every client (``DISTRIB_CLUSTER_TOKEN``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping
from typing import NoReturn

from distrib.cluster import ClusterSpec
from distrib.cluster.resolvers import detect_scheduler, no_cluster, resolver_from_environment
from distrib.status.query import DEFAULT_TIMEOUT_S, StatusClient, TaskStatus
from distrib.status.table import render_table

EXIT_UP, EXIT_DOWN, EXIT_USAGE = 0, 1, 2
PROG = "python -m distrib.status"
_CLEAR = "\x1b[H\x1b[2J"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:   # one line, as every other usage error
        self.exit(EXIT_USAGE, f"error: {message} (see {PROG} --help)\n")


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Show the status of every task of a distrib cluster.")
    p.add_argument("--cluster", help='JSON file {"job": ["host:port", ...]} (default: TF_CONFIG, '
                                     "else a SLURM or Kubernetes environment's cluster)")
    p.add_argument("--json", action="store_true", help='print {"tasks": [...]} instead of a table')
    p.add_argument("--watch", type=_seconds, metavar="S",
                   help="refresh every S seconds until Ctrl-C")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"per-task deadline (default {DEFAULT_TIMEOUT_S:g} s)")
    p.add_argument("--checkpoint_dir", metavar="DIR",
                   help="the training's checkpoint folder: shows its newest checkpoint")
    # how many refreshes --watch makes (tests bound it); 0: until Ctrl-C
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    return p


def load_cluster(path: str | None, env: Mapping[str, str] | None = None) -> ClusterSpec:
    """The cluster from ``path``, else from TF_CONFIG, else from a SLURM or
    Kubernetes environment (``env``, default ``os.environ``); a ValueError
    says what is missing or malformed."""
    if path:
        return ClusterSpec.from_json(path)
    environ = dict(os.environ if env is None else env)   # a copy: nothing is set in it
    if detect_scheduler(environ) is None:
        raise ValueError(no_cluster("--cluster FILE"))
    return resolver_from_environment(environ).cluster_spec()


def render(rows: list[TaskStatus], as_json: bool) -> str:
    if as_json:
        return json.dumps({"tasks": [r.to_json() for r in rows]})
    return render_table(rows)


async def _run(args: argparse.Namespace, cluster: ClusterSpec, last: list[int]) -> int:
    clear = args.watch is not None and not args.json and sys.stdout.isatty()
    async with StatusClient(cluster, args.timeout, args.checkpoint_dir) as client:
        refreshes = 0
        while True:
            rows = await client.query()
            last[0] = EXIT_UP if all(r.up for r in rows) else EXIT_DOWN
            out = render(rows, args.json)
            print((_CLEAR + out) if clear else out, flush=True)
            refreshes += 1
            if args.watch is None or (args.count and refreshes >= args.count):
                return last[0]
            if not clear and not args.json:
                print(flush=True)    # a blank line between refreshes of a log
            await asyncio.sleep(args.watch)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cluster = load_cluster(args.cluster)
        if not cluster:
            raise ValueError("the cluster has no tasks")
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    last = [EXIT_DOWN]
    try:
        return asyncio.run(_run(args, cluster, last))
    except KeyboardInterrupt:   # the end of --watch
        return last[0]


if __name__ == "__main__":
    sys.exit(main())
