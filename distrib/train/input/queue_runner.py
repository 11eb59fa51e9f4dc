"""``dt.train.QueueRunner`` and ``dt.train.start_queue_runners`` (TF1's
``queue_runner_impl``): loops that keep a queue filled by running its
enqueue ops.

A runner runs each of its enqueue ops over and over through the session it
is started with; the ops are colocated with their queue, so the work (read,
decode, augment, enqueue) happens on the task that holds the queue, and
only the step's request crosses from the client. With an async
``dt.Session`` (or a ``MonitoredSession``) each loop is an asyncio task on
the caller's loop; with a ``dt.SyncSession`` it is a thread, as TF's. As in
TF, a loop ends when its op fails with a "queue closed" error
(``OutOfRangeError``: the epochs are done; ``CancelledError``: the queue
closed), and the last loop of a runner to end closes the queue, so that
dequeues drain what is left and then fail with ``OutOfRangeError``. Any
other error stops the coordinator with it. A stop (the coordinator's, or
the monitored session's ``should_stop``) cancels the queue's pending
enqueues, as TF's ``_close_on_stop`` thread does, so a loop blocked on a
full queue ends too. Closing the session ends every loop: a waiting enqueue fails with ``SessionClosedError`` (a
``CancelledError``) and nothing runs after it, so no task or thread is
left behind.

A runner whose enqueue op reads one record through a ``ReaderReadV2`` runs,
where :mod:`distrib.train.input.vectorize` can convert it, that op's
batched form instead: ``ReaderReadUpToV2`` of up to ``DEFAULT_CHUNK``
records, every op once over the chunk, one ``QueueEnqueueManyV2`` (the
executor's cost per op paid once per chunk, not per record). Those loops
are at most :data:`VECTORIZED_LOOPS`: each holds a chunk in flight, and one
loop of chunks already feeds the CIFAR trainer as fast as a batch in memory
(two measured the same; the second overlaps a loop waiting for room or for
a file with the other's work). A chunk ends early at the end of a file (as
TF's ``ReadUpTo``); the reader's ``OutOfRangeError`` ends the loops as before.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from typing import Any, Callable, Sequence

from distrib.errors import CancelledError, OutOfRangeError
from distrib.framework.graph import GraphKeys, Operation, get_default_graph
from distrib.train.input import vectorize

logger = logging.getLogger(__name__)

__all__ = ["QueueRunner", "add_queue_runner", "start_queue_runners", "STOP_POLL_S"]

STOP_POLL_S = 0.05   # how often a runner's watcher looks for a stop (TF's waits on an event)
VECTORIZED_LOOPS = 2   # loops of a vectorized enqueue op (each holds one chunk in flight)


class QueueRunner:
    """``QueueRunner(queue, enqueue_ops, close_op=None, cancel_op=None,
    queue_closed_exception_types=None)``: one loop per enqueue op (list an op
    ``n`` times for ``n`` parallel loops, as ``shuffle_batch``'s
    ``num_threads`` does)."""

    def __init__(self, queue: Any = None, enqueue_ops: Sequence[Operation] | None = None,
                 close_op: Operation | None = None, cancel_op: Operation | None = None,
                 queue_closed_exception_types: tuple[type, ...] | None = None) -> None:
        if queue is None or not enqueue_ops:
            raise ValueError("QueueRunner needs a queue and at least one enqueue op")
        self._queue = queue
        self._enqueue_ops = list(enqueue_ops)
        self._close_op = close_op if close_op is not None else queue.close()
        self._cancel_op = cancel_op if cancel_op is not None else \
            queue.close(cancel_pending_enqueues=True)
        self._closed_types = tuple(queue_closed_exception_types or
                                   (OutOfRangeError, CancelledError))
        self._lock = threading.Lock()
        self._runs = 0
        self.exceptions_raised: list[BaseException] = []

    @property
    def queue(self) -> Any:
        return self._queue

    @property
    def enqueue_ops(self) -> list[Operation]:
        return list(self._enqueue_ops)

    @property
    def close_op(self) -> Operation:
        return self._close_op

    @property
    def cancel_op(self) -> Operation:
        return self._cancel_op

    @property
    def name(self) -> str:
        return self._queue.name

    # -- starting --------------------------------------------------------------------------
    def create_threads(self, sess: Any, coord: Any = None, daemon: bool = False,
                       start: bool = False) -> list[Any]:
        """One loop per enqueue op on ``sess``: asyncio tasks for an async
        session (started at once, on the running loop), threads for a
        blocking one (started when ``start``). ``coord`` stops them and
        hears of their errors."""
        should_stop = coord.should_stop if coord is not None else (lambda: False)
        loop_ops = self.loop_ops()
        with self._lock:
            self._runs = len(loop_ops)
        if inspect.iscoroutinefunction(sess.run):
            tasks = [asyncio.ensure_future(self._loop(sess, op, should_stop, coord))
                     for op in loop_ops]
            if coord is not None:
                tasks.append(asyncio.ensure_future(self._close_on_stop(sess, should_stop, tasks)))
                for t in tasks:
                    coord.register_thread(t)
            return tasks
        threads = [threading.Thread(target=self._thread_loop, args=(sess, op, should_stop, coord),
                                    name=f"QueueRunnerThread-{self.name}", daemon=daemon)
                   for op in loop_ops]
        if coord is not None:
            loops = list(threads)
            threads.append(threading.Thread(target=self._close_on_stop_sync,
                                            args=(sess, should_stop, loops), daemon=daemon,
                                            name=f"QueueRunnerCloseOnStop-{self.name}"))
        if start:
            for t in threads:
                t.start()
        return threads

    def start(self, sess: Any, should_stop: Callable[[], bool]) -> asyncio.Task:
        """The runner as one asyncio task (the protocol a ``MonitoredSession``
        starts the ``QUEUE_RUNNERS`` collection with)."""
        loop_ops = self.loop_ops()
        with self._lock:
            self._runs = len(loop_ops)

        async def run_all() -> None:
            loops = [asyncio.ensure_future(self._loop(sess, op, should_stop, None))
                     for op in loop_ops]
            watcher = asyncio.ensure_future(self._close_on_stop(sess, should_stop, loops))
            try:
                await asyncio.gather(*loops, watcher)
            finally:   # one loop failed (or the runner was cancelled): none outlives it
                for task in (*loops, watcher):
                    task.cancel()
                await asyncio.gather(*loops, watcher, return_exceptions=True)
        return asyncio.ensure_future(run_all())

    def loop_ops(self) -> list[Operation]:
        """The op each loop runs: an enqueue op's vectorized form where it has
        one (at most ``VECTORIZED_LOOPS`` loops of it), else the op itself."""
        out: list[Operation] = []
        loops: dict[Operation, int] = {}
        for op in self._enqueue_ops:
            spec = op.attrs.get("spec") or {}
            batched = vectorize.vectorized_enqueue(op, vectorize.chunk_for(spec.get("capacity")))
            if batched is None:
                out.append(op)
            elif loops.get(batched, 0) < VECTORIZED_LOOPS:
                loops[batched] = loops.get(batched, 0) + 1
                out.append(batched)
        return out

    async def _close_on_stop(self, sess: Any, should_stop: Callable[[], bool],
                             loops: list[asyncio.Future]) -> None:
        """TF's ``_close_on_stop``: once a stop is asked, cancel the queue's pending
        enqueues (a loop waiting on a full queue then ends); done when the loops are."""
        while not all(loop.done() for loop in loops):
            if should_stop():
                if not _closed(sess):
                    await _quietly(sess.run(self._cancel_op))
                return
            await asyncio.sleep(STOP_POLL_S)

    def _close_on_stop_sync(self, sess: Any, should_stop: Callable[[], bool],
                            loops: list[threading.Thread]) -> None:
        while any(loop.is_alive() for loop in loops) or not all(
                loop.ident is not None for loop in loops):
            if should_stop():
                if not _closed(sess):
                    _quietly_sync(lambda: sess.run(self._cancel_op))
                return
            time.sleep(STOP_POLL_S)

    # -- the loops ---------------------------------------------------------------------------
    async def _loop(self, sess: Any, op: Operation, should_stop: Callable[[], bool],
                    coord: Any) -> None:
        try:
            while not should_stop() and not _closed(sess):
                await sess.run(op)
        except self._closed_types:
            if self._last_one() and not _closed(sess):
                await _quietly(sess.run(self._close_op))
        except Exception as e:
            if _closed(sess):
                return
            self._failed(e, coord)
            raise
        finally:
            if coord is not None and coord.should_stop() and not _closed(sess):
                await _quietly(sess.run(self._cancel_op))

    def _thread_loop(self, sess: Any, op: Operation, should_stop: Callable[[], bool],
                     coord: Any) -> None:
        try:
            while not should_stop() and not _closed(sess):
                sess.run(op)
        except self._closed_types:
            if self._last_one() and not _closed(sess):
                _quietly_sync(lambda: sess.run(self._close_op))
        except Exception as e:
            if not _closed(sess):
                self._failed(e, coord)
        finally:
            if coord is not None and coord.should_stop() and not _closed(sess):
                _quietly_sync(lambda: sess.run(self._cancel_op))

    def _last_one(self) -> bool:
        with self._lock:
            self._runs -= 1
            return self._runs <= 0

    def _failed(self, e: Exception, coord: Any) -> None:
        with self._lock:
            self.exceptions_raised.append(e)
        if coord is not None:
            coord.request_stop(e)
        else:
            logger.error("queue runner of %s failed: %s: %s", self.name, type(e).__name__, e)


def _closed(sess: Any) -> bool:
    return bool(getattr(sess, "closed", False))


async def _quietly(coro: Any) -> None:
    try:
        await coro
    except Exception as e:   # the session may be closing: nothing to report
        logger.debug("queue runner: closing its queue failed: %s", e)


def _quietly_sync(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception as e:
        logger.debug("queue runner: closing its queue failed: %s", e)


def add_queue_runner(qr: QueueRunner, collection: str = GraphKeys.QUEUE_RUNNERS) -> None:
    """Add ``qr`` to the graph's ``QUEUE_RUNNERS`` collection (TF1's)."""
    get_default_graph().add_to_collection(collection, qr)


def start_queue_runners(sess: Any = None, coord: Any = None, daemon: bool = True,
                        start: bool = True, collection: str = GraphKeys.QUEUE_RUNNERS
                        ) -> list[Any]:
    """Start every queue runner of ``sess``'s graph's ``collection``; returns
    their loops (asyncio tasks for an async session, threads for a
    ``SyncSession``). Call it from the coroutine that runs the session."""
    if sess is None:
        raise ValueError("start_queue_runners needs the session: start_queue_runners(sess=sess)")
    graph = getattr(sess, "graph", None) or get_default_graph()
    runners = graph.get_collection(collection)
    for qr in runners:   # every vectorized op built before any loop runs a step of the graph
        qr.loop_ops()
    loops: list[Any] = []
    for qr in runners:
        loops.extend(qr.create_threads(sess, coord=coord, daemon=daemon, start=start))
    return loops
