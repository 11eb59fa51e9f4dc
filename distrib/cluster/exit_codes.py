"""What a task's exit code tells whatever restarts it.

A task of a cluster ends in one of three ways that its manager (``python -m
distrib.launch``, a scheduler) must tell apart: done (0), failed (anything
else: restart it, on a budget), or *preempted*: told to stop (SIGTERM, a
maintenance notice), it saved its progress at a step every worker agreed on
and exited so that it is restarted, not mourned. TensorFlow's
``PreemptionCheckpointHandler`` exits with 42 there (its default ``exit_fn``,
``sys.exit(42)``, the restart code of Google's cluster manager; on GCE it is
143), and so does ours: the launcher restarts a task that exits 42 after its
restart backoff (not doubled), without counting it against ``--max_restarts``
(up to ``MAX_PREEMPTIONS`` times per task) (a preemption is the
platform's doing, not the program's: Kubernetes' pod-failure policy and
Borg do not count a disruption as a failure either). The code lives in this
low layer because both sides read it: ``distrib.distribute`` (the handler)
and ``distrib.launch``.
"""
from __future__ import annotations

__all__ = ["RESTART_EXIT_CODE"]

# TF's default exit code after a preemption checkpoint (failure_handling.py)
RESTART_EXIT_CODE = 42
