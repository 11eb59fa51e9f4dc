"""Chief election, the arbiter's side: a lease with terms.

One task of a training cluster holds the lease of the chief role: the first
ps task, the one every worker already depends on (a cluster without a ps job
has nothing to elect: its chief is fixed, see ``distrib.train.chief.role``).
Its ``chief_lease`` actor (spawned on
every server, used only there) grants the role to one candidate at a time,
for ``lease_s`` (three heartbeats: the failure-detection bound), and the
chief renews it every heartbeat (``distrib.runtime.chief.election``). Every
grant to a new holder starts a new term, higher than any term this arbiter
or a candidate has seen, so terms never repeat even across an arbiter's
restart, and fencing (``runtime/chief/fencing.py``) can refuse older chiefs.

Who gets a vacant lease is decided here, not by who asks first:
- the first chief is the preferred one (``Supervisor(is_chief=True)``): the
  others wait for it, as TensorFlow's workers do; after a restart of the
  arbiter, the candidate that held the newest term gets it back during the
  first lease period;
- after that, when the holder stops renewing, the live candidate that has
  been with the cluster longest (its process first asked earliest: a
  restarted worker is a new process and rejoins as a non-chief), then the
  preferred one, then the lowest task index. The others are told who holds
  it.
Safety does not rest on timing alone: a chief believes in its role only until
its own clock says the lease it last renewed has run out (it counts from when
it *asked*, before the arbiter started counting), and its chief-only writes
carry its term, which the ps tasks fence.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from distrib.errors import InvalidArgumentError
from distrib.runtime.actors.failure_detector import MISSED_HEARTBEATS, heartbeat_s

logger = logging.getLogger(__name__)

__all__ = ["ChiefLease", "lease_seconds", "task_rank"]


def lease_seconds() -> float:
    """How long a granted lease lasts: three heartbeats (3 s by default; with
    failure detection off, still 3 s)."""
    every = heartbeat_s() or 1.0
    return MISSED_HEARTBEATS * every


def task_rank(task: str) -> tuple[str, int]:
    """("/job:worker/task:3") -> ("worker", 3), for ordering candidates."""
    parts = dict(p.split(":", 1) for p in task.strip("/").split("/") if ":" in p)
    return parts.get("job", ""), int(parts.get("task", 0))


class _Member:
    """A candidate as the arbiter knows it."""

    __slots__ = ("name", "incarnation", "preferred", "joined", "seen", "known_term",
                 "was_holder")

    def __init__(self, name: str, incarnation: int, joined: float) -> None:
        self.name = name
        self.incarnation = incarnation
        self.preferred = False
        self.joined = joined   # when this process first asked (seniority)
        self.seen = 0.0
        self.known_term = 0
        self.was_holder = False


class ChiefLease:
    """Actor "chief_lease" of every task (the arbiter's is the one asked)."""

    def __init__(self, task: str, lease_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.task = task
        self.lease_s = lease_s if lease_s is not None else lease_seconds()
        self._clock = clock
        self._started = clock()
        self.term = 0
        self.holder: tuple[str, int] | None = None
        self.expires = 0.0
        self._members: dict[tuple[str, int], _Member] = {}
        self.grants: list[tuple[int, str, int]] = []   # (term, holder, incarnation), newest last

    # -- messages ------------------------------------------------------------------
    def campaign(self, candidate: str, incarnation: int, known_term: int = 0,
                 was_holder: bool = False, preferred: bool = False) -> dict[str, Any]:
        """Ask for (or renew) the chief role. Returns the lease's state:
        ``granted`` (the caller holds it now, until ``lease_s`` from its
        request), ``term``, ``holder`` (a task name or None), ``lease_s``."""
        _check(candidate, incarnation, known_term)
        now = self._clock()
        me = self._member(candidate, int(incarnation), now)
        me.preferred, me.known_term = bool(preferred), int(known_term)
        me.was_holder = bool(was_holder) and int(known_term) >= self.term
        key = (me.name, me.incarnation)
        if self.holder is not None and now < self.expires:
            if self.holder == key:
                self.expires = now + self.lease_s
                return self._state(True)
            return self._state(False)
        if self._successor(now) is me:
            self._grant(me, now)
            return self._state(True)
        return self._state(False)

    def resign(self, candidate: str, incarnation: int) -> bool:
        """The holder gives the role up (a clean exit): the lease is vacant at once."""
        if self.holder == (candidate, incarnation):
            self.expires = 0.0
            self._members.pop((candidate, incarnation), None)   # not a successor either
            logger.info("%s: %s resigned as chief (term %d)", self.task, candidate, self.term)
            return True
        return False

    def status(self) -> dict[str, Any]:
        live = self._clock() < self.expires
        return {"term": self.term, "holder": self.holder[0] if self.holder and live else None,
                "grants": [list(g) for g in self.grants[-64:]]}

    # -- the rules -------------------------------------------------------------------
    def _member(self, name: str, incarnation: int, now: float) -> _Member:
        m = self._members.get((name, incarnation))
        if m is None:
            for key in [k for k in self._members if k[0] == name]:
                del self._members[key]          # an older incarnation of it is gone
            m = self._members[(name, incarnation)] = _Member(name, incarnation, now)
        m.seen = now
        return m

    def _successor(self, now: float) -> _Member | None:
        live = [m for m in self._members.values() if now - m.seen < self.lease_s]
        if not live:
            return None
        if not self.grants:
            # a candidate that knows a term means the cluster had a chief before
            # this arbiter (re)started: that chief gets it back during the first
            # lease period, anyone after. A cluster that never had a chief waits
            # for its preferred chief, as TensorFlow's workers wait for theirs.
            if any(m.known_term > 0 for m in live):
                if now - self._started < self.lease_s:
                    live = [m for m in live if m.was_holder]
            else:
                live = [m for m in live if m.preferred]
            if not live:
                return None
        return min(live, key=lambda m: (m.joined, not m.preferred, task_rank(m.name)))

    def _grant(self, m: _Member, now: float) -> None:
        seen = max([self.term] + [x.known_term for x in self._members.values()])
        self.term = seen + 1
        self.holder = (m.name, m.incarnation)
        self.expires = now + self.lease_s
        self.grants.append((self.term, m.name, m.incarnation))
        del self.grants[:-256]
        logger.info("%s: granted the chief role to %s (term %d)", self.task, m.name, self.term)

    def _state(self, granted: bool) -> dict[str, Any]:
        return {"granted": granted, "term": self.term,
                "holder": self.holder[0] if self.holder else None, "lease_s": self.lease_s}


def _check(candidate: Any, incarnation: Any, known_term: Any) -> None:
    if not isinstance(candidate, str) or not candidate.startswith("/job:"):
        raise InvalidArgumentError(f"a chief candidate is a task name like '/job:worker/task:0', "
                                   f"not {candidate!r}")
    for what, v in (("incarnation", incarnation), ("known_term", known_term)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidArgumentError(f"campaign: {what} must be an int >= 0, not {v!r}")
