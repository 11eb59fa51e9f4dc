"""Fencing of a checkpoint folder: it refuses the checkpoints of a chief
older than one that saved there already.

Beside the checkpoints, the file ``chief_term`` holds the highest chief term
(``distrib.runtime.chief.lease``) whose chief saved into the folder. Before
each save, the chief checks it under an exclusive lock on the folder (one
chief's check-and-write never interleaves with another's) and raises it to
its own term; a lower term is refused with ``FencedError`` (an
``AbortedError``), so a chief that was paused and woke up after another was
elected cannot write a checkpoint over the newer chief's, even if its own
clock has not told it yet. A folder without the file (a cluster without
elections) accepts any term.
"""
from __future__ import annotations

import fcntl
import os

from distrib.errors import FencedError

__all__ = ["FENCE_FILE", "fence_directory", "directory_term"]

FENCE_FILE = "chief_term"


def directory_term(directory: str) -> int:
    """The highest chief term that saved into ``directory`` (0: none)."""
    try:
        with open(os.path.join(directory, FENCE_FILE)) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def fence_directory(directory: str, term: int) -> None:
    """Let a chief of ``term`` save into ``directory``, or raise FencedError
    when a newer chief has saved there."""
    os.makedirs(directory, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)   # released when fd closes
        seen = directory_term(directory)
        if term < seen:
            raise FencedError(
                f"checkpoint fenced off: {directory} holds checkpoints of chief term {seen}, "
                f"newer than this chief's term {term}: a newer chief was elected, so this "
                "task is no longer chief and must not save")
        if term > seen:
            path = os.path.join(directory, FENCE_FILE)
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(f"{term}\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            os.fsync(fd)
    finally:
        os.close(fd)
