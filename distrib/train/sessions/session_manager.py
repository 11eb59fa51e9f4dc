"""``Scaffold`` and the session creators behind ``MonitoredSession``.

TF1's ``tf.train.Scaffold``, ``ChiefSessionCreator`` and
``WorkerSessionCreator`` (with its ``SessionManager`` folded in), async:
``await creator.create_session()`` returns an open :class:`Session` whose
model is ready.

* The **chief** restores the newest checkpoint of ``checkpoint_dir`` that
  reads back intact (an older one when the newest is corrupt: a
  ``DataLossError`` from ``Saver.restore``), or else runs ``init_op`` (and
  ``init_fn``); then ``local_init_op`` once ``ready_for_local_init_op``
  holds, and checks ``ready_op``.
* A **worker** polls until the chief has done that: ``local_init_op`` once
  the global variables are initialized, then ``ready_op``; errors of a task
  that is still starting (unavailable, aborted, deadline) count as "not yet".
  It gives up with ``DeadlineExceededError`` after ``max_wait_secs``.

TF's ready ops return the names of uninitialized variables; ours by default
is a list of ``IsVariableInitialized`` bools, one per variable, reported by
variable name. A user's ready op may be either kind (a string vector that is
empty when ready, or bool tensors that are all true when ready).

``master=""`` means a local in-process server, made on first use
(``Server.create_local_server()``) and stopped by :meth:`SessionCreator.close`.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from typing import Any, Callable

from distrib.client.session import ConfigProto, Session
from distrib.errors import (
    AbortedError,
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    UnavailableError,
)
from distrib.framework.graph import Graph, GraphKeys, get_default_graph
from distrib.ops.variables import (
    global_variables,
    global_variables_initializer,
    is_variable_initialized,
    local_variables,
    local_variables_initializer,
)
from distrib.server.server_lib import Server
from distrib.train.checkpoints import state_file
from distrib.train.checkpoints.readiness import close_quietly, not_ready, run_fetches
from distrib.train.checkpoints.saver import Saver

logger = logging.getLogger(__name__)

__all__ = ["Scaffold", "SessionCreator", "ChiefSessionCreator", "WorkerSessionCreator"]

# errors of a task that is still starting (or restarting): a worker keeps waiting
_TRANSIENT = (UnavailableError, AbortedError, DeadlineExceededError)
_FIRST_POLL_S = 0.05    # a worker's readiness polls start fast and back off to this:
_MAX_POLL_S = 2.0


def _ready_flags(variables: list[Any]) -> list[Any]:
    return [is_variable_initialized(v) for v in variables]


class Scaffold:
    """The pieces a monitored session needs, picked from the graph's collections or made.

    Pieces passed here are used as they are; the rest are taken from the
    collections ``INIT_OP``, ``READY_OP``, ``READY_FOR_LOCAL_INIT_OP``,
    ``LOCAL_INIT_OP`` and ``SAVERS`` by :meth:`finalize`, or built (and
    stored there). ``init_fn(scaffold, session)`` runs after ``init_op`` on
    the chief (sync or async).
    """

    def __init__(self, init_op: Any = None, init_feed_dict: dict | None = None,
                 init_fn: Any = None, ready_op: Any = None, ready_for_local_init_op: Any = None,
                 local_init_op: Any = None, summary_op: Any = None, saver: Any = None,
                 copy_from_scaffold: Scaffold | None = None) -> None:
        if copy_from_scaffold is not None:
            if not isinstance(copy_from_scaffold, Scaffold):
                raise TypeError("copy_from_scaffold is not a Scaffold instance.")
            base = copy_from_scaffold

            def pick(mine: Any, theirs: Any) -> Any:
                return mine if mine is not None else theirs

            init_op = pick(init_op, base.init_op)
            init_feed_dict = pick(init_feed_dict, base.init_feed_dict)
            init_fn = pick(init_fn, base._user_init_fn)  # noqa: SLF001 - a Scaffold copying another
            ready_op = pick(ready_op, base.ready_op)
            ready_for_local_init_op = pick(ready_for_local_init_op, base.ready_for_local_init_op)
            local_init_op = pick(local_init_op, base.local_init_op)
            summary_op = pick(summary_op, base.summary_op)
            saver = pick(saver, base.saver)
        self._user_init_fn = init_fn
        self._init_op = init_op
        self._init_feed_dict = init_feed_dict
        self._ready_op = ready_op
        self._ready_for_local_init_op = ready_for_local_init_op
        self._local_init_op = local_init_op
        self._summary_op = summary_op
        self._saver = saver
        self._finalized_graph: Graph | None = None

    init_op = property(lambda self: self._init_op)
    init_feed_dict = property(lambda self: self._init_feed_dict)
    ready_op = property(lambda self: self._ready_op)
    ready_for_local_init_op = property(lambda self: self._ready_for_local_init_op)
    local_init_op = property(lambda self: self._local_init_op)
    summary_op = property(lambda self: self._summary_op)
    saver = property(lambda self: self._saver)

    @property
    def init_fn(self) -> Any:
        fn = self._user_init_fn
        return None if fn is None else (lambda sess: fn(self, sess))

    @staticmethod
    def get_or_default(arg_name: str, collection_key: str, default_constructor: Any) -> Any:
        """The one item of the default graph's collection, else ``default_constructor()``
        (stored in the collection when not None)."""
        graph = get_default_graph()
        elements = graph.get_collection(collection_key)
        if elements:
            if len(elements) > 1:
                raise RuntimeError(f'More than one item in the collection "{collection_key}". '
                                   f"Say which one to use: dt.train.Scaffold({arg_name}=item)")
            return elements[0]
        made = default_constructor()
        if made is not None:
            graph.add_to_collection(collection_key, made)
        return made

    @staticmethod
    def default_local_init_op() -> Any:
        """``local_variables_initializer()``, or None when there are no local variables."""
        return local_variables_initializer() if local_variables() else None

    def finalize(self) -> Scaffold:
        """Build the missing pieces in the default graph, then finalize that graph."""
        graph = get_default_graph()
        if self._finalized_graph is graph and graph.finalized:
            return self
        if self._init_op is None:
            self._init_op = Scaffold.get_or_default("init_op", GraphKeys.INIT_OP,
                                                    global_variables_initializer)
        if self._ready_op is None:
            self._ready_op = Scaffold.get_or_default(
                "ready_op", GraphKeys.READY_OP,
                lambda: _ready_flags(global_variables() + local_variables()))
        if self._ready_for_local_init_op is None:
            self._ready_for_local_init_op = Scaffold.get_or_default(
                "ready_for_local_init_op", GraphKeys.READY_FOR_LOCAL_INIT_OP,
                lambda: _ready_flags(global_variables()))
        if self._local_init_op is None:
            self._local_init_op = Scaffold.get_or_default(
                "local_init_op", GraphKeys.LOCAL_INIT_OP, Scaffold.default_local_init_op)
        if self._saver is None:
            self._saver = Scaffold.get_or_default(
                "saver", GraphKeys.SAVERS,
                lambda: Saver(allow_empty=True) if global_variables() else None)
        if self._saver is not None and hasattr(self._saver, "build"):
            self._saver.build()
        graph.finalize()
        self._finalized_graph = graph
        return self


# -- session creators ----------------------------------------------------------------------

class SessionCreator:
    """Makes an open, ready :class:`Session` (``await creator.create_session()``).

    ``graph`` is the default graph when the creator is made. With
    ``master=""`` the creator starts a local server on first use;
    ``await creator.close()`` stops it.
    """

    def __init__(self, scaffold: Scaffold | None, master: str, config: ConfigProto | None) -> None:
        self._scaffold = scaffold or Scaffold()
        self._master = master
        self._config = config
        self.graph: Graph = get_default_graph()
        self._local_server: Server | None = None

    @property
    def scaffold(self) -> Scaffold:
        return self._scaffold

    async def create_session(self) -> Session:
        raise NotImplementedError(f"create_session is not implemented for {self}.")

    async def _open(self) -> Session:
        with self.graph.as_default():
            self._scaffold.finalize()
        sess = Session(await self._target(), graph=self.graph, config=self._config)
        await sess.__aenter__()
        return sess

    async def _target(self) -> str:
        if self._master:
            return self._master
        if self._local_server is None:
            # a blocking start (its own loop thread): off this loop
            self._local_server = await asyncio.to_thread(Server.create_local_server,
                                                         self._config)
            logger.info("started a local server at %s", self._local_server.target)
        return self._local_server.target

    async def close(self) -> None:
        """Stop the local server this creator started, if any."""
        server, self._local_server = self._local_server, None
        if server is not None:
            await asyncio.to_thread(server.stop)

    async def _try_run_local_init(self, sess: Session) -> list[str]:
        """Run ``local_init_op`` once the global variables are ready; what is not ready."""
        sc = self._scaffold
        if sc.local_init_op is None:
            return []
        missing = await not_ready(sess, sc.ready_for_local_init_op)
        if missing:
            return missing
        await run_fetches(sess, sc.local_init_op)
        return []


    async def _wait_for_ready(self, sess: Session, max_wait_secs: float,
                              take_over: Callable[[], bool] | None = None) -> bool:
        """Poll (backing off) until the chief made the model ready: False; or until
        ``take_over()`` says this task must prepare it itself (it became chief): True.
        ``DeadlineExceededError`` after ``max_wait_secs``."""
        deadline = time.monotonic() + max_wait_secs
        delay, logged = _FIRST_POLL_S, time.monotonic()
        while True:
            if take_over is not None and take_over():
                return True
            missing = await self._poll(sess)
            if not missing:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlineExceededError(
                    f"Session was not ready after waiting {max_wait_secs} secs: "
                    f"{missing[:5]} not ready; is a chief running (is_chief=True on one task)?")
            if time.monotonic() - logged >= 10.0:
                logger.info("waiting for the chief to make the model ready; not ready: %s",
                            missing[:5])
                logged = time.monotonic()
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, _MAX_POLL_S)

    async def _poll(self, sess: Session) -> list[str]:
        """What is not ready yet (a task still starting counts as not ready)."""
        try:
            missing = await self._try_run_local_init(sess)
            if missing:
                return missing
            return await not_ready(sess, self._scaffold.ready_op)
        except _TRANSIENT as exc:
            return [f"({type(exc).__name__}: {exc})"]


class ChiefSessionCreator(SessionCreator):
    """The chief's session: restored from ``checkpoint_dir`` (or a given file), else initialized."""

    def __init__(self, scaffold: Scaffold | None = None, master: str = "",
                 config: ConfigProto | None = None, checkpoint_dir: str | None = None,
                 checkpoint_filename_with_path: str | None = None) -> None:
        super().__init__(scaffold, master, config)
        self._checkpoint_dir = os.fspath(checkpoint_dir) if checkpoint_dir else None
        self._checkpoint_path = checkpoint_filename_with_path

    async def create_session(self) -> Session:
        sess = await self._open()
        try:
            await self._prepare(sess)
        except BaseException:
            await close_quietly(sess)
            raise
        return sess

    async def _prepare(self, sess: Session) -> None:
        sc = self._scaffold
        if not await self._restore(sess):
            if sc.init_op is None and sc.init_fn is None and sc.local_init_op is None:
                raise RuntimeError("Model is not initialized and no init_op or init_fn or "
                                   "local_init_op was given")
            if sc.init_op is not None:
                await run_fetches(sess, sc.init_op, feed_dict=sc.init_feed_dict,
                                  options=self._write_options())
            if sc.init_fn is not None:
                result = sc.init_fn(sess)
                if inspect.isawaitable(result):
                    await result
            logger.info("chief initialized the model")
        missing = await self._try_run_local_init(sess)
        if missing:
            raise FailedPreconditionError(
                "Init operations did not make model ready for local_init: uninitialized "
                f"{missing[:10]}")
        missing = await not_ready(sess, sc.ready_op)
        if missing:
            raise FailedPreconditionError(
                f"Init operations did not make model ready: uninitialized {missing[:10]}; give "
                "the Scaffold an init_op (or init_fn) that initializes every variable")

    def _write_options(self) -> dict | None:
        """Run options of the chief's writes (an elected chief's carry its fencing term)."""
        return None

    def _candidates(self) -> list[str]:
        """The checkpoints of ``checkpoint_dir`` that exist, newest first."""
        return state_file.checkpoint_candidates(self._checkpoint_dir)

    async def _restore(self, sess: Session) -> bool:
        saver = self._scaffold.saver
        if self._checkpoint_path is not None:
            if saver is None:
                raise RuntimeError("a checkpoint to restore was given, but no saver")
            await saver.restore(sess, self._checkpoint_path, options=self._write_options())
            logger.info("chief restored the model from %s", self._checkpoint_path)
            return True
        if saver is None:
            return False
        for path in self._candidates():
            try:
                await saver.restore(sess, path, options=self._write_options())
            except DataLossError as exc:
                logger.warning("checkpoint %s is unusable (%s); trying an older one", path, exc)
                continue
            logger.info("chief restored the model from %s", path)
            if not saver.last_checkpoints:  # max_to_keep counts the earlier run's files
                state = state_file.get_checkpoint_state(self._checkpoint_dir or "")
                if state is not None:
                    saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
            return True
        return False


class WorkerSessionCreator(SessionCreator):
    """A non-chief's session: waits (up to ``max_wait_secs``) until the chief made the model ready."""

    def __init__(self, scaffold: Scaffold | None = None, master: str = "",
                 config: ConfigProto | None = None, max_wait_secs: float = 30 * 60) -> None:
        super().__init__(scaffold, master, config)
        self._max_wait_secs = max_wait_secs

    async def create_session(self) -> Session:
        sess = await self._open()
        try:
            await self._wait_until_ready(sess)
        except BaseException:
            await close_quietly(sess)
            raise
        return sess

    async def _wait_until_ready(self, sess: Session) -> None:
        await self._wait_for_ready(sess, self._max_wait_secs)
