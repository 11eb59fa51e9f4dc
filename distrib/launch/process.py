"""One task's process, across its restarts: started in a process group of
its own, tied to the launcher's life, signalled by pid, its output kept.

- **Stop by pid, never leave one behind.** Each task runs in a process group
  of its own (``start_new_session``), and every signal goes to that group by
  the task's pid (:meth:`TaskProcess.signal_group`): a COMMAND that is a
  shell script takes its own children down with it. On Linux each child also
  asks the kernel for SIGKILL when the launcher dies (``PR_SET_PDEATHSIG``,
  :func:`pdeathsig_setup`), so even ``kill -9`` of the launcher leaves
  nothing running; every other exit path stops the children itself.
- **Output kept.** The last ``tail_lines`` lines of each task are kept for the
  message that names a task failing past its restarts, and with ``--logdir``
  every line also goes to ``DIR/J-I.log``. :func:`write_line` prints a line
  even to a stream that cannot encode it, and ignores a closed one.

A task's states (``PENDING`` ... ``LEFT``) are the launcher's
(:mod:`distrib.launch.launcher` moves a task between them).
"""
from __future__ import annotations

import asyncio
import collections
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import IO

from distrib.cluster import task_string

__all__ = ["TaskProcess", "describe_exit", "pdeathsig_setup", "write_line",
           "PENDING", "RUNNING", "BACKOFF", "DONE", "FAILED", "STOPPED", "LEFT"]

PENDING, RUNNING, BACKOFF, DONE, FAILED, STOPPED, LEFT = (
    "pending", "running", "backoff", "done", "failed", "stopped", "left")
_PR_SET_PDEATHSIG = 1


def describe_exit(returncode: int) -> str:
    """How a process ended, in words: ``exit code N`` or ``killed by SIGNAME``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def pdeathsig_setup() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die with the launcher (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:   # the launcher died before the prctl took hold
            os.kill(os.getpid(), signal.SIGKILL)
    return setup


class TaskProcess:
    """One task across its restarts: its process, state, output tail and log."""

    def __init__(self, job: str, index: int, argv: Sequence[str], env: dict[str, str],
                 tail_lines: int, log_path: str | None) -> None:
        self.job, self.index = job, index
        self.name = f"{job}:{index}"
        self.task = task_string(job, index)
        self.argv = list(argv)
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.state = PENDING
        self.restarts = 0
        self.preemptions = 0    # exits with RESTART_EXIT_CODE: restarted, never counted
        self.leaving = False    # removed by an elastic scale-down: its exit is a leave
        self.leave_deadline: asyncio.Task[None] | None = None   # its stop if it outstays
        self.returncode: int | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=max(1, tail_lines))
        self.log: IO[str] | None = (open(log_path, "w", encoding="utf-8", errors="replace")
                                    if log_path else None)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def send(self, sig: int) -> None:
        """Signal the task's process group (named by its pid), if it runs."""
        if self.running:
            self.signal_group(sig)

    def signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            if self.proc.returncode is None:
                try:
                    self.proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    def write_log(self, text: str) -> None:
        if self.log is not None:
            self.log.write(text + "\n")
            self.log.flush()

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


def write_line(stream: IO[str], line: str) -> None:
    """``line`` to ``stream`` now, in any encoding it takes; a closed or broken
    stream is ignored."""
    try:
        stream.write(line + "\n")
        stream.flush()
    except UnicodeEncodeError:
        enc = getattr(stream, "encoding", None) or "ascii"
        write_line(stream, line.encode(enc, "replace").decode(enc))
    except (OSError, ValueError):
        pass   # a closed or broken stdout must not stop the tasks' supervision
