"""Session run hooks: code that runs around each step of a ``MonitoredSession``.

TF1's ``tf.train.SessionRunHook`` family, async: a hook method may be a plain
function or a coroutine function (the monitored session awaits what it
returns). A hook that runs something itself between steps uses
``await run_context.session.run(...)`` (the raw :class:`Session`, no hooks).

The life of a hook (see :mod:`distrib.train.sessions.monitored_session`):

* ``begin()`` once, before the graph is finalized: build ops here (the
  monitored session makes the graph default around it; an ``async def
  begin`` runs after that, so build ops in a plain ``begin``);
* ``after_create_session(session, coord)`` each time a session is created,
  the first time and after every recovery;
* ``before_run(run_context)`` before each step: return
  ``SessionRunArgs(fetches, feed_dict, options)`` to add to the step. The
  fetches of every hook ride in the same ``sess.run`` as the caller's, so a
  hook costs no extra step;
* ``after_run(run_context, run_values)``: ``run_values.results`` holds the
  values of this hook's fetches; ``run_context.request_stop()`` ends training;
* ``end(session)`` when the monitored session closes without an error.

The hooks here: :class:`StopAtStepHook`, :class:`CheckpointSaverHook` (with
:class:`CheckpointSaverListener`), :class:`LoggingTensorHook`,
:class:`StepCounterHook`, and :class:`SecondOrStepTimer`, the "every N steps
or N seconds" rule they share. ``StepCounterHook`` writes ``global_step/sec``
to ``summary_writer`` or ``output_dir``'s writer; ``SummarySaverHook`` is in
``distrib.train.sessions.summary_hooks``.
"""
from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Callable, NamedTuple

import numpy as np

from distrib.framework.graph import GraphKeys, get_default_graph
from distrib.summary import FileWriterCache, proto
from distrib.train.optimizers.global_step import get_global_step

logger = logging.getLogger(__name__)

__all__ = [
    "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues",
    "SecondOrStepTimer", "StopAtStepHook", "CheckpointSaverListener", "CheckpointSaverHook",
    "LoggingTensorHook", "StepCounterHook", "call_hook", "global_step_or_fail", "as_int", "run_fetch",
]


async def call_hook(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a hook method, sync or async, and return its result."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _run(sess: Any, fetches: Any) -> Any:
    result = sess.run(fetches)
    return await result if inspect.isawaitable(result) else result


class SessionRunArgs(NamedTuple):
    """What a hook adds to a step: fetches (any nesting), feeds, and run options (a dict)."""

    fetches: Any
    feed_dict: dict | None = None
    options: dict | None = None


class SessionRunValues(NamedTuple):
    """What a hook gets back: the values of its own fetches (None if it asked for none)."""

    results: Any
    options: dict | None
    run_metadata: Any


class SessionRunContext:
    """The step being run: the caller's arguments, the raw session, and a stop request."""

    def __init__(self, original_args: SessionRunArgs, session: Any) -> None:
        self._original_args = original_args
        self._session = session
        self._stop_requested = False

    @property
    def original_args(self) -> SessionRunArgs:
        return self._original_args

    @property
    def session(self) -> Any:
        """The raw ``Session`` (``await session.run(...)`` runs without hooks)."""
        return self._session

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def request_stop(self) -> None:
        """Make the monitored session's ``should_stop()`` true after this step."""
        self._stop_requested = True


class SessionRunHook:
    """Base class: every method does nothing; override those you need (sync or async)."""

    def begin(self) -> None:
        pass

    def after_create_session(self, session: Any, coord: Any) -> None:
        pass

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        return None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        pass

    def end(self, session: Any) -> None:
        pass


# -- timers -----------------------------------------------------------------------------

class SecondOrStepTimer:
    """Triggers at most once every ``every_secs`` seconds or every ``every_steps`` steps."""

    def __init__(self, every_secs: float | None = None, every_steps: int | None = None) -> None:
        if every_secs is None and every_steps is None:
            raise ValueError("Either every_secs or every_steps should be provided.")
        if every_secs is not None and every_steps is not None:
            raise ValueError("Can not provide both every_secs and every_steps.")
        self._every_secs = every_secs
        self._every_steps = every_steps
        self.reset()

    def reset(self) -> None:
        self._last_step: int | None = None
        self._last_time: float | None = None

    def should_trigger_for_step(self, step: int) -> bool:
        """True on the first call, then once the interval has passed (never twice for a step)."""
        if self._last_step is None:
            return True
        if self._last_step == step:
            return False
        if self._every_secs is not None and self._last_time is not None \
                and time.monotonic() >= self._last_time + self._every_secs:
            return True
        return self._every_steps is not None and step >= self._last_step + self._every_steps

    def update_last_triggered_step(self, step: int) -> tuple[float | None, int | None]:
        """Record a trigger at ``step``; (seconds, steps) since the last one, (None, None) first."""
        now = time.monotonic()
        if self._last_time is None or self._last_step is None:
            elapsed: tuple[float | None, int | None] = (None, None)
        else:
            elapsed = (now - self._last_time, step - self._last_step)
        self._last_time, self._last_step = now, step
        return elapsed

    def last_triggered_step(self) -> int | None:
        return self._last_step


class _NeverTriggerTimer(SecondOrStepTimer):
    def __init__(self) -> None:
        self.reset()

    def should_trigger_for_step(self, step: int) -> bool:
        return False


def _global_step_or_fail(hook: str) -> Any:
    step = get_global_step()
    if step is None:
        raise RuntimeError(f"Global step should be created to use {hook} "
                           "(dt.train.get_or_create_global_step())")
    return step


async def _await_all(pending: list[Any]) -> None:
    for awaitable in pending:
        await awaitable


def _as_int(value: Any) -> int:
    """A fetched global step as an int (a scalar, or a step of shape [1])."""
    return int(np.asarray(value).reshape(-1)[0])


global_step_or_fail = _global_step_or_fail   # shared with distrib.train.sessions.summary_hooks
as_int = _as_int
run_fetch = _run


# -- StopAtStepHook -------------------------------------------------------------------

class StopAtStepHook(SessionRunHook):
    """Requests a stop once the global step reaches ``last_step`` (or ``num_steps`` more).

    As TF, ``num_steps`` counts from the global step of the first session
    created. Unlike TF, a session created when the global step already is at
    ``last_step`` or past it stops at once (through ``coord``) instead of
    running one step more.
    """

    def __init__(self, num_steps: int | None = None, last_step: int | None = None) -> None:
        if num_steps is None and last_step is None:
            raise ValueError("One of num_steps or last_step must be specified.")
        if num_steps is not None and last_step is not None:
            raise ValueError("Only one of num_steps or last_step can be specified.")
        self._num_steps = num_steps
        self._last_step = last_step
        self._global_step_tensor: Any = None

    @property
    def last_step(self) -> int | None:
        return self._last_step

    def begin(self) -> None:
        self._global_step_tensor = _global_step_or_fail("StopAtStepHook")

    async def after_create_session(self, session: Any, coord: Any) -> None:
        step = _as_int(await _run(session, self._global_step_tensor))
        if self._last_step is None:
            assert self._num_steps is not None
            self._last_step = step + self._num_steps
        elif step >= self._last_step and coord is not None:
            logger.info("global step %d is already at last_step=%d: stopping", step,
                        self._last_step)
            coord.request_stop()

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._global_step_tensor)

    async def after_run(self, run_context: SessionRunContext,
                        run_values: SessionRunValues) -> None:
        assert self._last_step is not None
        # the value read in the step may predate the step's own increment: read again
        if _as_int(run_values.results) + 1 >= self._last_step:
            step = _as_int(await _run(run_context.session, self._global_step_tensor))
            if step >= self._last_step:
                run_context.request_stop()


# -- CheckpointSaverHook ---------------------------------------------------------------

class CheckpointSaverListener:
    """Called around the saves of a :class:`CheckpointSaverHook` (methods sync or async);
    ``after_save`` returning True requests a stop."""

    def begin(self) -> None:
        pass

    def before_save(self, session: Any, global_step_value: int) -> None:
        pass

    def after_save(self, session: Any, global_step_value: int) -> bool | None:
        return None

    def end(self, session: Any, global_step_value: int) -> None:
        pass


class CheckpointSaverHook(SessionRunHook):
    """Saves a checkpoint every ``save_secs`` seconds or ``save_steps`` global steps.

    As TF: one save when a session is created (the state it starts from),
    then on schedule, and a last one in ``end`` unless the last step was
    just saved. The saver is ``saver``, else ``scaffold.saver``, else the one
    in the graph's ``SAVERS`` collection. Files are
    ``<checkpoint_dir>/<checkpoint_basename>-<global step>``.
    """

    def __init__(self, checkpoint_dir: str, save_secs: float | None = None,
                 save_steps: int | None = None, saver: Any = None,
                 checkpoint_basename: str = "model.ckpt", scaffold: Any = None,
                 listeners: Sequence[CheckpointSaverListener] | None = None) -> None:
        if saver is not None and scaffold is not None:
            raise ValueError("You cannot provide both saver and scaffold.")
        self._saver = saver
        self._scaffold = scaffold
        self._checkpoint_dir = os.fspath(checkpoint_dir)
        self._save_path = os.path.join(self._checkpoint_dir, checkpoint_basename)
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._listeners = list(listeners or [])
        self._steps_per_run = 1
        self._global_step_tensor: Any = None
        self._graph: Any = None

    @property
    def save_path(self) -> str:
        return self._save_path

    def add_listener(self, listener: CheckpointSaverListener, first: bool = False) -> None:
        """Call ``listener`` around each save too (``first``: before the others)."""
        self._listeners.insert(0 if first else len(self._listeners), listener)

    def begin(self) -> Any:
        self._graph = get_default_graph()
        self._global_step_tensor = _global_step_or_fail("CheckpointSaverHook")
        # a listener builds its ops here too; an async begin of one is awaited by the caller
        pending = [r for r in (listener.begin() for listener in self._listeners)
                   if inspect.isawaitable(r)]
        return _await_all(pending) if pending else None

    async def after_create_session(self, session: Any, coord: Any) -> None:
        step = _as_int(await _run(session, self._global_step_tensor))
        # the state this session starts from (TF writes graph files here too)
        await self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._global_step_tensor)

    async def after_run(self, run_context: SessionRunContext,
                        run_values: SessionRunValues) -> None:
        stale = _as_int(run_values.results)
        if not self._timer.should_trigger_for_step(stale + self._steps_per_run):
            return
        step = _as_int(await _run(run_context.session, self._global_step_tensor))
        if self._timer.should_trigger_for_step(step):
            self._timer.update_last_triggered_step(step)
            if await self._save(run_context.session, step):
                run_context.request_stop()

    async def end(self, session: Any) -> None:
        step = _as_int(await _run(session, self._global_step_tensor))
        if step != self._timer.last_triggered_step():
            await self._save(session, step)
        for listener in self._listeners:
            await call_hook(listener.end, session, step)

    async def _save(self, session: Any, step: int) -> bool:
        """Save at ``step``; True when a listener asks to stop."""
        for listener in self._listeners:
            await call_hook(listener.before_save, session, step)
        logger.info("Saving checkpoints for %d into %s.", step, self._save_path)
        await self._get_saver().save(session, self._save_path, global_step=step)
        should_stop = False
        for listener in self._listeners:
            if await call_hook(listener.after_save, session, step):
                logger.info("a checkpoint listener requested that training stop")
                should_stop = True
        return should_stop

    def _get_saver(self) -> Any:
        if self._saver is not None:
            return self._saver
        if self._scaffold is not None and self._scaffold.saver is not None:
            return self._scaffold.saver
        graph = self._graph if self._graph is not None else get_default_graph()
        savers = graph.get_collection(GraphKeys.SAVERS)
        if not savers:
            raise RuntimeError(f"No items in collection {GraphKeys.SAVERS}: add a saver to the "
                               "collection, or give the hook a saver or a scaffold")
        if len(savers) > 1:
            raise RuntimeError(f"More than one item in collection {GraphKeys.SAVERS}: give "
                               "the hook the saver to use")
        self._saver = savers[0]
        return self._saver


# -- LoggingTensorHook -----------------------------------------------------------------

class LoggingTensorHook(SessionRunHook):
    """Logs tensors (INFO) every ``every_n_iter`` local steps or ``every_n_secs``, and/or at the end.

    ``tensors`` is a dict ``{tag: tensor or name}`` (logged in sorted tag
    order) or a list of tensors or names (logged in that order, tagged by
    themselves). ``formatter(values_by_tag) -> str`` replaces the default
    ``"tag = value, ..."`` line. The values are fetched in the step itself.
    """

    def __init__(self, tensors: Mapping[str, Any] | Sequence[Any],
                 every_n_iter: int | None = None, every_n_secs: float | None = None,
                 at_end: bool = False, formatter: Callable[[dict], str] | None = None) -> None:
        only_at_end = at_end and every_n_iter is None and every_n_secs is None
        if not only_at_end and (every_n_iter is None) == (every_n_secs is None):
            raise ValueError("either at_end and/or exactly one of every_n_iter and "
                             "every_n_secs must be provided.")
        if every_n_iter is not None and every_n_iter <= 0:
            raise ValueError(f"invalid every_n_iter={every_n_iter}.")
        if isinstance(tensors, Mapping):
            self._tag_order = sorted(tensors.keys())
            self._tensors = dict(tensors)
        else:
            self._tag_order = list(tensors)
            self._tensors = {item: item for item in self._tag_order}
        self._formatter = formatter
        self._timer: SecondOrStepTimer = (
            _NeverTriggerTimer() if only_at_end
            else SecondOrStepTimer(every_secs=every_n_secs, every_steps=every_n_iter))
        self._log_at_end = at_end
        self._iter_count = 0
        self._should_trigger = False
        self._current: dict[Any, Any] = {}

    def begin(self) -> None:
        self._timer.reset()
        self._iter_count = 0
        graph = get_default_graph()
        self._current = {tag: graph.as_graph_element(t) if isinstance(t, str) else t
                         for tag, t in self._tensors.items()}

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        self._should_trigger = self._timer.should_trigger_for_step(self._iter_count)
        return SessionRunArgs(self._current) if self._should_trigger else None

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if self._should_trigger:
            self._log_tensors(run_values.results)
        self._iter_count += 1

    async def end(self, session: Any) -> None:
        if self._log_at_end:
            self._log_tensors(await _run(session, self._current))

    def _log_tensors(self, values: dict[Any, Any]) -> None:
        elapsed, _ = self._timer.update_last_triggered_step(self._iter_count)
        with np.printoptions(suppress=True):
            if self._formatter is not None:
                logger.info("%s", self._formatter(values))
                return
            line = ", ".join(f"{tag} = {values[tag]}" for tag in self._tag_order)
        if elapsed is not None:
            logger.info("%s (%.3f sec)", line, elapsed)
        else:
            logger.info("%s", line)


# -- StepCounterHook -------------------------------------------------------------------

class StepCounterHook(SessionRunHook):
    """Logs the global steps per second (``global_step/sec: N``) every N steps or
    seconds, and writes it as a summary to ``summary_writer`` or the
    ``FileWriterCache``'s writer of ``output_dir`` (made on the first write, TF's).
    """

    _STALE_WARNINGS = 5

    def __init__(self, every_n_steps: int | None = 100, every_n_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: Any = None) -> None:
        if (every_n_steps is None) == (every_n_secs is None):
            raise ValueError("exactly one of every_n_steps and every_n_secs should be provided.")
        self._timer = SecondOrStepTimer(every_steps=every_n_steps, every_secs=every_n_secs)
        self._output_dir = output_dir
        self._summary_writer = summary_writer
        self._steps_per_run = 1
        self._last_global_step: int | None = None
        self._stale_warned = 0
        self._global_step_tensor: Any = None
        self._tag = "global_step/sec"

    def begin(self) -> None:
        self._global_step_tensor = _global_step_or_fail("StepCounterHook")
        self._tag = f"{self._global_step_tensor.op.name}/sec"

    def after_create_session(self, session: Any, coord: Any) -> None:
        # a recovered session may start from an earlier step (a restored checkpoint)
        self._last_global_step = None

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._global_step_tensor)

    async def after_run(self, run_context: SessionRunContext,
                        run_values: SessionRunValues) -> None:
        stale = _as_int(run_values.results)
        if self._timer.should_trigger_for_step(stale + self._steps_per_run):
            step = _as_int(await _run(run_context.session, self._global_step_tensor))
            if self._timer.should_trigger_for_step(step):
                elapsed, steps = self._timer.update_last_triggered_step(step)
                if elapsed is not None and steps is not None and elapsed > 0:
                    logger.info("%s: %g", self._tag, steps / elapsed)
                    self._write(steps / elapsed, step)
        if stale == self._last_global_step and self._stale_warned < self._STALE_WARNINGS:
            # SyncReplicas' workers do not increment it in their own step: a warning, no error
            self._stale_warned += 1
            logger.warning("It seems that global step has not been increased. Current value "
                           "(could be stable): %s vs previous value: %s. You could increase the "
                           "global step by passing dt.train.get_global_step() to "
                           "Optimizer.minimize.", stale, self._last_global_step)
        self._last_global_step = stale

    def _write(self, rate: float, step: int) -> None:
        if self._summary_writer is None and self._output_dir:
            self._summary_writer = FileWriterCache.get(self._output_dir)
        if self._summary_writer is not None:
            m = proto.messages()
            self._summary_writer.add_summary(
                m.Summary(value=[m.Summary.Value(tag=self._tag, simple_value=rate)]), step)
