"""``MonitoredSession`` and ``MonitoredTrainingSession``: a session that runs hooks and recovers.

TF1's ``tf.train.MonitoredTrainingSession``, async::

    hooks = [dt.train.StopAtStepHook(last_step=1000)]
    async with dt.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief,
                                                 checkpoint_dir="logs", hooks=hooks) as sess:
        while not sess.should_stop():
            await sess.run(train_op)

What it does, in order (TF's):

* **open** (``async with``, or ``sess = await MonitoredSession(...)``): each
  hook's ``begin()``, with the session's graph as the default graph; then a
  session from the creator: the chief restores the newest good checkpoint or
  initializes, a worker waits until the model is ready (see
  :mod:`distrib.train.sessions.session_manager`); then queue runners of the graph's
  ``QUEUE_RUNNERS`` collection start, and each hook's
  ``after_create_session(session, coord)`` runs.
* **run**: each hook's ``before_run``; ONE ``sess.run`` of the caller's
  fetches and feeds merged with the hooks' (a tensor fed twice is an error);
  each hook's ``after_run`` with its own results; the caller's results back.
* **recovery**: an ``AbortedError`` or ``UnavailableError`` from a step (a
  ps or worker failed or restarted; also a background task's, such as the
  chief's queue runner) closes the session and creates a new one (the chief
  restores from the newest checkpoint, a worker waits for readiness again),
  then runs the step again, with a warning naming the error. After
  ``MAX_CONSECUTIVE_RECOVERIES`` failed attempts in a row, or when
  ``max_wait_secs`` have passed since the first, the error is raised.
  Creating a session retries those errors too, within the same bound. A
  step of a closed session (``SessionClosedError``, TF's ``CancelledError``)
  is not retried, unless the session closed under it was this one's own
  recovery of another step's failure: then it runs again on the new one.
* **close** (leaving the block): each hook's ``end(session)`` (the
  ``CheckpointSaverHook`` writes its final checkpoint), then the background
  tasks stop (``stop_grace_period_secs``) and the session closes. Leaving by
  an exception skips ``end``; ``OutOfRangeError`` (input exhausted) counts as
  a normal end and is not re-raised, as in TF. A local server made for
  ``master=""`` is stopped, and the graph is unfinalized if it was not
  finalized before.

Not here: ``run_step_fn`` and ``StepContext``, ``SingularMonitoredSession``.

``MonitoredTrainingSession``'s ``is_chief`` names the preferred chief: in a
training cluster the role is elected and moves with failures, and each new
session starts from the newest state (live variables are never overwritten
by a checkpoint); see :mod:`distrib.train.sessions.elected_session`.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Sequence
from typing import Any, Generator

from distrib.client.fetches import feed_name
from distrib.client.run_metadata import TRACE_OPTION, RunMetadata, run_options_dict
from distrib.client.session import ConfigProto, Session
from distrib.errors import AbortedError, OpError, OutOfRangeError, SessionClosedError, UnavailableError
from distrib.framework.graph import GraphKeys, get_default_graph
from distrib.train.checkpoints.readiness import close_quietly
from distrib.train.chief.ps_recovery import recoverable
from distrib.train.sessions.coordinator import Coordinator
from distrib.train.sessions.elected_session import ChiefOnlyHook, ElectedSessionCreator
from distrib.train.sessions.session_manager import ChiefSessionCreator, Scaffold, SessionCreator
from distrib.train.sessions.session_run_hooks import (
    CheckpointSaverHook,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StepCounterHook,
    call_hook,
)
from distrib.train.sessions.summary_hooks import SummarySaverHook

logger = logging.getLogger(__name__)

__all__ = ["MonitoredSession", "MonitoredTrainingSession", "USE_DEFAULT",
           "MAX_CONSECUTIVE_RECOVERIES"]

# the errors a monitored session recovers from (TF's _PREEMPTION_ERRORS)
_PREEMPTION_ERRORS = (AbortedError, UnavailableError)
USE_DEFAULT: Any = object()
MAX_CONSECUTIVE_RECOVERIES = 10
_FIRST_RETRY_S = 0.1     # retries of a failed session creation back off to:
_MAX_RETRY_S = 5.0


def _feed_key(key: Any, graph: Any) -> Any:
    try:
        return feed_name(key, graph)
    except Exception:  # the run itself reports a bad key
        return key


def _merge_options(into: dict[str, Any], extra: dict[str, Any]) -> None:
    """Run options of a hook merged into the step's: numbers take the larger, flags OR."""
    for key, value in extra.items():
        if key not in into or into[key] is None:
            into[key] = value
        elif isinstance(value, bool) or isinstance(into[key], bool):
            into[key] = bool(into[key]) or bool(value)
        elif isinstance(value, (int, float)) and isinstance(into[key], (int, float)):
            into[key] = max(into[key], value)


class _HookedSession:
    """One created session: the raw session, its coordinator, and the hooks around its steps."""

    def __init__(self, session: Session, coord: Coordinator, hooks: list[SessionRunHook]) -> None:
        self.session = session
        self.coord = coord
        self.hooks = hooks
        self.stop_requested = False

    async def run(self, fetches: Any, feed_dict: dict | None, options: dict | None,
                  run_metadata: Any) -> Any:
        if self.stop_requested:
            raise RuntimeError("Run called even after should_stop requested.")
        # a background task's error (the chief's queue runner, say) fails the step
        # here: a preemption error is then recovered like the step's own
        self.coord.raise_requested_exception()
        context = SessionRunContext(SessionRunArgs(fetches, feed_dict, options), self.session)
        step_options = dict(run_options_dict(options) or {})
        requests, hook_feeds = await self._before_run(context, step_options)
        feeds = self._merge_feeds(feed_dict, hook_feeds)
        merged = [fetches, [fetch for _, fetch in requests]]
        if run_metadata is None and step_options.get(TRACE_OPTION):
            run_metadata = RunMetadata()   # a hook asked for the trace (TF's ProfilerHook)
        outputs = await self.session.run(merged, feed_dict=feeds or None,
                                         options=step_options or None,
                                         run_metadata=run_metadata)
        results = {i: value for (i, _), value in zip(requests, outputs[1])}
        for i, hook in enumerate(self.hooks):
            values = SessionRunValues(results.get(i), step_options or None, run_metadata)
            await call_hook(hook.after_run, context, values)
        self.stop_requested = self.stop_requested or context.stop_requested
        return outputs[0]

    async def _before_run(self, context: SessionRunContext,
                          step_options: dict[str, Any]
                          ) -> tuple[list[tuple[int, Any]], dict[Any, Any]]:
        """Each hook's request: (hook index, fetches) for those that fetch, and their feeds."""
        graph = self.session.graph
        requests: list[tuple[int, Any]] = []
        hook_feeds: dict[Any, Any] = {}
        hook_keys: set[Any] = set()
        for i, hook in enumerate(self.hooks):
            request = await call_hook(hook.before_run, context)
            if request is None:
                continue
            if request.fetches is not None:
                requests.append((i, request.fetches))
            if request.feed_dict:
                keys = {_feed_key(k, graph) for k in request.feed_dict}
                if keys & hook_keys:
                    raise RuntimeError(f"Same tensor is fed by two hooks. Conflict(s): "
                                       f"{sorted(map(str, keys & hook_keys))}")
                hook_keys |= keys
                hook_feeds.update(request.feed_dict)
            if request.options:
                _merge_options(step_options, dict(run_options_dict(request.options) or {}))
        return requests, hook_feeds

    def _merge_feeds(self, user: dict | None, hooks: dict[Any, Any]) -> dict[Any, Any] | None:
        if not hooks:
            return user
        if not user:
            return hooks
        graph = self.session.graph
        clash = {_feed_key(k, graph) for k in user} & {_feed_key(k, graph) for k in hooks}
        if clash:
            raise RuntimeError("Same tensor is fed by a SessionRunHook and user. Conflict(s): "
                               f"{sorted(map(str, clash))}")
        return {**hooks, **user}


class MonitoredSession:
    """``MonitoredSession(session_creator=None, hooks=None, stop_grace_period_secs=120)``:
    a session that initializes or restores, runs hooks and recovers (see the module header).

    ``max_wait_secs`` bounds each recovery (and the first session's creation);
    ``should_recover=False`` raises the preemption errors instead.
    """

    def __init__(self, session_creator: SessionCreator | None = None,
                 hooks: Sequence[SessionRunHook] | None = None,
                 stop_grace_period_secs: float = 120, *, max_wait_secs: float = 7200,
                 should_recover: bool = True) -> None:
        self._creator = session_creator or ChiefSessionCreator()
        self._graph = getattr(self._creator, "graph", None) or get_default_graph()
        self._hooks = list(hooks or [])
        self._grace = stop_grace_period_secs
        self._max_wait_secs = max_wait_secs
        self._should_recover = should_recover
        self._inner: _HookedSession | None = None
        self._state = "new"
        self._lock: asyncio.Lock | None = None
        self._graph_was_finalized = self._graph.finalized

    graph = property(lambda self: self._graph)

    @property
    def is_chief(self) -> bool | None:
        """Whether this task is chief now (None: the session's creator does not say)."""
        role = getattr(self._creator, "role", None)
        return role.is_chief if role is not None else None

    # -- opening ----------------------------------------------------------------------
    async def __aenter__(self) -> MonitoredSession:
        await self._open()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        clean = exc_type is None or issubclass(exc_type, (OutOfRangeError, StopIteration))
        if exc_type is not None and clean:
            logger.info("stopping: %s", exc)
        await self._close_internal(None if clean else exc)
        return exc_type is not None and clean

    def __await__(self) -> Generator[Any, None, MonitoredSession]:
        return self.__aenter__().__await__()

    async def _open(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"this MonitoredSession is {self._state}: open a new one")
        self._state = "opening"
        self._lock = asyncio.Lock()
        self._graph_was_finalized = self._graph.finalized
        try:
            for hook in self._hooks:
                with self._graph.as_default():   # hooks build their ops in begin()
                    result = hook.begin()
                if inspect.isawaitable(result):
                    await result
            self._inner = await self._create(time.monotonic() + self._max_wait_secs)
        except BaseException:
            self._state = "closed"
            await self._release()
            raise
        self._state = "open"

    async def _create(self, deadline: float) -> _HookedSession:
        """A new session; preemption errors are retried (with backoff) until ``deadline``."""
        delay = _FIRST_RETRY_S
        while True:
            try:
                return await self._create_once()
            except _PREEMPTION_ERRORS as exc:
                left = deadline - time.monotonic()
                if not self._should_recover or left <= 0:
                    raise
                logger.warning("creating a session failed with %s: %s (a ps or worker may be "
                               "(re)starting); trying again in %.1fs", type(exc).__name__,
                               exc, min(delay, left))
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, _MAX_RETRY_S)

    async def _create_once(self) -> _HookedSession:
        sess = await self._creator.create_session()
        coord = Coordinator(clean_stop_exception_types=())
        inner = _HookedSession(sess, coord, self._hooks)
        try:
            for runner in self._graph.get_collection(GraphKeys.QUEUE_RUNNERS):
                if hasattr(runner, "start"):
                    coord.register_thread(runner.start(sess, coord.should_stop))
            for hook in self._hooks:
                await call_hook(hook.after_create_session, sess, coord)
        except BaseException:
            await self._shutdown(inner, raise_errors=False)
            raise
        return inner

    # -- running ----------------------------------------------------------------------
    async def run(self, fetches: Any, feed_dict: dict | None = None,
                  options: dict | None = None, run_metadata: Any = None) -> Any:
        """One step with the hooks; recovers from preemption errors (see the module header)."""
        if self._state != "open":
            raise RuntimeError("this MonitoredSession is not open: use `async with` "
                               f"(it is {self._state})")
        failures, deadline = 0, None
        while True:
            inner = self._inner
            if inner is None:
                if deadline is None:
                    deadline = time.monotonic() + self._max_wait_secs
                inner = await self._recreate(deadline)
            try:
                return await inner.run(fetches, feed_dict, options, run_metadata)
            except OpError as exc:
                if isinstance(exc, SessionClosedError) and self._state == "open" \
                        and self._inner is not inner:
                    continue   # another step's recovery closed this one's session: run again
                # preempted (a task failed or restarted), or a restarted ps's variables
                # not restored yet: a new session waits for (or does) the restore
                if not self._should_recover or not recoverable(exc):
                    raise
                failures += 1
                if deadline is None:
                    deadline = time.monotonic() + self._max_wait_secs
                if failures > MAX_CONSECUTIVE_RECOVERIES or time.monotonic() >= deadline:
                    logger.error("giving up after %d failed attempts in a row: %s: %s",
                                 failures, type(exc).__name__, exc)
                    raise
                logger.warning("%s in a step: %s. A ps or worker may have failed or "
                               "restarted: closing the session and creating a new one "
                               "(recovery %d of at most %d)", type(exc).__name__, exc,
                               failures, MAX_CONSECUTIVE_RECOVERIES)
                await self._drop(inner)

    async def _recreate(self, deadline: float) -> _HookedSession:
        assert self._lock is not None
        async with self._lock:
            if self._state != "open":
                raise RuntimeError("this MonitoredSession was closed")
            if self._inner is None:
                self._inner = await self._create(deadline)
            return self._inner

    async def _drop(self, inner: _HookedSession) -> None:
        if self._inner is not inner:
            return   # another step already dropped it
        self._inner = None
        await self._shutdown(inner, raise_errors=False)

    def should_stop(self) -> bool:
        """True once a hook or the coordinator asked to stop, or the session is closed."""
        if self._state != "open":
            return True
        inner = self._inner
        if inner is None:
            return False   # the next run creates a new session
        if inner.stop_requested:
            return True
        exc = inner.coord.requested_exception
        if exc is not None:
            # a preemption error is recovered by the next run; any other ends training
            return not (self._should_recover and isinstance(exc, _PREEMPTION_ERRORS))
        return inner.coord.should_stop()

    # -- closing ----------------------------------------------------------------------
    async def close(self) -> None:
        """Run the hooks' ``end``, stop the background tasks, close the session."""
        await self._close_internal(None)

    async def _close_internal(self, error: BaseException | None) -> None:
        if self._state in ("closed", "new"):
            self._state = "closed"
            return
        inner, self._inner = self._inner, None
        try:
            if error is None:
                if inner is not None:
                    for hook in self._hooks:
                        await call_hook(hook.end, inner.session)
                else:
                    logger.warning("no live session at close: the hooks' end() is skipped")
        finally:
            self._state = "closed"
            try:
                if inner is not None:
                    await self._shutdown(inner, raise_errors=error is None)
            finally:
                await self._release()

    async def _shutdown(self, inner: _HookedSession, raise_errors: bool) -> None:
        """Stop the session's background tasks (within the grace period) and close it."""
        inner.coord.request_stop()
        failure: BaseException | None = None
        try:
            await inner.coord.join(stop_grace_period_secs=self._grace, ignore_live_threads=True)
        except Exception as exc:
            failure = exc
        finally:
            await close_quietly(inner.session)
        if failure is None:
            return
        if raise_errors and not isinstance(failure, _PREEMPTION_ERRORS):
            raise failure
        logger.warning("a background task of the closed session had failed: %s: %s",
                       type(failure).__name__, failure)

    async def _release(self) -> None:
        try:
            await self._creator.close()
        except Exception as exc:
            logger.warning("stopping the local server failed: %s", exc)
        if not self._graph_was_finalized and self._graph.finalized:
            self._graph._unsafe_unfinalize()  # noqa: SLF001 - TF's own name for it


def MonitoredTrainingSession(master: str = "", is_chief: bool = True,  # noqa: N802 (TF's name)
                             checkpoint_dir: str | None = None, scaffold: Scaffold | None = None,
                             hooks: Sequence[SessionRunHook] | None = None,
                             chief_only_hooks: Sequence[SessionRunHook] | None = None,
                             save_checkpoint_secs: Any = USE_DEFAULT,
                             save_summaries_steps: Any = USE_DEFAULT,
                             save_summaries_secs: Any = USE_DEFAULT,
                             config: ConfigProto | None = None,
                             stop_grace_period_secs: float = 120,
                             log_step_count_steps: int | None = 100,
                             max_wait_secs: float = 7200,
                             save_checkpoint_steps: Any = USE_DEFAULT,
                             summary_dir: str | None = None) -> MonitoredSession:
    """A :class:`MonitoredSession` for training (TF's arguments and defaults).

    The chief restores from ``checkpoint_dir`` or initializes, and gets a
    ``StepCounterHook`` (every ``log_step_count_steps``) and a
    ``CheckpointSaverHook`` (every ``save_checkpoint_secs``, default 600, or
    ``save_checkpoint_steps``; both given: the seconds) when there is a
    ``checkpoint_dir``, plus ``chief_only_hooks``. A non-chief waits for the
    chief (at most ``max_wait_secs``) and runs ``hooks`` only. ``master=""``
    runs on a local in-process server. With a ``summary_dir`` (default
    ``checkpoint_dir``) the chief also gets a ``SummarySaverHook`` (every
    ``save_summaries_steps``, default 100, or ``save_summaries_secs``) and
    its ``StepCounterHook`` writes ``global_step/sec`` there (both
    ``save_summaries_steps`` and ``save_summaries_secs`` given: TF's ``ValueError``).
    """
    if save_checkpoint_steps is USE_DEFAULT and save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_steps, save_checkpoint_secs = None, 600
    elif save_checkpoint_secs is USE_DEFAULT:
        save_checkpoint_secs = None
    elif save_checkpoint_steps is USE_DEFAULT:
        save_checkpoint_steps = None
    scaffold = scaffold or Scaffold()
    # is_chief names the preferred chief: in a training cluster the role is
    # elected and moves (train/sessions/elected_session.py), else it is fixed, as in TF
    creator = ElectedSessionCreator(scaffold=scaffold, master=master, config=config,
                                    checkpoint_dir=checkpoint_dir, is_chief=is_chief,
                                    max_wait_secs=max_wait_secs)
    chief_hooks: list[SessionRunHook] = list(chief_only_hooks or [])
    summary_dir = summary_dir or checkpoint_dir
    if summary_dir and log_step_count_steps and log_step_count_steps > 0:
        chief_hooks.append(StepCounterHook(output_dir=summary_dir,
                                           every_n_steps=log_step_count_steps))
    chief_hooks.extend(_summary_hooks(summary_dir, scaffold, save_summaries_steps, save_summaries_secs))
    secs = save_checkpoint_secs if save_checkpoint_secs and save_checkpoint_secs > 0 else None
    steps = save_checkpoint_steps if save_checkpoint_steps and save_checkpoint_steps > 0 else None
    if checkpoint_dir and (secs or steps):
        chief_hooks.append(CheckpointSaverHook(checkpoint_dir, save_secs=secs,
                                               save_steps=None if secs else steps,
                                               scaffold=scaffold))
    user_hooks = list(hooks or [])
    for hook in user_hooks:
        if hasattr(hook, "chief_role"):   # a hook whose chief's part follows the role
            hook.chief_role = creator.role
    all_hooks: list[SessionRunHook] = [ChiefOnlyHook(h, creator.role, checkpoint_dir)
                                       for h in chief_hooks]
    return MonitoredSession(creator, hooks=all_hooks + user_hooks,
                            stop_grace_period_secs=stop_grace_period_secs,
                            max_wait_secs=max_wait_secs)


def _summary_hooks(summary_dir: str | None, scaffold: Scaffold, steps: Any, secs: Any) -> list:
    """TF's: a SummarySaverHook every ``steps`` (default 100) or ``secs``; none
    when neither is positive; both given (not None): the hook's ValueError, as TF's."""
    if steps is USE_DEFAULT and secs is USE_DEFAULT:
        steps, secs = 100, None
    steps = None if steps is USE_DEFAULT else steps
    secs = None if secs is USE_DEFAULT else secs
    if not summary_dir or not ((steps and steps > 0) or (secs and secs > 0)):
        return []
    return [SummarySaverHook(save_steps=steps, save_secs=secs, output_dir=summary_dir,
                             scaffold=scaffold)]
