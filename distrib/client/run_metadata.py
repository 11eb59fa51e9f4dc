"""TF's ``RunOptions`` and ``RunMetadata``: asking a step for its trace, and the trace.

``dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE)`` passed to ``run``
with a ``dt.RunMetadata`` makes the step record, on every task it touches,
each op's start and end (wall-clock microseconds; the thread it ran on), each
tensor sent to or received from another task with its bytes and peer, and
the time collective ops waited; the master gathers those records into
``run_metadata.step_stats``, one :class:`DeviceStepStats` per device of each
task ("/job:J/replica:0/task:T/device:CPU:0"). ``distrib.client.timeline``
turns them into a Chrome trace.

Plain dataclasses with TF's field names (``step_stats.dev_stats[i].node_stats``),
not protocol buffers: nothing else reads them. On the wire a trace travels as
lists of plain values (:func:`step_stats_from_wire`); a traced run's fetches
come back with the metadata record as one extra trailing value, which the
session takes off (:func:`split_traced`).

The trace levels differ in TF by what a device's tracer records; here every
level above ``NO_TRACE`` records the same full trace (there is no separate
hardware tracer to turn on). ``timeout_in_ms`` maps onto the
``operation_timeout_s`` run option, ``output_partition_graphs`` fills
``run_metadata.partition_graphs`` with each task's partition (its GraphDef
nodes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunOptions", "RunMetadata", "StepStats", "DeviceStepStats", "NodeExecStats",
           "PartitionGraph", "run_options_dict", "split_traced", "step_stats_from_wire",
           "function_tracing", "set_function_tracing", "FunctionTracing", "TRACE_OPTION",
           "PARTITION_GRAPHS_OPTION"]

# the run option (a key of the options dict a master gets) that asks for a trace
TRACE_OPTION = "trace_level"
PARTITION_GRAPHS_OPTION = "output_partition_graphs"


@dataclass
class RunOptions:
    """TF's ``tf.compat.v1.RunOptions``: what one ``run`` asks beyond its fetches."""

    NO_TRACE = 0
    SOFTWARE_TRACE = 1
    HARDWARE_TRACE = 2
    FULL_TRACE = 3

    trace_level: int = 0
    timeout_in_ms: int = 0              # 0: the session's operation_timeout_s
    output_partition_graphs: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.trace_level, bool) or self.trace_level not in (0, 1, 2, 3):
            raise ValueError(f"trace_level is one of RunOptions.NO_TRACE .. FULL_TRACE "
                             f"(0..3), not {self.trace_level!r}")
        if isinstance(self.timeout_in_ms, bool) or not isinstance(self.timeout_in_ms, int) \
                or self.timeout_in_ms < 0:
            raise ValueError(f"timeout_in_ms is an int >= 0, not {self.timeout_in_ms!r}")

    def as_dict(self) -> dict[str, Any]:
        """The run options a session sends its master (only those set)."""
        out: dict[str, Any] = {}
        if self.trace_level:
            out[TRACE_OPTION] = int(self.trace_level)
        if self.timeout_in_ms:
            out["operation_timeout_s"] = self.timeout_in_ms / 1000.0
        if self.output_partition_graphs:
            out[PARTITION_GRAPHS_OPTION] = True
        return out


@dataclass
class NodeExecStats:
    """One op's run on one device (TF's field names). Times: wall-clock
    microseconds; ``all_start_micros`` when the op was dispatched, the
    relative ones from there: ``op_start/op_end`` the kernel itself (on a
    pool thread they differ from the dispatch), ``all_end`` when the step saw
    it done. ``kind``: "op", "send", "recv" or "collective" (a collective's
    time is its wait for the other members); ``peer`` the task at the other
    end of a send or receive, ``tensor_key`` the rendezvous key that pairs
    them; ``output_bytes`` the bytes of its outputs (a send: those it sent)."""

    node_name: str
    timeline_label: str = ""
    all_start_micros: int = 0
    op_start_rel_micros: int = 0
    op_end_rel_micros: int = 0
    all_end_rel_micros: int = 0
    thread_id: int = 0
    output_bytes: int = 0
    kind: str = "op"
    peer: str = ""
    tensor_key: str = ""


@dataclass
class DeviceStepStats:
    """The ops one device ran in the step, and (a GPU device of a traced
    step) its counters: kernel launches, driver allocations, copies, syncs
    (``kernels.counters.StepCounters`` as a dict; the task's GPUs together
    when its partition used several)."""

    device: str
    node_stats: list[NodeExecStats] = field(default_factory=list)
    counters: dict[str, int] | None = None


@dataclass
class StepStats:
    dev_stats: list[DeviceStepStats] = field(default_factory=list)


@dataclass
class PartitionGraph:
    """One task's partition of the step: its GraphDef nodes."""

    task: str
    nodes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunMetadata:
    """TF's ``tf.compat.v1.RunMetadata``: filled by a traced ``run``."""

    step_stats: StepStats = field(default_factory=StepStats)
    partition_graphs: list[PartitionGraph] = field(default_factory=list)

    def clear(self) -> None:
        self.step_stats = StepStats()
        self.partition_graphs = []

    def fill(self, record: dict[str, Any]) -> None:
        """Take a master's metadata record (:func:`step_stats_from_wire`)."""
        self.step_stats = step_stats_from_wire(record.get("dev_stats") or [])
        self.partition_graphs = [PartitionGraph(str(p["task"]), list(p["nodes"]))
                                 for p in record.get("partition_graphs") or []]


def run_options_dict(options: Any) -> dict[str, Any] | None:
    """A run's options as the dict a master takes: a :class:`RunOptions`,
    the dict sessions took before it, or None."""
    if options is None or isinstance(options, dict):
        return options
    if isinstance(options, RunOptions):
        return options.as_dict()
    raise TypeError(f"options is a dt.RunOptions or a dict, not {type(options).__name__}")


def split_traced(values: list[Any], options: dict[str, Any] | None,
                 run_metadata: Any) -> list[Any]:
    """A traced run's fetches without the trailing metadata record, which
    goes into ``run_metadata``."""
    if not options or not (options.get(TRACE_OPTION) or options.get(PARTITION_GRAPHS_OPTION)):
        return values
    record = values[-1]
    if run_metadata is not None:
        run_metadata.fill(record)
    return values[:-1]


# one node's row on the wire, in this order (runtime/step/step_trace.py writes them)
_ROW = ("node_name", "timeline_label", "all_start_micros", "op_start_rel_micros",
        "op_end_rel_micros", "all_end_rel_micros", "thread_id", "output_bytes", "kind",
        "peer", "tensor_key")


def step_stats_from_wire(dev_stats: list[dict[str, Any]]) -> StepStats:
    """``[{"device", "node_stats": [row, ...], "counters"}]`` -> StepStats."""
    out = StepStats()
    for d in dev_stats:
        nodes = [NodeExecStats(**dict(zip(_ROW, row))) for row in d.get("node_stats") or []]
        counters = d.get("counters")
        out.dev_stats.append(DeviceStepStats(str(d["device"]), nodes,
                                             None if counters is None else dict(counters)))
    return out


class FunctionTracing:
    """While on (``dt.summary.trace_on``), every ``dt.function`` call runs
    traced; ``last`` is the newest such call's metadata."""

    def __init__(self) -> None:
        self.last: RunMetadata | None = None
        self.options = RunOptions(trace_level=RunOptions.FULL_TRACE).as_dict()

    def run_kwargs(self) -> dict[str, Any]:
        """``options`` and a fresh ``run_metadata`` for one call (kept as ``last``)."""
        self.last = RunMetadata()
        return {"options": self.options, "run_metadata": self.last}


# the tracing that dt.summary.trace_on set (None: off). Process-wide, as TF's
# trace context: a dt.function called from a script may run on the client's
# loop thread, which a context variable of the caller's would not reach.
_FUNCTION_TRACING: list[FunctionTracing | None] = [None]


def function_tracing() -> FunctionTracing | None:
    """The function tracing now on, if any (``dt.function`` asks at each call)."""
    return _FUNCTION_TRACING[0]


def set_function_tracing(tracing: FunctionTracing | None) -> None:
    """Turn function tracing on (a :class:`FunctionTracing`) or off (None)."""
    _FUNCTION_TRACING[0] = tracing
