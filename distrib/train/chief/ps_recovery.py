"""Riding through a ps restart: the chief restores the restarted ps, every
worker's managed session waits and retries.

A ps that restarts (the launcher, Kubernetes or SLURM brought its process
back) comes back empty: a new incarnation with no variables. The chief
watches the ps tasks' incarnations every heartbeat (``PsRecovery.watch``);
on a change it announces its fencing term to the new process and restores
the variables placed there, and only those (slots and the global step
included; the live ones on the other ps tasks are newer than any
checkpoint), from the newest checkpoint that reads back intact, or runs
their initializers where there is none. The progress lost is what that ps
learnt since the checkpoint: at most one checkpoint interval.

Meanwhile the workers' steps fail: ``UnavailableError`` (the ps was down),
``AbortedError`` (it restarted during the step) or
``UninitializedVariableError`` (a ``FailedPreconditionError``: its variables
are not restored yet). ``RecoveringSession``, the session a
``Supervisor.managed_session`` hands out, catches these, lets the chief
recover when it is the chief, waits until the model is ready again and
retries the step, as TF's MonitoredTrainingSession does; it gives up with
the last error after ``max_wait_secs``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from distrib.errors import (
    AbortedError,
    DataLossError,
    FailedPreconditionError,
    FencedError,
    OpError,
    UnavailableError,
    UninitializedVariableError,
)
from distrib.train.checkpoints import state_file
from distrib.train.checkpoints.readiness import ReadyCheck, run_fetches
from distrib.train.chief.role import ChiefRole

logger = logging.getLogger(__name__)

__all__ = ["PsRecovery", "RecoveringSession", "recoverable"]


def recoverable(e: BaseException) -> bool:
    """Whether a failed step may succeed once the cluster has recovered."""
    if isinstance(e, FencedError):
        return False   # a fenced chief-only write is final
    return isinstance(e, (AbortedError, UnavailableError, UninitializedVariableError))


class PsRecovery:
    """The chief's watch over the ps tasks' incarnations, and their restore."""

    def __init__(self, role: ChiefRole, saver: Any, logdir: str | None,
                 ready: ReadyCheck, every: float) -> None:
        self.role = role
        self.saver = saver
        self.logdir = logdir
        self.ready = ready
        self.every = every
        self.known: dict[str, int | None] = {}
        self._lock = asyncio.Lock()

    async def remember(self) -> None:
        """The ps tasks as they are now (their variables are live)."""
        self.known = await self.role.ps_incarnations()

    async def recover(self, sess: Any) -> list[str]:
        """Restore every ps task that restarted since last seen; the tasks restored."""
        if not self.role.is_chief or not self.role.ps:
            return []
        async with self._lock:   # the watch and a failed step may both ask
            now = await self.role.ps_incarnations()
            restarted = [t for t, inc in now.items() if inc is not None
                         and self.known.get(t) is not None and inc != self.known[t]]
            for task in restarted:
                logger.warning("%s restarted (incarnation %s -> %s): restoring its variables",
                               task, self.known[task], now[task])
                await self.role.fence(task)
                await self._restore(sess, task)
                self.known[task] = now[task]
            for t, inc in now.items():   # first sight of a task that was down before
                if self.known.get(t) is None and inc is not None:
                    self.known[t] = inc
            return restarted

    async def _restore(self, sess: Any, task: str) -> None:
        options = self.role.run_options()
        if self.saver is not None:
            for path in state_file.checkpoint_candidates(self.logdir):
                try:
                    await self.saver.restore(sess, path, options=options, only_task=task)
                except DataLossError as e:
                    logger.warning("checkpoint %s is unusable (%s); trying an older one", path, e)
                    continue
                logger.info("restored %s from %s", task, path)
                return
        inits = [v.initializer for v in (self.saver.variables_on(task).values()
                                         if self.saver is not None else ())]
        if inits:
            await run_fetches(sess, inits, options=options)
            logger.info("no checkpoint to restore %s from: initialized its variables", task)

    async def watch(self, sess: Any, stopped: Callable[[], bool]) -> None:
        """Every heartbeat while chief: recover restarted ps tasks."""
        while not stopped() and self.role.is_chief:
            try:
                await self.recover(sess)
            except OpError as e:   # the ps may be down still: next heartbeat
                logger.info("ps recovery will retry: %s", e)
            await asyncio.sleep(self.every)


class RecoveringSession:
    """A Session whose ``run`` rides through a cluster's recovery (see the
    module header); everything else is the session's own."""

    def __init__(self, sess: Any, recover: Callable[[Any], Awaitable[bool]],
                 max_wait_secs: float) -> None:
        self._sess = sess
        self._recover = recover
        self._max_wait_secs = max_wait_secs

    async def run(self, fetches: Any, feed_dict: dict | None = None,
                  options: dict | None = None) -> Any:
        deadline = None
        ready_retry = False   # one retry of an uninitialized variable in a ready model
        while True:
            try:
                return await self._sess.run(fetches, feed_dict=feed_dict, options=options)
            except OpError as e:
                if not recoverable(e):
                    raise
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + self._max_wait_secs
                if now >= deadline:
                    raise
                logger.warning("step failed (%s: %s); waiting for the cluster to recover",
                               type(e).__name__, e.message)
                recovering = await self._recover(self._sess)
                if isinstance(e, FailedPreconditionError) and not recovering:
                    # the model is ready: restored meanwhile (retry once), or this
                    # variable is outside it and nothing will ever initialize it
                    if ready_retry:
                        raise
                    ready_retry = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)

    async def __aenter__(self) -> RecoveringSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._sess.close()
