"""``Supervisor``: the TF1 training-loop manager (initialize or restore, checkpoint, stop).

Usage is TF1's with ``async``::

    sv = dt.train.Supervisor(is_chief=is_chief, logdir="logs", global_step=gs)
    async with sv.managed_session(server.target) as sess:
        while not sv.should_stop():
            await sess.run(train_op)

What each task does when its session opens:

* the **chief** restores the newest good checkpoint of ``logdir`` (falling
  back to older ones when the newest is corrupt), or else runs ``init_op``;
  then it checks ``ready_op`` and starts a background task that saves a
  checkpoint every ``save_model_secs`` (0: no checkpoints at all, as in TF),
  or every ``save_checkpoint_steps`` global steps (a distrib extension);
* a **non-chief** polls ``ready_op`` every ``recovery_wait_secs`` until the
  chief has initialized (or restored) the shared variables.

Leaving the block (normally or by an exception) stops the background saver,
and the chief saves once more *before* the block is left, so a job that ends
or crashes in Python loses nothing. An exception raised inside the block
requests a stop and is re-raised after that final save; ``OutOfRangeError``
(input exhausted) just stops, as in TF.

Master ``""`` is TF's in-process session: a local server the Supervisor starts
on first use and stops in ``stop()`` (so at the end of a managed session).
As in TF, a non-chief refuses variables with no device (replicas would not share them).

The chief's steps are small methods (``_prepare_chief``, ``_initialize``, the
checkpoint service's ``restore_latest``) so that chief election and
restart can reuse them. Summaries as TF's (``summary_service``): the chief
writes ``summary_op`` (default ``merge_all()``) every ``save_summaries_secs``.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from distrib.client.session import ConfigProto, Session
from distrib.errors import (
    AbortedError,
    DeadlineExceededError,
    FailedPreconditionError,
    OpError,
    OutOfRangeError,
    UnavailableError,
)
from distrib.framework.graph import Graph, get_default_graph
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.train.checkpoints.readiness import close_quietly, run_fetches
from distrib.train.chief.checkpoint_service import CheckpointService
from distrib.train.chief.local_master import LocalMaster
from distrib.train.chief.ps_recovery import PsRecovery, RecoveringSession
from distrib.train.chief.queue_runners import QueueRunners
from distrib.train.chief.role import ChiefRole
from distrib.train.chief.summary_service import SummaryService
from distrib.train.chief.supervisor_ops import (
    USE_DEFAULT,
    SupervisorOps,
    SupervisorSetupError,
    verify_replica_variables,
)

logger = logging.getLogger(__name__)

__all__ = ["Supervisor", "SupervisorSetupError"]


# Errors a non-chief keeps waiting through: the ps or the chief may still be starting.
_TRANSIENT = (UnavailableError, AbortedError, DeadlineExceededError)


class Supervisor:
    """TF1's ``tf.train.Supervisor`` (see the module header); ``managed_session`` is async."""

    USE_DEFAULT = USE_DEFAULT

    def __init__(self, graph: Graph | None = None, ready_op: Any = USE_DEFAULT,
                 ready_for_local_init_op: Any = USE_DEFAULT, is_chief: bool = True,
                 init_op: Any = USE_DEFAULT, init_feed_dict: dict | None = None,
                 local_init_op: Any = USE_DEFAULT, logdir: str | None = None,
                 summary_op: Any = USE_DEFAULT, saver: Any = USE_DEFAULT,
                 global_step: Any = USE_DEFAULT, save_summaries_secs: float = 120,
                 save_model_secs: float = 600, recovery_wait_secs: float = 30,
                 stop_grace_secs: float = 120, checkpoint_basename: str = "model.ckpt",
                 session_manager: Any = None, summary_writer: Any = USE_DEFAULT,
                 init_fn: Any = None, local_init_run_options: Any = None,
                 save_checkpoint_steps: int | None = None) -> None:
        self._graph = graph if graph is not None else get_default_graph()
        self._is_chief = bool(is_chief)   # the preferred chief (the role itself: _role)
        self._role = ChiefRole(self._is_chief, on_change=self._role_changed, on_leave=self.request_stop)
        self._services_wanted = False
        self._ps_recovery: PsRecovery | None = None   # the chief's restore of a restarted ps
        self._ps_watch: asyncio.Task | None = None
        self._logdir = os.fspath(logdir) if logdir else None
        self._save_model_secs = save_model_secs
        self._recovery_wait_secs = recovery_wait_secs
        self._stop_grace_secs = stop_grace_secs
        self._init_feed_dict = init_feed_dict
        self._init_fn = init_fn
        self._save_path = os.path.join(self._logdir, checkpoint_basename) if self._logdir else None
        with self._graph.as_default():
            found = SupervisorOps.find(
                self._graph, ready_op=ready_op, ready_for_local_init_op=ready_for_local_init_op,
                init_op=init_op, local_init_op=local_init_op, saver=saver, global_step=global_step)
            self._ready, self._ready_for_local_init = found.ready, found.ready_for_local_init
            self._init_op, self._local_init_op = found.init_op, found.local_init_op
            self._saver, self._global_step = found.saver, found.global_step
            self._summaries = SummaryService(
                self._graph, summary_op, summary_writer, Supervisor.USE_DEFAULT, self._is_chief,
                self._logdir, self._global_step, self._role, save_summaries_secs, self.request_stop)
        if not self._is_chief:
            verify_replica_variables(self._graph)
        # periodic checkpoints: every save_model_secs, or (a distrib extension, the
        # bound on what a ps restart loses) every save_checkpoint_steps global steps
        self._ckpt = CheckpointService(self._saver, self._save_path, self._logdir,
                                       self._global_step, self._role, save_model_secs,
                                       save_checkpoint_steps, self.request_stop)
        # As in TF: every op the supervisor needs exists now; later additions are bugs.
        self._graph.finalize()
        self._stop_requested = False
        self._stop_exception: BaseException | None = None
        self._stop_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runners = QueueRunners(self._role, self.should_stop, self.request_stop)
        self._sess: Any = None
        self._local = LocalMaster()   # the in-process server of master ""

    # -- properties ------------------------------------------------------------------
    # live: in an elected cluster the role can move during training (train/chief/role.py)
    is_chief = property(lambda self: self._role.is_chief)
    saver = property(lambda self: self._saver)
    global_step = property(lambda self: self._global_step)
    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    local_init_op = property(lambda self: self._local_init_op)
    ready_op = property(lambda self: self._ready.fetch)
    ready_for_local_init_op = property(lambda self: self._ready_for_local_init.fetch)
    logdir = property(lambda self: self._logdir)
    save_path = property(lambda self: self._save_path)
    save_model_secs = property(lambda self: self._save_model_secs)
    summary_writer = property(lambda self: self._summaries.writer)
    summary_op = property(lambda self: self._summaries.summary_op)
    save_summaries_secs = property(lambda self: self._summaries.save_secs)

    # -- sessions ----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def managed_session(self, master: str = "", config: ConfigProto | None = None,
                              start_standard_services: bool = True,
                              close_summary_writer: bool = True,
                              max_wait_secs: float = 7200) -> AsyncIterator[Session]:
        """``async with sv.managed_session(target) as sess:`` (see the module header);
        ``master=""`` runs on an in-process server that ends with the block."""
        try:
            sess = await self.prepare_or_wait_for_session(
                master, config, max_wait_secs=max_wait_secs,
                start_standard_services=start_standard_services)
        except BaseException:
            await self._local.stop()   # nothing else would stop the one it started
            raise
        try:
            # its run rides through a ps restart (train/chief/ps_recovery.py)
            yield RecoveringSession(sess, self._recover_step, max_wait_secs)
        except Exception as exc:  # recorded, then re-raised by stop() after the final save
            self.request_stop(exc)
        finally:
            try:
                await self.stop(close_summary_writer=close_summary_writer)
            finally:
                await close_quietly(sess)

    async def prepare_or_wait_for_session(self, master: str = "", config: ConfigProto | None = None,
                                          wait_for_checkpoint: bool = False,
                                          max_wait_secs: float = 7200,
                                          start_standard_services: bool = True) -> Session:
        """An open Session on ``master``: the chief initializes or restores, others wait.

        ``master=""`` is TF's in-process session: a local server started now (once
        per Supervisor) and stopped, with this session, by :meth:`stop`."""
        self._clear_stop()
        target = await self._local.target(master, config)
        sess = Session(target, graph=self._graph, config=config)
        self._local.track(sess, target)
        await sess.__aenter__()
        try:
            chief = await self._role.start(target)
            self._ps_recovery = PsRecovery(self._role, self._saver, self._logdir, self._ready,
                                           heartbeat_s() or 1.0)
            if chief:
                await self._prepare_chief(sess, wait_for_checkpoint, max_wait_secs)
                await self._ps_recovery.remember()
            else:
                await self._wait_until_ready(sess, max_wait_secs)
        except BaseException:
            await close_quietly(sess)
            await self._role.stop()
            raise
        self._sess = sess
        self._services_wanted = start_standard_services
        if self.is_chief and start_standard_services:
            self.start_standard_services(sess)
        return sess

    async def _role_changed(self, chief: bool) -> None:
        """The chief role moved: chief-only work moves with it. A new chief
        takes over the periodic checkpoints (the variables on the ps are
        live: it restores nothing); a former one stops writing at once."""
        sess = self._sess
        if chief:
            if self._ps_recovery is not None and self._role.ps:
                await self._ps_recovery.remember()   # the ps tasks' variables are live now
            if sess is not None and self._services_wanted and self._ckpt.task is None \
                    and not self._stop_requested:
                self.start_standard_services(sess)
            self._runners.resume_chief_runners(sess)
            return
        self._ckpt.cancel()
        self._summaries.cancel()
        if self._ps_watch is not None:
            self._ps_watch.cancel()
        self._ps_watch = None

    async def _recover_step(self, sess: Session) -> bool:
        """A managed session's step failed while the cluster recovers: the
        chief restores a restarted ps; everyone waits until the model is
        ready again (polled at most every second), then the step is retried.
        Returns whether anything was recovering (False: the model was ready)."""
        recovering = False
        if self.is_chief and self._ps_recovery is not None:
            with contextlib.suppress(OpError):
                recovering = bool(await self._ps_recovery.recover(sess))
        wait = min(self._recovery_wait_secs, 1.0)
        for _ in range(30):
            try:
                if not await self._ready.not_ready(sess):
                    return recovering
            except OpError as exc:
                logger.info("waiting for the cluster to recover: %s", exc)
            recovering = True
            await asyncio.sleep(wait)
        return recovering

    # -- the chief ------------------------------------------------------------------------
    async def _prepare_chief(self, sess: Session, wait_for_checkpoint: bool,
                             max_wait_secs: float) -> None:
        await self._wait_for_tasks(sess, max_wait_secs)
        if not await self._ready.not_ready(sess):
            # the variables on the ps are live (a chief restarted, or elected, while
            # they trained on): a checkpoint is older than they are, never restore it
            logger.info("chief: the model's variables are initialized already; "
                        "not restoring or initializing them")
            await self._run_local_init(sess)
            return
        restored = await self._ckpt.restore_latest(sess)
        if restored is None and wait_for_checkpoint:
            restored = await self._wait_for_checkpoint(sess, max_wait_secs)
        if restored is None:
            await self._initialize(sess)
        await self._run_local_init(sess)
        not_ready = await self._ready.not_ready(sess)
        if not_ready:
            raise FailedPreconditionError(
                f"Init operations did not make model ready: uninitialized {not_ready}. Give the "
                "Supervisor an init_op (or init_fn) that initializes every global variable")

    async def _wait_for_tasks(self, sess: Session, max_wait_secs: float) -> None:
        """Wait (up to ``max_wait_secs``) until the tasks that hold the model's
        variables answer: a chief started before its ps waits for it, as a
        non-chief does, instead of failing when the first connect times out."""
        deadline = time.monotonic() + max_wait_secs
        while True:
            try:
                await self._ready.not_ready(sess)
                return
            except _TRANSIENT as exc:
                if time.monotonic() + self._recovery_wait_secs > deadline:
                    raise
                logger.info("chief: waiting for the tasks of the model's variables: %s", exc)
                await asyncio.sleep(self._recovery_wait_secs)
            except OpError:
                return   # they answered; a ready_op that fails before init is init's business

    async def _wait_for_checkpoint(self, sess: Session, max_wait_secs: float) -> str | None:
        deadline = time.monotonic() + max_wait_secs
        while time.monotonic() < deadline:
            logger.info("waiting for a checkpoint in %s", self._logdir)
            await asyncio.sleep(self._recovery_wait_secs)
            restored = await self._ckpt.restore_latest(sess)
            if restored is not None:
                return restored
        return None

    async def _initialize(self, sess: Session) -> None:
        if self._init_op is not None:
            await run_fetches(sess, self._init_op, feed_dict=self._init_feed_dict,
                              options=self._role.run_options())
        if self._init_fn is not None:
            result = self._init_fn(sess)
            if inspect.isawaitable(result):
                await result
        logger.info("chief initialized the model")

    async def _run_local_init(self, sess: Session) -> None:
        if self._local_init_op is not None:
            await run_fetches(sess, self._local_init_op)

    # -- non-chiefs ---------------------------------------------------------------------
    async def _wait_until_ready(self, sess: Session, max_wait_secs: float) -> None:
        """Poll until the chief has initialized the model; then run the local init op.
        If this task becomes the chief meanwhile (a preferred chief that could
        not reach the arbiter before its ps was up), it prepares the model itself."""
        deadline = time.monotonic() + max_wait_secs
        while True:
            if self.is_chief:
                await self._prepare_chief(sess, False, max(0.0, deadline - time.monotonic()))
                return
            not_ready = await self._poll_ready(sess)
            if not not_ready:
                return
            if time.monotonic() + self._recovery_wait_secs > deadline:
                raise DeadlineExceededError(
                    f"the model was not ready after {max_wait_secs}s: {not_ready} still "
                    "uninitialized; is the chief running (is_chief=True on one task)?")
            logger.info("waiting for the chief to initialize the model; not ready: %s",
                        not_ready[:5])
            await asyncio.sleep(self._recovery_wait_secs)

    async def _poll_ready(self, sess: Session) -> list[str]:
        try:
            not_ready = await self._ready_for_local_init.not_ready(sess)
            if not_ready:
                return not_ready
            await self._run_local_init(sess)
            return await self._ready.not_ready(sess)
        except _TRANSIENT as exc:
            return [f"({type(exc).__name__}: {exc})"]

    # -- background services ----------------------------------------------------------
    def start_standard_services(self, sess: Session) -> list[asyncio.Task]:
        """Start the chief's periodic checkpoints (a saver and a logdir) and summaries."""
        if not self.is_chief:
            raise FailedPreconditionError("only the chief runs the standard services")
        self._bind_loop()
        self._ckpt.start(sess, self._stop_event)
        self._summaries.start(sess, self._stop_event)
        if self._ps_recovery is not None and self._role.ps and self._ps_watch is None:
            self._ps_watch = asyncio.get_running_loop().create_task(
                self._ps_recovery.watch(sess, self.should_stop), name="distrib-ps-watch")
        return [t for t in (self._ckpt.task, self._summaries.task) if t]

    async def summary_computed(self, sess: Session, summary: Any, global_step: Any = None) -> None:
        """Write ``summary`` at ``global_step`` (its current value when None): TF's, awaited."""
        await self._summaries.summary_computed(sess, summary, global_step)

    async def _save_checkpoint(self, sess: Session) -> str:
        return await self._ckpt.save(sess)

    def _bind_loop(self) -> None:
        # Once per loop: services started later (start_queue_runners after
        # managed_session, as SyncReplicas does) must share the event the
        # checkpoint loop already waits on, and the save lock with it.
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._stop_event is None or self._ckpt.lock is None:
            self._loop = loop
            self._stop_event = asyncio.Event()
            self._ckpt.bind()
        if self._stop_requested:
            self._stop_event.set()

    def start_queue_runners(self, sess: Session, queue_runners: Sequence[Any] = ()) -> list[asyncio.Task]:
        """Start background loops (e.g. ``SyncReplicasOptimizer.get_chief_queue_runner()``)
        that run until :meth:`should_stop`; they are stopped with the other services.

        A runner is anything with ``start(sess, stop) -> asyncio.Task``. One marked
        ``chief_only`` (the sync-replicas chief queue runner) runs on whichever
        task is chief: call this on every worker, and it starts wherever the role
        is, now or later, with the chief's fencing term on each of its steps."""
        self._bind_loop()
        return self._runners.start(sess, queue_runners)

    async def _stop_services(self, close_summary_writer: bool = True) -> None:
        watch, self._ps_watch = self._ps_watch, None
        if watch is not None:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        await self._runners.stop(self._stop_grace_secs)
        await self._ckpt.stop(self._stop_grace_secs)
        await self._summaries.stop(self._stop_grace_secs, close_summary_writer)

    # -- stopping ------------------------------------------------------------------------
    def should_stop(self) -> bool:
        return self._stop_requested

    def request_stop(self, ex: BaseException | None = None) -> None:
        """Ask the training loop to stop; ``ex`` is re-raised by ``stop()`` (unless OutOfRange)."""
        if ex is not None and self._stop_exception is None and not isinstance(ex, OutOfRangeError):
            self._stop_exception = ex
        if ex is not None and isinstance(ex, OutOfRangeError):
            logger.info("input exhausted (%s); stopping", ex)
        self._stop_requested = True
        self._wake_services()

    def _wake_services(self) -> None:
        if self._stop_event is None or self._loop is None or self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._stop_event.set()
        else:  # request_stop from another thread
            self._loop.call_soon_threadsafe(self._stop_event.set)

    def _clear_stop(self) -> None:
        self._stop_requested = False
        self._stop_exception = None
        if self._stop_event is not None:
            try:
                same_loop = asyncio.get_running_loop() is self._loop
            except RuntimeError:
                same_loop = False
            if same_loop:
                self._stop_event.clear()   # a new session's services run again
            else:
                self._stop_event = None    # made anew for the loop that binds next

    async def stop(self, threads: Any = None, close_summary_writer: bool = True,
                   ignore_live_threads: bool = False) -> None:
        """Stop the services, let the chief save a last checkpoint, end the in-process
        server of master "" (if any), and re-raise a recorded error."""
        self.request_stop()
        try:
            await self._stop_services(close_summary_writer)
            await self._final_save()
        finally:
            await self._role.stop()   # a chief resigns: a successor takes over at once
            await self._local.stop()
        exc, self._stop_exception = self._stop_exception, None
        if exc is not None:
            raise exc

    async def _final_save(self) -> None:
        sess, self._sess = self._sess, None
        # save_model_secs=0 turns checkpoints off, the last one included (TF)
        if not (self.is_chief and sess is not None and self._ckpt.enabled):
            return
        try:
            path = await self._save_checkpoint(sess)
            logger.info("chief saved the final checkpoint %s", path)
        except Exception as exc:
            if self._stop_exception is None:
                raise
            # The block already failed (maybe because the session broke): keep that error.
            logger.error("final checkpoint failed after an earlier error: %s", exc)

    @contextlib.contextmanager
    def stop_on_exception(self) -> Any:
        """``with sv.stop_on_exception():`` records an exception as the stop reason."""
        try:
            yield
        except Exception as exc:
            self.request_stop(exc)
