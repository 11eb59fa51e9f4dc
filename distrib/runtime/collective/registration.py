"""Waiting for tasks that have not started yet: the registration bound.

TF's workers are started by hand, in any order (its tutorials start each in
its own terminal), and its coordination service waits for every task to
register (``cluster_register_timeout``). A group here meets that in two
places: the group leader reaching a named member that has not joined
(collective.group), and a member reaching the group leader before its first
join (collective.engine). In both, "cannot connect" (within
``DISTRIB_CONNECT_TIMEOUT_S``) means not yet started while the task has
never been reached: the waiter tries again with backoff, says now and then
(``SAY_EVERY_S``) whom it waits for, and fails naming the task and this
bound only once ``DISTRIB_REGISTER_TIMEOUT_S`` (default 10 minutes) has
passed. A task that was reached and is then lost is not starting: that is
the failure detector's business, and fails within the heartbeat bound.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from distrib.errors import DeadlineExceededError, UnavailableError
from distrib.settings import REGISTER_TIMEOUT_S

# the engine's logger: every collective's waits under one name
logger = logging.getLogger("distrib.runtime.collective.engine")

__all__ = ["register_timeout_s", "retry_delay", "not_started", "Sayer", "registration_error",
           "reach_until_registered", "SAY_EVERY_S"]

SAY_EVERY_S = 30.0   # how often a waiter says which unstarted task it waits for
_FIRST_S, _MAX_S = 0.5, 5.0   # the wait before the first retry, and the longest


def register_timeout_s() -> float:
    """``DISTRIB_REGISTER_TIMEOUT_S``: how long a task never reached may take to start."""
    return REGISTER_TIMEOUT_S.get()


def retry_delay(tries: int, left: float) -> float:
    """The wait before probe ``tries + 1`` of a task not reached, within ``left`` seconds."""
    return max(0.0, min(_FIRST_S * 2 ** min(tries, 8), _MAX_S, left))


def not_started(err: BaseException) -> bool:
    """Whether a probe's error may mean "not started yet" (worth another try);
    anything else (a refused credential, a bad address) fails at once."""
    return isinstance(err, (UnavailableError, DeadlineExceededError))


class Sayer:
    """Logs "waiting for T" at most once per ``SAY_EVERY_S`` per task."""

    def __init__(self) -> None:
        self._said: dict[str, float] = {}

    def __call__(self, now: float, task: str, what: str, waited: float, err: object) -> None:
        last = self._said.get(task)
        if last is not None and now - last < SAY_EVERY_S:
            return
        if len(self._said) > 1024:
            self._said.clear()
        self._said[task] = now
        logger.warning("%s waits for %s to start: not reachable for %.0fs (%s); it fails after "
                       "DISTRIB_REGISTER_TIMEOUT_S=%gs unless every task of the cluster runs",
                       what, task, waited, err, register_timeout_s())


def registration_error(what: str, task: str, waited: float, err: object, joined: str,
                       me: str) -> UnavailableError:
    """The error of a task never reached within the registration bound."""
    return UnavailableError(
        f"{what}: {task} never answered in {waited:.0f}s (DISTRIB_REGISTER_TIMEOUT_S="
        f"{register_timeout_s():g}s; last: {err}); it never started, or stopped before "
        f"anyone reached it{joined}: start every task of the cluster (TF_CONFIG's chief and "
        "workers), or raise DISTRIB_REGISTER_TIMEOUT_S for tasks that start later",
        task=me, peer=task)


async def reach_until_registered(ping: Callable[[], Awaitable[Any]], task: str, what: str,
                                 me: str, say: Sayer,
                                 gone: Callable[[], BaseException | None] = lambda: None) -> None:
    """``ping()`` until it answers; retried while ``task`` has not started,
    within the registration bound (see the module header). ``gone()``, asked
    before each retry, ends the wait with its error (the task was reached
    and then lost: not starting; or the caller's own system stopped)."""
    loop = asyncio.get_running_loop()
    start, tries = loop.time(), 0
    while True:
        try:
            await ping()
            return
        except Exception as e:
            if not not_started(e):
                raise
            stop = gone()
            if stop is not None:
                raise stop from e
            now = loop.time()
            left = register_timeout_s() - (now - start)
            if left <= 0:
                raise registration_error(what, task, now - start, e, "", me) from None
            say(now, task, what, now - start, e)
            await asyncio.sleep(retry_delay(tries, left))
            tries += 1
