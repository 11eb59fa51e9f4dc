"""Fencing: a task refuses chief-only writes from a chief older than one it
has seen.

Every chief election starts a new term (``distrib.runtime.chief.lease``). A
chief's writes that only a chief may make (initializing or restoring
variables, the sync-replicas queue runner) carry its term in the run's
options (``fencing_term``), and a new chief announces its term to every ps
task before its first such write (``WorkerService.fence``). A task keeps the
highest term it has seen and refuses a lower one with ``FencedError`` (an
``AbortedError``): a chief that was only paused, and woke up after another
was elected, cannot write over the new chief's work even once, whatever its
own clock says. A write that carries no term (a worker's ordinary training
step) is never refused.
"""
from __future__ import annotations

from distrib.errors import FencedError, InvalidArgumentError

__all__ = ["Fence"]


class Fence:
    """The highest chief term one task has seen."""

    __slots__ = ("task", "term")

    def __init__(self, task: str) -> None:
        self.task = task
        self.term = 0

    def admit(self, term: int | None) -> int:
        """Let a write of chief term ``term`` through (None: not a chief-only
        write) and remember the term; FencedError when a newer chief's term
        was seen here already."""
        if term is None:
            return self.term
        if isinstance(term, bool) or not isinstance(term, int) or term < 0:
            raise InvalidArgumentError(f"a fencing term is an int >= 0, not {term!r}",
                                       task=self.task)
        if term < self.term:
            raise FencedError(
                f"write fenced off: it carries chief term {term}, but {self.task} has seen "
                f"term {self.term}: a newer chief was elected, so the writer is no longer "
                "chief", task=self.task)
        self.term = term
        return term
