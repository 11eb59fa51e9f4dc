"""Sessions: the client's handle on a master service.

``Session`` is async first (``await sess.run(...)``, ``async with``); many
``run`` calls may be in flight at once on one session. ``SyncSession`` is its
blocking twin for scripts and the REPL: it drives the same async session on a
private event-loop thread.

The graph crosses the wire once per graph version: the session sends the
GraphDef when it opens and again only when the graph has changed since.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from distrib.client.channel import MasterChannel, open_local_channel, open_master_channel
from distrib.client.fetches import FetchPlan, feed_name
from distrib.client.graph_options import GraphOptions
from distrib.client.loop_thread import client_loop
from distrib.client.run_metadata import (
    PARTITION_GRAPHS_OPTION,
    TRACE_OPTION,
    RunMetadata,
    RunOptions,
    run_options_dict,
    split_traced,
)
from distrib.errors import InvalidArgumentError
from distrib.framework.config import parse_visible_device_list

logger = logging.getLogger(__name__)

SCHEME = "distrib://"
# TF's own spelling of a task's target (tf.Session("grpc://worker7.example.com:2222")):
# the same task at host:port; server.target stays distrib://
GRPC_SCHEME = "grpc://"


@dataclass
class GPUOptions:
    """TF's ``tf.GPUOptions``: the fields TF1 scripts set.

    ``visible_device_list`` ("1,0"): in a server's config
    (``dt.Server(..., config=dt.ConfigProto(gpu_options=...))``), which of the
    GPUs ``CUDA_VISIBLE_DEVICES`` leaves the server gets, in that order: its
    ``GPU:0`` is the first listed (TF's rule). As in TF the mapping is one per
    process, and a session's own ``gpu_options`` do not change the devices of
    the server it runs on (TF's remote sessions neither). Ignored on a machine
    without GPUs, as by a CPU-only TF.

    ``per_process_gpu_memory_fraction`` and ``allow_growth`` are accepted and
    recorded, nothing more: numba allocates device memory as tensors need it,
    which is what ``allow_growth=True`` asks of TF, and reserves no fraction up
    front.
    """

    per_process_gpu_memory_fraction: float = 0.0
    allow_growth: bool = False
    visible_device_list: str = ""

    def __post_init__(self) -> None:
        fraction = self.per_process_gpu_memory_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise TypeError(f"per_process_gpu_memory_fraction is a number, not {fraction!r}")
        if not isinstance(self.allow_growth, (bool, int)):
            raise TypeError(f"allow_growth is a bool, not {self.allow_growth!r}")
        parse_visible_device_list(self.visible_device_list)   # TypeError / InvalidArgumentError


@dataclass
class ConfigProto:
    """Session options (the subset of TF's ConfigProto that distrib honours),
    and ``gpu_options`` (:class:`GPUOptions`: a server's GPUs; for a session,
    recorded only, and not sent to the master)."""

    allow_soft_placement: bool = False
    operation_timeout_s: float | None = None
    log_device_placement: bool = False
    gpu_options: GPUOptions = field(default_factory=GPUOptions)
    # TF's {"CPU": n, "GPU": m}: a server made with this config has n CPU devices
    # (/cpu:0 .. /cpu:n-1, for in-graph towers) and at most m of its GPUs
    device_count: dict = field(default_factory=dict)
    # TF1 programs set these: a server of this config gives each kernel that many threads
    intra_op_parallelism_threads: int = 0
    inter_op_parallelism_threads: int = 0
    # the graph optimizer's passes (distrib.client.graph_options), sent to the master
    graph_options: GraphOptions = field(default_factory=GraphOptions)
    # TF's device filters: the devices (partial names, "/job:ps") a session may use
    device_filters: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.gpu_options, dict):
            self.gpu_options = GPUOptions(**self.gpu_options)
        if not isinstance(self.gpu_options, GPUOptions):
            raise TypeError(f"gpu_options is a dt.GPUOptions, not {self.gpu_options!r}")
        self.graph_options = GraphOptions.coerce(self.graph_options)
        if not isinstance(self.device_count, dict) or not all(
                isinstance(k, str) and k.upper() in ("CPU", "GPU") and isinstance(v, int)
                and not isinstance(v, bool) and v >= 0 for k, v in self.device_count.items()):
            raise TypeError(f"device_count maps 'CPU' and 'GPU' to counts >= 0, as TF's "
                            f"ConfigProto(device_count={{'CPU': 2, 'GPU': 0}}); got "
                            f"{self.device_count!r}")
        self.device_count = {k.upper(): v for k, v in self.device_count.items()}
        if isinstance(self.device_filters, str) or not all(
                isinstance(f, str) for f in self.device_filters):
            raise TypeError("device_filters is a list of device names, as TF's "
                            "ConfigProto(device_filters=['/job:ps', '/job:worker/task:0']); got "
                            f"{self.device_filters!r}")
        self.device_filters = list(self.device_filters)

    def as_dict(self) -> dict[str, Any]:
        """The options a session sends its master (its gpu_options stay here)."""
        d = asdict(self)
        del d["gpu_options"]
        return d


def parse_target(target: str) -> str:
    """'distrib://host:port', 'grpc://host:port' (TF's spelling of the same
    task) or 'host:port' -> 'host:port'; any other scheme is refused."""
    if not isinstance(target, str) or not target:
        raise InvalidArgumentError(f"bad session target {target!r}: use server.target, "
                                   "e.g. 'distrib://localhost:2222'")
    addr = target
    for scheme in (SCHEME, GRPC_SCHEME):
        if target.startswith(scheme):
            addr = target[len(scheme):]
            break
    if "://" in addr:
        raise InvalidArgumentError(f"unsupported session target {target!r}: a target is "
                                   "'distrib://host:port', 'grpc://host:port' (TF's spelling "
                                   "of the same task) or 'host:port'")
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidArgumentError(f"session target {target!r} has no port: write "
                                   "'distrib://host:port'")
    return addr


def _default_graph() -> Any:
    from distrib.framework.graph import get_default_graph
    return get_default_graph()


class Session:
    """An async session on ``target`` running ``graph`` (the default graph)."""

    def __init__(self, target: str = "", graph: Any = None, config: ConfigProto | None = None) -> None:
        self.target = target
        self.graph = graph if graph is not None else _default_graph()
        self.config = config or ConfigProto()
        # no target: TF's in-process session, on a server of the session's own
        self._address = parse_target(target) if target != "" else ""
        self._master: MasterChannel | None = None
        self._handle: str | None = None
        self._version: int | None = None
        self._lock: asyncio.Lock | None = None
        self._opening: asyncio.Future | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run (a closed session cannot run steps)."""
        return self._closed

    async def __aenter__(self) -> Session:
        await self._open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _open(self) -> None:
        if self._master is not None:
            return
        if self._closed:
            raise InvalidArgumentError("this session is closed: open a new one")
        # steps started together on a new session (queue runners) share one opening;
        # one that failed is forgotten, so the next step tries again
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open_channel())
        opening = self._opening
        try:
            await asyncio.shield(opening)
        finally:
            if opening.done() and (opening.cancelled() or opening.exception() is not None) \
                    and self._opening is opening:
                self._opening = None

    async def _open_channel(self) -> None:
        master = await (open_master_channel(self._address) if self._address
                        else open_local_channel(self.config))
        if self._closed:   # closed while it opened: the one opening closes what it opened
            await master.close()
            raise InvalidArgumentError("this session was closed while it opened: open a new one")
        self._master = master
        self._lock = asyncio.Lock()

    async def _sync_graph(self) -> None:
        version = self.graph.version
        if self._handle is not None and version == self._version:
            return
        assert self._lock is not None and self._master is not None
        async with self._lock:
            version = self.graph.version
            if self._handle is not None and version == self._version:
                return
            gd = self.graph.as_graph_def()
            if self._handle is None:
                self._handle = await self._master.create_session(
                    gd, self.config.as_dict(), timeout=120.0)
            else:
                await self._master.extend_session(self._handle, gd, timeout=120.0)
            self._version = version

    async def run(self, fetches: Any, feed_dict: dict | None = None,
                  options: RunOptions | dict[str, Any] | None = None,
                  run_metadata: RunMetadata | None = None) -> Any:
        """Run one step; returns ``fetches`` with numpy values in the same structure.
        ``options``: a ``dt.RunOptions`` (or a dict of run options);
        with a trace level, ``run_metadata`` gets the step's trace."""
        await self._open()
        plan = FetchPlan(fetches, self.graph)
        feeds = {feed_name(k, self.graph): v for k, v in (feed_dict or {}).items()}
        return await self._run_plan(plan, feeds, options, run_metadata)

    def make_callable(self, fetches: Any, feed_list: Any = None, accept_options: bool = False) -> Any:
        """TF1's ``Session.make_callable``: an async callable that runs ``fetches``
        with its positional arguments fed to ``feed_list``'s tensors, in order;
        the fetch structure and feed names are worked out once, here (a step
        run many times saves that per call). ``accept_options``: the callable
        also takes ``options=`` (run options, as ``run``'s)."""
        plan = FetchPlan(fetches, self.graph)
        names = [feed_name(k, self.graph) for k in (feed_list or [])]

        async def call(*values: Any, options: RunOptions | dict[str, Any] | None = None,
                       run_metadata: RunMetadata | None = None) -> Any:
            if len(values) != len(names):
                raise TypeError(f"this callable feeds {len(names)} tensors "
                                f"({', '.join(names) or 'none'}), got {len(values)} values")
            if (options is not None or run_metadata is not None) and not accept_options:
                raise TypeError("options= needs make_callable(..., accept_options=True)")
            await self._open()
            return await self._run_plan(plan, dict(zip(names, values)), options, run_metadata)
        return call

    async def _run_plan(self, plan: FetchPlan, feeds: dict[str, Any],
                        options: RunOptions | dict[str, Any] | None,
                        run_metadata: RunMetadata | None = None) -> Any:
        await self._sync_graph()
        assert self._master is not None
        options = run_options_dict(options)
        if run_metadata is not None:
            run_metadata.clear()
        elif options and (options.get(TRACE_OPTION) or options.get(PARTITION_GRAPHS_OPTION)):
            # a trace nobody would read is not recorded
            options = {k: v for k, v in options.items()
                       if k not in (TRACE_OPTION, PARTITION_GRAPHS_OPTION)}
        # the master bounds a step's calls by operation_timeout_s + 5 s; this
        # bound, a little longer so that the master's own error comes first,
        # covers a master that stopped answering
        limit = (options or {}).get("operation_timeout_s", self.config.operation_timeout_s)
        values = await self._master.run(self._handle, plan.tensors, plan.targets, feeds,
                                        options, timeout=None if limit is None else limit + 6.0)
        values = split_traced(values, options, run_metadata)
        return plan.build([_pythonic(v) for v in values])

    async def list_devices(self) -> list[DeviceAttributes]:
        await self._open()
        assert self._master is not None
        return [DeviceAttributes(d) for d in
                await self._master.list_devices(timeout=30.0)]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        master, self._master = self._master, None
        if master is None:
            return
        try:
            if self._handle is not None:
                await master.close_session(self._handle, timeout=5.0)
        except Exception as e:  # closing must not fail because the server is gone
            logger.debug("close_session failed: %s", e)
        finally:
            await master.close()


class DeviceAttributes(dict):
    """One device of ``list_devices()``: TF's attributes (``d.name``,
    ``d.device_type``, ``d.memory_limit_bytes``), and a dict of them too."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def _pythonic(v: Any) -> Any:
    """A fetched 0-d string comes back as a Python str, like TF's bytes scalar."""
    kind = getattr(getattr(v, "dtype", None), "kind", None)
    if kind in ("U", "S", "O") and getattr(v, "ndim", 1) == 0:
        return v.item()
    return v


class SyncSession:
    """The blocking twin of :class:`Session`."""

    def __init__(self, target: str = "", graph: Any = None, config: ConfigProto | None = None) -> None:
        self._loop = client_loop()
        self._session = Session(target, graph=graph, config=config)
        self.graph = self._session.graph

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run (a closed session cannot run steps)."""
        return self._session.closed

    def run(self, fetches: Any, feed_dict: dict | None = None,
            options: RunOptions | dict | None = None,
            run_metadata: RunMetadata | None = None) -> Any:
        return self._loop.run(self._session.run(fetches, feed_dict, options, run_metadata))

    def make_callable(self, fetches: Any, feed_list: Any = None, accept_options: bool = False) -> Any:
        """:meth:`Session.make_callable`, blocking: ``fn(*feed_values)``."""
        call = self._session.make_callable(fetches, feed_list, accept_options)
        return lambda *values, **kw: self._loop.run(call(*values, **kw))

    def list_devices(self) -> list[DeviceAttributes]:
        return self._loop.run(self._session.list_devices())

    def close(self) -> None:
        self._loop.run(self._session.close())

    def __enter__(self) -> SyncSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._session.closed and self._loop.loop.is_running():
                asyncio.run_coroutine_threadsafe(self._session.close(), self._loop.loop)
        except Exception:
            pass
