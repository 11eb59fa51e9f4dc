"""How one worker learns it is about to be preempted, and how the workers agree.

Two halves of ``PreemptionCheckpointHandler`` (``handler.py``), kept apart
from its save-and-exit logic:

* **The notice** (:class:`TerminationNotice`). As TF's handler: without a
  ``termination_watcher_fn`` a SIGTERM is the notice (a handler installed on
  the main thread; it only notes the time, the training loop acts on it at
  its next ``run``); with one, the function is polled every second, a plain
  function on a daemon thread (it may do a little I/O, a metadata request),
  a coroutine function as a task of the program's event loop. A second
  SIGTERM puts the old handler back and raises the signal again: someone
  who asks twice means it (the default action ends the process).
* **The agreement** (:class:`Agreement`). As TF's coordination service
  does it: the worker that got the notice tells every peer, through the
  actor system (each task's ``server`` actor, ``preemption_notice``), "we
  save at run n+1", where n is the run it is about to start, and waits for
  every acknowledgement before it trains that run. A peer holds the notice
  in its server; its training loop reads it at each ``run`` (a local read,
  no I/O). n+1 is safe: no peer can finish run n before the noticer trains
  it, which it does only after every peer holds the notice, so every worker
  reads it before run n+1 starts. Two workers noticed at once name the same
  run (each looks for a peer's notice before it sends its own, and neither
  can be past the run the other names). At that run every worker enters one
  small collective, an element-wise max over the workers of ``[decision,
  runs, -runs, -interval]``: the same answer everywhere, and ``runs`` checks
  the lockstep (so does each peer when it reads the notice: the run named is
  at most two past its own). With no notice, training pays nothing: no
  collective, no message. bench/recovery.py measures it (the
  ``preempt-mwms`` row). Without reachable peers (a strategy with no server
  of its own, an elastic group), or when ``check_period_s`` is given, the
  workers agree periodically instead: every run, or every few that together
  take ``check_period_s`` (``preemption.CHECK_PERIOD_S``), the fewest any
  worker asks for; then the save is at the run where a notice is first seen.
  The collective has a group key of its own (no strategy hands it out), one
  op, in the default graph, run in the strategy's scope so that its
  first-use initialization is the strategy's.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np

from distrib.distribute.functions.def_function import Function, function
from distrib.errors import FailedPreconditionError
from distrib.framework import distribution_context
from distrib.framework.graph import get_default_graph
from distrib.ops import collective_ops

logger = logging.getLogger(__name__)

__all__ = ["TerminationNotice", "Agreement", "call_maybe_async", "POLL_S", "AGREEMENT_GROUP_KEY"]

POLL_S = 1.0        # TF polls a termination_watcher_fn every second
AGREEMENT_GROUP_KEY = 8   # MWMS's group is 7; CollectiveKeys hand out 1000 and up
_INSTANCE_KEY = 1   # the one op of the group; each run pairs by its sequence number


async def call_maybe_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaited when it gives an awaitable (a coroutine function,
    a ``dt.function``)."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


class TerminationNotice:
    """This worker's own notice: SIGTERM, or a polled ``termination_watcher_fn``."""

    def __init__(self, watcher_fn: Callable[[], Any] | None, name: str) -> None:
        self._watcher_fn = watcher_fn
        self._name = name
        self.received_at: float | None = None   # time.time() of the notice
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task | None = None
        self._previous: Any = None
        self._installed = False
        if watcher_fn is None:
            self._install()
        elif not inspect.iscoroutinefunction(watcher_fn):
            self._thread = threading.Thread(target=self._poll_thread, daemon=True,
                                            name=f"WorkerTerminationSignalWatcher-{name}")
            self._thread.start()

    @property
    def received(self) -> bool:
        return self.received_at is not None

    def note(self) -> None:
        """The notice came (also what a test or a platform hook may call). No I/O here:
        a signal handler that logs can meet the main thread inside the same stream's
        write (a reentrant-call error); the handler logs when it acts on the notice."""
        if self.received_at is None:
            self.received_at = time.time()

    # -- SIGTERM ---------------------------------------------------------------------------
    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("PreemptionCheckpointHandler watches SIGTERM, and Python lets "
                             "only the main thread install a signal handler: make it on the "
                             "main thread, or pass TerminationConfig(termination_watcher_fn=...)")
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self.received_at is None:
            self.note()
            return
        # asked again: the old handler back, and the signal again (default: the end)
        self._uninstall()
        signal.raise_signal(signal.SIGTERM)

    def _uninstall(self) -> None:
        if self._installed:
            self._installed = False
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:   # not one set since
                signal.signal(signal.SIGTERM, self._previous if self._previous is not None
                              else signal.SIG_DFL)

    # -- a termination_watcher_fn ----------------------------------------------------------
    def _poll_thread(self) -> None:
        while not self._stop.is_set() and self.received_at is None:
            try:
                if self._watcher_fn():
                    self.note()
                    return
            except Exception:   # noqa: BLE001 - a flaky watcher must not end the watch
                logger.exception("termination_watcher_fn failed; polling on")
            self._stop.wait(POLL_S)

    def start_async(self) -> None:
        """Start polling a coroutine ``termination_watcher_fn`` on the running loop."""
        if self._task is None and inspect.iscoroutinefunction(self._watcher_fn):
            self._task = asyncio.get_running_loop().create_task(self._poll_task())

    async def _poll_task(self) -> None:
        while not self._stop.is_set() and self.received_at is None:
            try:
                if await self._watcher_fn():
                    self.note()
                    return
            except Exception:   # noqa: BLE001 - as in the thread
                logger.exception("termination_watcher_fn failed; polling on")
            await asyncio.sleep(POLL_S)

    def stop(self) -> None:
        """Stop watching (before the exit, or when the handler is dropped)."""
        self._stop.set()
        self._uninstall()
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(POLL_S + 1)
            self._thread = None


class Agreement:
    """The per-step collective among the workers (module header); one worker: none."""

    def __init__(self, strategy: Any, num_workers: int) -> None:
        self._strategy = strategy
        self.num_workers = num_workers
        self._function: Function | None = None
        self.calls = 0              # how many exchanges ran, and their time (the bench reads)
        self.seconds = 0.0

    @property
    def collective(self) -> bool:
        return self.num_workers > 1

    @property
    def tells_peers(self) -> bool:
        """Whether a notice travels to the peers by message (module header): a
        MultiWorkerMirroredStrategy over a cluster, with its own server."""
        return (self.collective and getattr(self._strategy, "server", None) is not None
                and len(self._strategy.peer_tasks()) == self.num_workers - 1)

    def peer_notice(self) -> tuple[int, str] | None:
        """(the run to save at, the task noticed) a peer announced, taken; None: none."""
        return self._strategy.server.take_preemption_notice()

    async def announce(self, save_at: int) -> None:
        """Tell every peer the workers save at run ``save_at``; return once all hold it."""
        await self._strategy.server.announce_preemption(self._strategy.peer_tasks(), save_at)

    async def exchange(self, values: list[int]) -> np.ndarray:
        """The element-wise max of ``values`` over the workers (int64)."""
        array = np.asarray(values, dtype=np.int64)
        if not self.collective:
            return array
        if self._function is None:
            self._function = function(self._max_over_workers)
        start = time.perf_counter()
        with self.scope():
            out = np.asarray(await self._function(array))
        self.calls += 1
        self.seconds += time.perf_counter() - start
        return out

    def _max_over_workers(self, values: Any) -> Any:
        device = self._strategy.replica_devices[0]
        with get_default_graph().device(device):
            return collective_ops.all_reduce(values, self.num_workers, AGREEMENT_GROUP_KEY,
                                             _INSTANCE_KEY, merge_op="Max",
                                             name="PreemptionAgreement")

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """The strategy's scope, unless it is open already (steps, saves, restores)."""
        current = distribution_context.strategy()
        if self._strategy is None or current is self._strategy:
            yield
        elif current is not None:
            raise FailedPreconditionError(
                f"PreemptionCheckpointHandler belongs to {self._strategy!r}, but the scope of "
                f"{current!r} is open: call it outside other strategies' scopes")
        else:
            with self._strategy.scope():
                yield
