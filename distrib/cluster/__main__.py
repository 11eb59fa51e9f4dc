"""``python -m distrib.cluster``: a scheduler's environment as ``TF_CONFIG``.

    python -m distrib.cluster                       # print this task's TF_CONFIG
    srun python -m distrib.cluster --jobs ps:1,worker:3 -- python examples/trainer.py
    python -m distrib.cluster -- python examples/trainer.py   # in a StatefulSet pod

Programs written for TensorFlow read ``TF_CONFIG``; SLURM and Kubernetes do
not set it. This command resolves the cluster and this task the way
``python -m distrib.server`` does (``resolvers.resolver_from_environment``:
TF_CONFIG, else SLURM, else Kubernetes, with the same ``--jobs``, ``--port``,
``--gpus_per_task`` flags and ``DISTRIB_SLURM_*`` / ``DISTRIB_K8S_*``
variables), then either prints the ``TF_CONFIG`` value or replaces itself
(``exec``) with COMMAND run with ``TF_CONFIG`` set, so signals and the exit
code are COMMAND's own. Under SLURM with ``--gpus_per_task`` the command
also gets this task's ``CUDA_VISIBLE_DEVICES``. A cluster that cannot be
resolved is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from distrib.cluster.resolvers import add_resolver_flags, resolver_from_flags
from distrib.cluster.tf_config import format_tf_config, split_command

EXIT_USAGE = 2
PROG = "python -m distrib.cluster"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:   # one line, as every other usage error
        self.exit(EXIT_USAGE, f"error: {message} (see {PROG} --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, usage=f"{PROG} [--resolver KIND] [--jobs JOBS] [--port N] "
                                 "[--gpus_per_task N] [-- COMMAND [ARGS...]]",
                description="Print this task's TF_CONFIG as the scheduler's environment "
                            "gives it, or run COMMAND with it set.")
    add_resolver_flags(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    own, command = split_command(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(own)
    env = dict(os.environ)
    try:
        resolver = resolver_from_flags(args, env)
        tf_config = format_tf_config(resolver.cluster_spec(), resolver.task_type,
                                     resolver.task_id, resolver.rpc_layer)
        if command and shutil.which(command[0], path=env.get("PATH")) is None:
            raise ValueError(f"command not found: {command[0]!r}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not command:
        print(tf_config, flush=True)
        return 0
    env["TF_CONFIG"] = tf_config
    sys.stdout.flush()
    os.execvpe(command[0], command, env)   # never returns


if __name__ == "__main__":
    sys.exit(main())
