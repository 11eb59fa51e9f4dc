"""Servers: one per task, each an actor system hosting a master and a worker.

``ServerCore`` is the async heart, running on whatever loop starts it;
``serve(...)`` exposes it as an async context manager on the caller's loop.
``Server`` is TensorFlow's blocking ``tf.train.Server``: it hosts its core on
a private loop thread, so ``Server(...)`` returns a live server to plain
scripts, and ``join()`` blocks like TF's.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import weakref
from typing import Any, AsyncIterator, Callable

from distrib.client.loop_thread import LoopThread
from distrib.client.session import SCHEME, ConfigProto, parse_target
from distrib.cluster.cluster_spec import ClusterSpec, task_string
from distrib.errors import InvalidArgumentError, UnavailableError
from distrib.framework import config
from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.doors import ChiefLeaseDoor, MembershipDoor
from distrib.runtime.chief.lease import ChiefLease
from distrib.runtime.chief.membership import Membership, MembershipService
from distrib.runtime.collective.doors import CollectiveDoor
from distrib.runtime.collective.engine import CollectiveEngine
from distrib.runtime.step.doors import MasterDoor, WorkerDoor
from distrib.runtime.step.master import MasterService
from distrib.runtime.step.worker import WorkerService
from distrib.server.bind_address import bind_error_reason, bind_override, choose_bind_host, fallback_host
from distrib.server.control import PreemptionNotices, ServerControl
from distrib.server.doors import ServerDoor
from kernels.cpu.jit_loader import set_intra_op_threads
from transports.shm import ARENA

logger = logging.getLogger(__name__)

EXIT_STOP_S = 5.0             # the exit hook's bound on stopping each server still running


def resolve_task(cluster: ClusterSpec, job_name: str | None,
                  task_index: int | None) -> tuple[str, int]:
    jobs = cluster.jobs
    if job_name is None:
        if len(jobs) != 1:
            raise ValueError(f"job_name must be given: the cluster has jobs {jobs}")
        job_name = jobs[0]
    if job_name not in jobs:
        raise ValueError(f"job {job_name!r} is not in the cluster (jobs: {jobs})")
    indices = cluster.task_indices(job_name)
    if task_index is None:
        if len(indices) != 1:
            raise ValueError(f"task_index must be given: job {job_name!r} has tasks {indices}")
        task_index = indices[0]
    if task_index not in indices:
        raise ValueError(f"task index {task_index} is not in job {job_name!r} "
                         f"(tasks: {indices})")
    return job_name, int(task_index)


def _dialed_host(host: str) -> str:
    """The host of this task's own address, as its actor system names itself."""
    return "127.0.0.1" if host in ("localhost", "") else host


def task_devices(gpu_options: Any = None, device_count: dict | None = None) -> list[dict[str, Any]]:
    """CPU:i for each logical CPU (dt.config; one by default, or ConfigProto's
    ``device_count["CPU"]``, as TF), and GPU:i for each CUDA device that
    CUDA_VISIBLE_DEVICES leaves visible, narrowed by
    ``gpu_options.visible_device_list`` (else by dt.config.set_visible_devices):
    see ``config.task_gpus``, and to at most ``device_count["GPU"]``. numba is
    imported only when a GPU may exist (a driver node or the simulator), so
    CPU-only hosts start fast."""
    counts = device_count or {}
    cpus = int(counts.get("CPU", 0)) or config.logical_cpu_count(freeze=False)
    devices = [{"name": f"CPU:{i}", "memory_bytes": 0,
                "description": "host CPU" if i == 0 else "logical CPU"} for i in range(cpus)]
    if counts.get("GPU") == 0:
        return devices   # TF: GPU 0 in device_count hides the GPUs (and never starts CUDA)
    gpus = config.task_gpus(getattr(gpu_options, "visible_device_list", ""))
    return devices + (gpus[:counts["GPU"]] if "GPU" in counts else gpus)


_intra_op_chosen = [False]


def _choose_intra_op_threads(config: Any) -> None:
    """The threads one kernel of this process may use: a server whose config
    names ``intra_op_parallelism_threads`` sets them; the first server
    otherwise sets the task's BLAS threads (``OMP_NUM_THREADS``, which the
    launcher sets per task), else the cores, as TF's 0 means. A later server
    with the default config leaves an earlier choice alone."""
    n = int(getattr(config, "intra_op_parallelism_threads", 0) or 0)
    if n <= 0:
        if _intra_op_chosen[0]:
            return
        env = os.environ.get("OMP_NUM_THREADS", "")
        n = int(env) if env.isdigit() and int(env) > 0 else (os.cpu_count() or 1)
    _intra_op_chosen[0] = True
    set_intra_op_threads(n)


class ServerCore:
    """A task's server on the current event loop.

    It listens where :mod:`distrib.server.bind_address` decides for its
    cluster address (``bind_address``, else ``DISTRIB_BIND_ADDRESS``, forces
    a host); the address it is known by stays the cluster's."""

    def __init__(self, server_or_cluster_def: Any, job_name: str | None = None,
                 task_index: int | None = None, config: ConfigProto | None = None, *,
                 bind_address: str | None = None) -> None:
        cluster = server_or_cluster_def
        if not isinstance(cluster, ClusterSpec):
            cluster = ClusterSpec(cluster)
        if not cluster:
            raise ValueError("the cluster is empty: give at least one job with one task")
        self.job_name, self.task_index = resolve_task(cluster, job_name, task_index)
        self.task = f"/job:{self.job_name}/task:{self.task_index}"
        self.config = config or ConfigProto()
        self._cluster_in = cluster
        self.cluster = cluster
        addr = cluster.task_address(self.job_name, self.task_index)
        host, _, port = addr.rpartition(":")
        self.host = host
        self._bind_override = bind_override(bind_address)
        self.system = ActorSystem(self.task, host=_dialed_host(host), port=int(port))
        self.started = False
        self.stopped = asyncio.Event()
        self._stop_requested: asyncio.Event | None = None
        self.on_stop_requested: Callable[[], None] | None = None
        self.preemption = PreemptionNotices()   # peers' termination notices (control.py)

    @property
    def target(self) -> str:
        return f"{SCHEME}{self.host}:{self.system.port}"

    async def start(self) -> ServerCore:
        if self.started:
            return self
        # listed first: a config naming GPUs this host lacks fails before anything listens
        devices = task_devices(getattr(self.config, "gpu_options", None),
                               getattr(self.config, "device_count", None))
        _choose_intra_op_threads(self.config)
        await self._listen()
        if self.system.port != int(self.cluster.task_address(self.job_name, self.task_index)
                                   .rpartition(":")[2]):
            # port 0 was asked for: the cluster now names the port actually taken
            d = self.cluster.as_dict()
            job = d[self.job_name]
            addr = f"{self.host}:{self.system.port}"
            if isinstance(job, dict):
                job[self.task_index] = addr
            else:
                job[self.task_index] = addr
            self.cluster = ClusterSpec(d)
        self.worker = WorkerService(self.system, self.task, devices)
        self.master = MasterService(self.system, self.cluster, self.job_name, self.task_index)
        self.system.spawn("worker", self.worker, WorkerDoor)
        self.worker.collectives = CollectiveEngine(self.system, self.task, self.cluster)
        self.system.spawn("collective", self.worker.collectives, CollectiveDoor)
        self.system.spawn("master", self.master, MasterDoor)
        self.system.spawn("server", ServerControl(self), ServerDoor)
        # the chief role's lease: asked on the arbiter task only (runtime/chief/lease.py)
        self.chief_lease = ChiefLease(self.task)
        self.system.spawn("chief_lease", self.chief_lease, ChiefLeaseDoor)
        # the cluster's membership at run time, as the source last told it (an elastic launch)
        self.membership = MembershipService(self.system, self.task, self.cluster)
        self.system.spawn("membership", self.membership, MembershipDoor)
        self.started = True
        self.started_at = time.monotonic()
        self._stop_requested = asyncio.Event()
        # debug, and not the CLI's wording: `python -m distrib.server` prints
        # its one ready line itself, which this would have doubled
        logger.debug("started %s at %s", self.task, self.system.address)
        return self

    async def _listen(self) -> None:
        """Start the actor system where the bind plan says; on "no such address
        here" retry on the wildcard address (bind_address.py says why)."""
        plan = await choose_bind_host(self.host, self._bind_override)
        self.system.bind_host = plan.host
        reason = plan.reason
        try:
            await self.system.start()
        except OSError as e:
            wildcard = fallback_host(plan, e)
            if wildcard is None:
                raise
            reason = f"cannot listen on {plan.host} ({bind_error_reason(e)})"
            self.system.bind_host = wildcard
            await self.system.start()
        if reason is None:
            return
        # asked for: information; chosen here because the cluster's host cannot be bound
        # or would not reach peers: a warning, as the cluster's DNS or hosts file may be off
        level = logging.INFO if not plan.fallback else logging.WARNING
        logger.log(level, "%s listens on %s, not on %s: %s; the cluster still knows it as %s:%d",
                   self.task, self.system.listening_on, self.host, reason, self.host,
                   self.system.port)

    async def stop(self) -> None:
        if self.stopped.is_set():
            return
        await self.system.shutdown()
        if self.started:
            # the variables die with the server; their shared memory goes back
            self.worker.variables.clear()
            ARENA.trim()
        self.stopped.set()

    async def wait_stop_requested(self) -> None:
        assert self._stop_requested is not None
        await self._stop_requested.wait()

    def note_stop_request(self) -> None:
        """A peer asked this task to stop (``request_stop``): wake whoever waits
        in ``wait_stop_requested`` and run ``on_stop_requested``."""
        if self._stop_requested is not None:
            self._stop_requested.set()
        if self.on_stop_requested is not None:
            self.on_stop_requested()


async def request_stop(target: str, timeout: float = 10.0) -> None:
    """Tell the server at ``target`` ('distrib://host:port' or 'host:port') that
    training is over: its ``join()`` returns and the CLI exits 0. This is how a
    chief worker releases the ps tasks, which otherwise serve forever."""
    async with client_systems().lease() as system:
        await ServerDoor.at(system, parse_target(target)).request_stop(timeout=timeout)


@contextlib.asynccontextmanager
async def serve(server_or_cluster_def: Any, job_name: str | None = None,
                task_index: int | None = None, config: ConfigProto | None = None
                ) -> AsyncIterator[ServerCore]:
    """``async with dt.serve(cluster, job_name=..., task_index=...) as server:``"""
    core = ServerCore(server_or_cluster_def, job_name, task_index, config)
    await core.start()
    try:
        yield core
    finally:
        await core.stop()


class Server:
    """``tf.train.Server``: a task's server on its own loop thread."""

    def __init__(self, server_or_cluster_def: Any, job_name: str | None = None,
                 task_index: int | None = None, protocol: str | None = None,
                 config: ConfigProto | None = None, start: bool = True) -> None:
        if protocol not in (None, "grpc", "distrib"):
            raise InvalidArgumentError(f"unsupported protocol {protocol!r}: distrib speaks its "
                                       "own protocol; leave protocol=None")
        self._core = ServerCore(server_or_cluster_def, job_name, task_index, config)
        self._loop: LoopThread | None = None
        self._stopped = threading.Event()
        self._stop_requested = threading.Event()
        self._lock = threading.Lock()
        if start:
            self.start()

    @classmethod
    def create_local_server(cls, config: ConfigProto | None = None, start: bool = True) -> Server:
        return cls({"local": ["localhost:0"]}, job_name="local", task_index=0,
                   config=config, start=start)

    @property
    def target(self) -> str:
        return self._core.target

    def accept_direct_calls(self) -> None:
        """Let the sessions of this process reach this server's master by
        direct calls on its loop, with no socket or encoding (the
        in-process actor path, ``distrib.runtime.actors.in_process``): the
        process's local server and a strategy's own server do. Calls between
        tasks keep the wire."""
        self._core.system.direct_callers = True

    def add_task(self, task: str, address: str) -> concurrent.futures.Future:
        """``task`` joined the cluster after this server started (an elastic
        launch; the coordinator tells its strategy's server): this server's
        master may place steps on it, at ``address``. It does not block: the
        master learns it on the server's loop, and the returned future settles
        then (``await asyncio.wrap_future(f)`` on a loop, ``f.result(timeout)``
        on a thread); a step placed there must wait for it."""
        if self._loop is None or self._stopped.is_set():
            raise InvalidArgumentError("this server is not running")
        master = self._core.master

        async def add() -> None:
            master.add_task(task, address)
        return asyncio.run_coroutine_threadsafe(add(), self._loop.loop)

    @property
    def server_def(self) -> dict[str, Any]:
        return {"cluster": self._core.cluster.as_dict(), "job_name": self._core.job_name,
                "task_index": self._core.task_index}

    @property
    def cluster(self) -> ClusterSpec:
        return self._core.cluster

    # -- the membership record and the collective group, as elastic training reads them --
    def membership_record(self, version: int | None = None) -> Membership | None:
        """The membership record this task holds (None outside an elastic launch,
        or before the first arrives); with ``version``, exactly that version's
        record if this task still keeps it (the last few). From any thread."""
        service = self._core.membership
        return service.record if version is None else service.at(version)

    def membership_records_after(self, version: int) -> list[Membership]:
        """The records this task keeps that are newer than ``version``, oldest
        first. From any thread."""
        kept = list(self._core.membership.history.items())   # (one copy: the loop adds)
        return [record for v, record in sorted(kept) if v > version]

    @property
    def membership_version(self) -> int:
        """The version of the record this task holds (0: none yet)."""
        return self._core.membership.version

    @property
    def membership_source(self) -> str | None:
        """Where the cluster's membership record is kept (ps 0's address), None
        when this task is the source or the cluster has none."""
        return self._core.membership.source

    @property
    def collective_leader(self) -> str:
        """The collective group leader's task (``/job:J/task:T``), TF's default
        ``collective_group_leader``: every group's members join there."""
        return self._core.worker.collectives.leader_task

    async def collective_joined(self, group_key: int, timeout: float = 5.0) -> list[str]:
        """The devices that joined collective group ``group_key`` on this task (the
        group leader's table; empty elsewhere), read on this server's loop where
        the table changes (``on_loop``'s errors and bound)."""
        leader = self._core.worker.collectives.leader
        return list(await self.on_loop(lambda: leader.joined(group_key), timeout))

    def expect_collective_tasks(self, group_keys: list[int] | tuple[int, ...],
                                tasks: list[str] | tuple[str, ...]) -> None:
        """The collective groups ``group_keys`` are made of ``tasks``
        (``/job:J/task:T``): one that waits for a task lost, or never started,
        fails naming it instead of waiting for ever."""
        self._core.worker.collectives.expect_tasks(group_keys, tasks)

    async def on_loop(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """``fn()`` run on this server's loop thread, awaited from another loop:
        for reading the state its actors change (the collective leader's table).
        UnavailableError once the server stopped, or when ``fn`` has not run
        within ``timeout`` s (a loop stopped meanwhile never runs it)."""
        if self._loop is None:
            raise InvalidArgumentError("this server is not started")
        if self._stopped.is_set():
            raise UnavailableError(f"{self._core.task}: this server was stopped")

        async def call() -> Any:
            return fn()
        future = asyncio.run_coroutine_threadsafe(call(), self._loop.loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError:
            future.cancel()
            raise UnavailableError(f"{self._core.task}: its server's loop did not run the call "
                                   f"within {timeout:g} s (stopped: {self.is_stopped})") from None

    def take_preemption_notice(self) -> tuple[int, str] | None:
        """The termination notice a peer sent this task, taken (a later call gets the
        next one): (the run every worker saves at, the task that got it); None: none
        came. From any thread."""
        return self._core.preemption.take()

    async def announce_preemption(self, tasks: list[tuple[str, int]], save_at: int,
                                  timeout: float = 10.0) -> None:
        """Tell ``tasks`` ((job, index) of this cluster) that the workers save at run
        ``save_at``, through this server's actor system, and wait for every
        acknowledgement: ``UnavailableError`` naming a task that did not answer."""
        if self._loop is None or self._stopped.is_set():
            raise UnavailableError(f"{self._core.task}: this server is not running")
        core = self._core

        async def tell(task: tuple[str, int]) -> None:
            door = ServerDoor.at(core.system, core.cluster.task_address(*task))
            await door.preemption_notice(save_at, core.task, timeout=timeout)

        async def tell_all() -> None:
            results = await asyncio.gather(*(tell(t) for t in tasks), return_exceptions=True)
            for task, result in zip(tasks, results):
                if isinstance(result, BaseException):
                    raise UnavailableError(f"{core.task}: could not tell "
                                           f"{task_string(*task)} of the "
                                           f"termination notice (save at run {save_at}): "
                                           f"{result}") from result
        future = asyncio.run_coroutine_threadsafe(tell_all(), self._loop.loop)
        await asyncio.wrap_future(future)

    @property
    def is_stopped(self) -> bool:
        """Whether ``stop()`` has run (a stopped server is not started again)."""
        return self._stopped.is_set()

    def start(self) -> None:
        with self._lock:
            if self._core.started:
                return
            if self._stopped.is_set():
                raise InvalidArgumentError("this server was stopped; create a new Server")
            self._loop = LoopThread(f"distrib-server {self._core.task}")
            try:
                self._loop.run(self._core.start())
                self._core.on_stop_requested = self._stop_requested.set
            except BaseException:
                self._loop.stop()
                self._loop = None
                raise
            self._pid = os.getpid()   # a forked child has the object, not the loop
            _running.add(self)

    def join(self, timeout: float | None = None) -> bool:
        """Block until the server stops, or a peer tells it that training is over
        (:func:`request_stop`), or ``timeout`` seconds pass; True if it stopped.
        A server told to stop shuts down before join returns."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopped.is_set():
            if self._stop_requested.is_set():
                self.stop()
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._stopped.wait(0.05 if left is None else min(0.05, left))
        return True

    def stop(self, timeout: float = 30.0) -> None:
        """Close its connections and listener, free its variables, end its loop
        thread; a later call does nothing. ``timeout`` bounds the shutdown."""
        with self._lock:
            _running.discard(self)
            if self._stopped.is_set():
                return
            if self._loop is not None:
                try:
                    self._loop.run(self._core.stop(), timeout=timeout)
                finally:
                    self._loop.stop()
            self._stopped.set()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Server({self._core.task} at {self.target})"


_running: weakref.WeakSet[Server] = weakref.WeakSet()


def stop_servers_at_exit() -> None:
    """At interpreter exit (the process runtime's exit hook), stop every server
    still running in this process (one
    a strategy started, say): its loop thread must not outlive the interpreter
    (``loop_thread``'s module doc says why: a SIGSEGV after the program's end)."""
    for server in list(_running):
        if server._pid != os.getpid():   # noqa: SLF001  (a forked child: not its server)
            continue
        try:
            server.stop(timeout=EXIT_STOP_S)
        except Exception as e:       # noqa: BLE001  (exit goes on; the loop hook still stops it)
            logger.warning("%s: stopping its server at exit failed: %s", server, e)
