"""A ``MonitoredTrainingSession`` with the Supervisor's chief election and recovery.

``MonitoredTrainingSession(is_chief=...)`` names the *preferred* chief, as
``Supervisor(is_chief=...)`` does (docs/CONTRACT.md, "Fault tolerance"). In a
training cluster (a ps job and two or more workers, or any number in an
elastic launch, ``DISTRIB_ELASTIC=1``: a lone worker campaigns) the role is elected
(:class:`~distrib.train.chief.role.ChiefRole`) and can move during training;
anywhere else it is fixed, as in TF. Two pieces carry that into the
monitored session:

* :class:`ElectedSessionCreator` makes each session (the first, and every
  one a recoverable error recreates) from the newest state:

  - in a cluster with a ps job, the model's variables on the ps are live
    (ready): nothing is restored or initialized, chief or not; a checkpoint
    is older than they are (without a ps job the variables live with the
    session's own tasks, and a new session restores or initializes, as TF's);
  - a ps task restarted since this chief last saw it: the chief restores that
    task's variables only (``PsRecovery``), from the newest good checkpoint;
  - nothing is ready (a cluster's first start, or every ps restarted): the
    chief restores the newest good checkpoint or initializes, as TF's
    ``ChiefSessionCreator`` does; a non-chief waits, and takes the chief's
    part itself if the role reaches it meanwhile.

  The chief's writes (restore, init) carry its fencing term.

* :class:`ChiefOnlyHook` wraps each chief-only hook (the checkpoint saver,
  the step counter, ``chief_only_hooks``): it acts only while this task is
  chief. A task that becomes chief mid-session starts it then (its
  ``after_create_session`` runs before its first step as chief: the
  checkpoint saver writes the state it takes over); one that loses the role
  stops it. Its checkpoints fence the directory with the chief's term, and a
  save refused by that fence (a newer chief exists) is logged, not raised.

A hook that wants the role itself (``SyncReplicasOptimizer``'s, so that its
chief queue runner moves with the role) has an attribute ``chief_role``:
the session sets it to the live role before ``begin()``.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from distrib.client.session import ConfigProto, Session
from distrib.errors import AbortedError, FencedError
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.train.checkpoints.readiness import ReadyCheck, close_quietly, not_ready
from distrib.train.chief.checkpoint_fence import fence_directory
from distrib.train.chief.ps_recovery import PsRecovery
from distrib.train.chief.role import ChiefRole
from distrib.train.sessions.session_manager import ChiefSessionCreator, Scaffold
from distrib.train.sessions.session_run_hooks import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    call_hook,
)

logger = logging.getLogger(__name__)

__all__ = ["ElectedSessionCreator", "ChiefOnlyHook"]



class ElectedSessionCreator(ChiefSessionCreator):
    """Sessions for a task whose chief role may be elected (see the module header)."""

    def __init__(self, scaffold: Scaffold | None = None, master: str = "",
                 config: ConfigProto | None = None, checkpoint_dir: str | None = None,
                 is_chief: bool = True, max_wait_secs: float = 7200) -> None:
        super().__init__(scaffold, master, config, checkpoint_dir)
        self.role = ChiefRole(is_chief)
        self._max_wait_secs = max_wait_secs
        self._recovery: PsRecovery | None = None

    @property
    def is_chief(self) -> bool:
        return self.role.is_chief

    def _write_options(self) -> dict | None:
        return self.role.run_options()

    async def create_session(self) -> Session:
        sess = await self._open()
        try:
            await self.role.start(await self._target())
            if self._recovery is None:
                self._recovery = PsRecovery(self.role, self._scaffold.saver,
                                            self._checkpoint_dir,
                                            ReadyCheck(self._scaffold.ready_op),
                                            heartbeat_s() or 1.0)
            await self._ready_session(sess)
        except BaseException:
            await close_quietly(sess)
            raise
        return sess

    async def _ready_session(self, sess: Session) -> None:
        """Wait for the chief's model, or prepare it if the role reaches this task."""
        if await self._wait_for_ready(sess, self._max_wait_secs, lambda: self.role.is_chief):
            await self._prepare_as_chief(sess)

    async def _prepare_as_chief(self, sess: Session) -> None:
        recovery = self._recovery
        assert recovery is not None
        if not self.role.ps:
            # no ps job: the variables live on this task or its in-graph peers, and a
            # new session starts from the checkpoint or the initializers, as in TF
            await self._prepare(sess)
            return
        if recovery.known:
            await recovery.recover(sess)   # a restarted ps: only its variables
        if not await not_ready(sess, self._scaffold.ready_op):
            logger.info("chief: the model's variables are live; not restoring or "
                        "initializing them")
            missing = await self._try_run_local_init(sess)
            if missing:
                raise AbortedError(f"the model is ready but not for local_init: {missing[:10]}")
        else:
            await self._prepare(sess)   # restore the newest good checkpoint, or initialize
        await recovery.remember()   # the ps tasks' variables are live now

    async def close(self) -> None:
        try:
            await self.role.stop()
        finally:
            await super().close()


class ChiefOnlyHook(SessionRunHook):
    """A hook that acts only while this task is chief (see the module header)."""

    def __init__(self, hook: SessionRunHook, role: ChiefRole,
                 checkpoint_dir: str | None = None) -> None:
        self.hook = hook
        self.role = role
        self._checkpoint_dir = checkpoint_dir
        self._started = False      # after_create_session ran in the current session
        self._in_step = False      # before_run was passed on this step
        self._coord: Any = None
        self._fenced_term: int | None = None   # the term in which a newer chief's fence refused us
        if isinstance(hook, CheckpointSaverHook) and checkpoint_dir:
            # every save first marks the folder with this chief's term (see checkpoint_fence)
            hook.add_listener(_FenceListener(role, checkpoint_dir), first=True)

    @property
    def fenced(self) -> bool:
        """Refused by a newer chief in the current term (a later election clears it)."""
        return self._fenced_term is not None and (self.role.term or 0) <= self._fenced_term

    def begin(self) -> Any:
        return self.hook.begin()

    async def after_create_session(self, session: Any, coord: Any) -> None:
        self._coord, self._started = coord, False
        if self.role.is_chief:
            await self._start(session)

    async def before_run(self, run_context: SessionRunContext) -> SessionRunArgs | None:
        self._in_step = False
        if not self.role.is_chief or self.fenced:
            if self._started:
                logger.info("no longer chief: %s stops", type(self.hook).__name__)
            self._started = False
            return None
        if not self._started:
            logger.info("chief now: %s starts", type(self.hook).__name__)
            if not await self._start(run_context.session):
                return None
        self._in_step = True
        return await self._guard(self.hook.before_run, run_context)

    async def after_run(self, run_context: SessionRunContext,
                        run_values: SessionRunValues) -> None:
        if self._in_step:
            self._in_step = False
            await self._guard(self.hook.after_run, run_context, run_values)

    async def end(self, session: Any) -> None:
        if self.role.is_chief and not self.fenced:
            await self._guard(self.hook.end, session)

    async def _start(self, session: Any) -> bool:
        await self._guard(self.hook.after_create_session, session, self._coord)
        self._started = not self.fenced
        return self._started

    async def _guard(self, fn: Any, *args: Any) -> Any:
        try:
            return await call_hook(fn, *args)
        except FencedError as exc:
            self._step_down(exc)
            return None

    def _step_down(self, exc: FencedError) -> None:
        self._fenced_term = self.role.term or 0
        self._started = False
        logger.warning("a newer chief was elected: %s stops writing (%s)",
                       type(self.hook).__name__, exc.message)


class _FenceListener(CheckpointSaverListener):
    """Before each of the chief's saves: the folder accepts this chief's term,
    or refuses it with ``FencedError`` (a newer chief was elected)."""

    def __init__(self, role: ChiefRole, directory: str) -> None:
        self.role = role
        self.directory = directory

    async def before_save(self, session: Any, global_step_value: int) -> None:
        term = self.role.term
        if term is not None:
            await asyncio.to_thread(fence_directory, self.directory, term)
