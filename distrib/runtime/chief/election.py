"""Chief election, a candidate's side: campaign every heartbeat, and know
at any moment whether this task is the chief.

Each worker's Supervisor runs one ``ChiefElection``. It asks the arbiter's
``chief_lease`` actor (see ``distrib.runtime.chief.lease``) for the role
every heartbeat: the chief renews its lease that way, the others learn who
holds it and take it when the arbiter names them successor. On winning a
term, before it counts as chief, the candidate announces the term to every
ps task (``WorkerService.fence``): from then on the ps tasks refuse the
chief-only writes of any older chief, and if one of them has already seen a
newer term, this candidate is stale and does not become chief.

``is_chief`` is live: it is true only while the lease last granted has not
run out by this process's own clock, counted from when the request was
sent. A chief that was paused (SIGSTOP, a frozen VM) past its lease wakes up
as a non-chief before it can do anything, and learns the new holder on its
next campaign. ``on_change(is_chief, term)`` is called on every change of
role; the log says ``became chief (term N)``.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Awaitable, Callable

from distrib.errors import AbortedError, OpError
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.doors import Campaign, ChiefLeaseDoor, FenceDoor

logger = logging.getLogger(__name__)

__all__ = ["ChiefElection"]

OnChange = Callable[[bool, int], Awaitable[None] | None]


class ChiefElection:
    """One candidate's campaign for the chief role of a cluster."""

    def __init__(self, system: ActorSystem, task: str, arbiter: str,
                 ps_addresses: dict[str, str], preferred: bool,
                 on_change: OnChange | None = None, every: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.system = system
        self.task = task
        self.arbiter = ChiefLeaseDoor.at(system, arbiter)
        self.ps = {t: FenceDoor.at(system, a) for t, a in ps_addresses.items()}
        self.preferred = preferred
        self.on_change = on_change
        self.every = every if every is not None else (heartbeat_s() or 1.0)
        self._clock = clock
        self.term = 0
        self.holder: str | None = None
        self._chief = False
        self._valid_until = 0.0
        self._task: asyncio.Task | None = None
        self._changed = asyncio.Event()

    @property
    def is_chief(self) -> bool:
        return self._chief and self._clock() < self._valid_until

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """End the campaign; a chief resigns, so a successor takes over at once."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._chief:
            try:
                await self.arbiter.resign(self.task, self.system.incarnation,
                                          timeout=self.every * 2)
            except OpError as e:
                logger.debug("%s: could not resign: %s", self.task, e)
            await self._set(False)

    async def wait_decided(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until the role is known: this task is
        chief or another task holds the lease. Returns ``is_chief``."""
        deadline = self._clock() + timeout
        while self.holder is None and self._clock() < deadline:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), max(0.0, deadline - self._clock()))
            except asyncio.TimeoutError:
                break
        return self.is_chief

    async def campaign_once(self) -> bool:
        """Ask the arbiter once; returns ``is_chief`` afterwards."""
        sent = self._clock()
        try:
            state = await self.arbiter.campaign(
                Campaign(candidate=self.task, incarnation=self.system.incarnation,
                         known_term=self.term, was_holder=self._chief,
                         preferred=self.preferred), timeout=self.every * 2)
        except OpError as e:   # the arbiter is down or slow: the lease runs out by our clock
            logger.debug("%s: campaign failed: %s", self.task, e)
            if self._chief and not self.is_chief:
                await self._step_down("its lease ran out while the arbiter was unreachable")
            return self.is_chief
        term, holder = int(state["term"]), state["holder"]
        if state["granted"]:
            if not self._chief or term != self.term:
                self.term = term   # first: a write racing the announcement carries it
                if not await self._fence(term):
                    return False
                self.holder = holder
                self._valid_until = sent + float(state["lease_s"])
                logger.info("%s: became chief (term %d)", self.task, term)
                await self._set(True)
            else:
                self._valid_until = sent + float(state["lease_s"])
        else:
            self.term, self.holder = max(self.term, term), holder
            if self._chief:
                await self._step_down(f"{holder} is chief (term {term})")
        self._changed.set()
        return self.is_chief

    # -- inside ----------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                await self.campaign_once()
            except Exception:   # a bug must not end the campaign silently
                logger.exception("%s: chief campaign failed", self.task)
            await asyncio.sleep(self.every)

    async def _fence(self, term: int) -> bool:
        """Announce ``term`` to every ps task; False if one has seen a newer one."""
        calls = [ps.fence(term, timeout=self.every * 3) for ps in self.ps.values()]
        for task, res in zip(self.ps, await asyncio.gather(*calls, return_exceptions=True)):
            if isinstance(res, AbortedError):
                logger.warning("%s: not chief in term %d: %s", self.task, term, res)
                return False
            if isinstance(res, BaseException):
                # a ps that is down cannot take a stale write either; it learns the
                # term from the chief's first fenced write after its restart
                logger.info("%s: could not fence %s (term %d): %s", self.task, task, term, res)
        return True

    async def _step_down(self, why: str) -> None:
        logger.warning("%s: no longer chief (term %d): %s", self.task, self.term, why)
        await self._set(False)

    async def _set(self, chief: bool) -> None:
        if chief == self._chief:
            return
        self._chief = chief
        if not chief:
            self._valid_until = 0.0
        self._changed.set()
        if self.on_change is not None:
            res = self.on_change(chief, self.term)
            if inspect.isawaitable(res):
                await res
