"""The dataflow graph: :class:`Graph`, :class:`Operation`, :class:`Tensor`.

A client builds a graph of operations, each with a type, input tensors,
attributes and a requested device; the runtime ships it as a GraphDef (see
``docs/ops.md`` and :mod:`distrib.framework.graph_def`). Two principles, both from TF1:

* Building state that is *lexical* (name scope, device stack, colocation,
  control dependencies) lives per thread, so replica functions that build in
  parallel threads (mirrored strategies) do not see each other's scopes
  (:mod:`distrib.framework.building_state` holds it, and the default-graph
  stack). The graph itself (ops, names, collections) is shared and locked.
* Every structural change bumps ``graph.version``, so a session sends the
  graph again exactly when it changed.

Op builders live in :mod:`distrib.ops`; this module only knows how to add an
op with given outputs. ``Operation`` and ``Tensor`` live in
:mod:`distrib.framework.operation` and are re-exported here.
"""
from __future__ import annotations

import contextlib
import contextvars
import re
import threading
from typing import Any, Callable, Iterator, Sequence

from distrib.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from distrib.framework import dtypes
from distrib.framework.building_state import BuildingState, default_graphs
from distrib.framework.operation import DTYPE_ATTRS, NodeDef, Operation, OutputSpec, Tensor, TensorOperators
from distrib.framework.tensor_shape import as_shape

__all__ = [
    "Graph", "Operation", "Tensor", "NodeDef", "GraphKeys", "get_default_graph",
    "reset_default_graph", "name_scope", "device", "control_dependencies",
    "colocate_with", "add_to_collection", "add_to_collections", "get_collection",
    "get_collection_ref", "DTYPE_ATTRS", "OutputSpec", "TensorOperators",
]

_OP_NAME_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\\/>\-]*$")
_SCOPE_NAME_RE = re.compile(r"^[A-Za-z0-9_.\\/>\-]*$")



class GraphKeys:
    """Standard collection names (TF1 ``tf.GraphKeys``)."""

    GLOBAL_VARIABLES = "variables"
    LOCAL_VARIABLES = "local_variables"
    MODEL_VARIABLES = "model_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    GLOBAL_STEP = "global_step"
    TRAIN_OP = "train_op"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    SUMMARIES = "summaries"
    SAVERS = "savers"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    READY_OP = "ready_op"
    READY_FOR_LOCAL_INIT_OP = "ready_for_local_init_op"
    QUEUE_RUNNERS = "queue_runners"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    VARIABLES = GLOBAL_VARIABLES


class Graph:
    """A dataflow graph. Use :meth:`as_default` to make it the target of op builders."""

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._by_name: dict[str, Operation] = {}
        self._names_in_use: dict[str, int] = {}
        self._collections: dict[str, list[Any]] = {}
        self._version = 0
        self._finalized = False
        self._lock = threading.RLock()
        self._local = BuildingState()   # per thread (building_state.py)
        self.seed: int | None = None

    # -- bookkeeping --------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    @property
    def finalized(self) -> bool:
        return self._finalized

    def finalize(self) -> None:
        """Make the graph read-only: adding ops or collection items then raises RuntimeError."""
        self._finalized = True

    def _unsafe_unfinalize(self) -> None:
        self._finalized = False

    def _check_not_finalized(self) -> None:
        if self._finalized:
            raise RuntimeError("Graph is finalized and cannot be modified (a Supervisor or "
                               "MonitoredSession finalized it: build every op before that)")

    def bump_version(self) -> None:
        """Count one change: an op added, or an op's device, attr or control inputs
        changed (a Session sends a graph again when its version moved)."""
        self._version += 1

    def adopt_version(self, version: int) -> None:
        """Take the version a GraphDef carried (``graph_from_def``: a graph read back
        is at the version it was written at, not at its count of imported ops)."""
        self._version = int(version)

    def get_operations(self) -> list[Operation]:
        return list(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        default_graphs().append(self)
        try:
            yield self
        finally:
            default_graphs().pop()

    # -- names ------------------------------------------------------------------
    def get_name_scope(self) -> str:
        return self._local.name_stack

    def unique_name(self, name: str, mark_as_used: bool = True) -> str:
        """``name`` under the current scope, suffixed ``_1``, ``_2``... if taken (TF rules)."""
        if self._local.name_stack:
            name = self._local.name_stack + "/" + name
        if mark_as_used and (DATASET_FUNCTION.get() or (_eager_runner and self._eager_now())):
            mark_as_used = False   # eager ops keep no names: a long eager loop must not grow this
        with self._lock:
            key = name.lower()
            i = self._names_in_use.get(key, 0)
            if mark_as_used:
                self._names_in_use[key] = i + 1
            if i == 0:
                return name
            base = key
            while key in self._names_in_use:
                key = f"{base}_{i}"
                i += 1
            if mark_as_used:
                self._names_in_use[key] = 1
            return f"{name}_{i - 1}"

    @contextlib.contextmanager
    def name_scope(self, name: str | None) -> Iterator[str]:
        """Nested scope ``outer/name/``; ``"abs/"`` is used as is; None or "" resets to root."""
        if name:
            pattern = _SCOPE_NAME_RE if self._local.name_stack else _OP_NAME_RE
            if not pattern.match(name):
                raise InvalidArgumentError(f"{name!r} is not a valid scope name; use letters, "
                                           "digits and . _ - / (not starting with _ or -)")
        old = self._local.name_stack
        if not name:
            new, returned = "", ""
        elif name.endswith("/"):
            new, returned = name[:-1], name
        else:
            new = self.unique_name(name)
            returned = new + "/"
        self._local.name_stack = new
        try:
            yield returned
        finally:
            self._local.name_stack = old

    # -- devices, colocation and control dependencies (building_state.py) -------
    def building_state(self) -> tuple:
        """This thread's lexical state (name scope, device, colocation and control
        scopes), for another thread that builds on its behalf (a strategy's replica)."""
        return self._local.snapshot()

    def adopt_building_state(self, state: tuple) -> None:
        """Make ``state`` (from :meth:`building_state`) this thread's."""
        self._local.adopt(state)

    def device(self, device_name_or_function: Any) -> contextlib.AbstractContextManager:
        """Request a device for ops built inside: a string, DeviceSpec, function or None.

        Inner scopes override outer ones field by field; ``None`` ignores all outer
        scopes; a function gets the Operation (with the device set so far) and
        returns a device string.
        """
        return self._local.device(device_name_or_function)

    def colocate_with(self, op: Any, ignore_existing: bool = False
                      ) -> contextlib.AbstractContextManager:
        """Place ops built inside on ``op``'s device; outer device scopes are ignored (TF)."""
        if self._eager_now():   # an eager op runs where its inputs are: nothing to place
            return contextlib.nullcontext()
        target = None if op is None else _as_operation(op)
        return self._local.colocate_with(target, ignore_existing)

    def colocate_built_ops(self, ops: Sequence[Operation], target: Operation) -> None:
        """Place ``ops``, already built, on ``target``'s device (TF colocates a variable's
        initializer, built before the variable, with it: a table is made on its ps)."""
        for op in ops:
            op._colocation_op = target  # noqa: SLF001 - the graph fills its ops' fields
            op._device = target.device  # noqa: SLF001 - (see BuildingState.place)

    def control_dependencies(self, control_inputs: Sequence[Any] | None
                             ) -> contextlib.AbstractContextManager:
        """Ops built inside run after ``control_inputs`` (ops, tensors, variables); None clears."""
        if self._eager_now():   # eager ops run in program order already (TF2's)
            return contextlib.nullcontext()
        entry = None if control_inputs is None else [
            _as_operation(self.as_graph_element(c)) for c in control_inputs]
        return self._local.control_dependencies(entry)

    # -- op creation -------------------------------------------------------------
    def _eager_now(self) -> bool:
        """Whether this graph's ops run at once now (the process-wide graph, eager on)."""
        return bool(_eager_runner) and self is _global_graph and _eager_runner[0].active()

    def create_op(self, op_type: str, inputs: Sequence[Tensor] = (), attrs: dict | None = None,
                  name: str | None = None, *, output_specs: Sequence[OutputSpec] | None = None,
                  infer: Callable[[str, list[Tensor], dict], Sequence[OutputSpec]] | None = None,
                  device: str | None = None, control_inputs: Sequence[Operation] = (),
                  ) -> Operation:
        """Add an op. ``name`` is uniquified under the scope unless it ends with ``/``.

        Outputs come from ``output_specs`` or from ``infer(name, inputs, attrs)``,
        which may raise a shape/dtype error naming the (final) op name. Attr values
        that are DTypes are stored by name (the GraphDef form). ``device`` and
        ``control_inputs`` (a GraphDef's import) are taken as they are: the device
        replaces the scopes' choice, the control inputs follow the scopes' ones.
        """
        if DATASET_FUNCTION.get() and _dataset_runner and \
                not any(isinstance(t, Tensor) for t in inputs):
            # a dt.data map's function on values (distrib.ops.value_mode): the op runs now
            return _dataset_runner[0].run(op_type, inputs, attrs, name, output_specs, device)
        if _eager_runner and self._eager_now():
            if not any(isinstance(t, Tensor) for t in inputs):
                # eager values (distrib.eager): the op runs now and is not added
                return _eager_runner[0].run(op_type, inputs, attrs, name, output_specs, device)
            # an op on a graph tensor (keras.Input's) stays symbolic, as TF2's KerasTensors
            return _eager_runner[0].symbolic(self, op_type, inputs, attrs, name,
                                             output_specs=output_specs, infer=infer,
                                             device=device, control_inputs=control_inputs)
        self._check_not_finalized()
        inputs = list(inputs)
        for t in inputs:
            self._check_own(t, op_type)
        attrs = {k: (v.name if isinstance(v, dtypes.DType) else v) for k, v in (attrs or {}).items()}
        full = self._op_name(name or op_type)
        specs = infer(full, inputs, attrs) if infer is not None else (output_specs or ())
        op = Operation(self, op_type, full, inputs, attrs,
                       [(dtypes.as_dtype(d), as_shape(s)) for d, s in specs])
        input_ops = {t.op for t in inputs}
        controls = [c for c in self._local.control_inputs() if c not in input_ops]
        if control_inputs:
            controls.extend(control_inputs)
        # the graph fills in the fields of the op it is building (BuildingState.place)
        op._control_inputs = controls  # noqa: SLF001 - see BuildingState.place
        self._local.place(op)
        if device is not None:
            op._device = device  # noqa: SLF001 - see BuildingState.place
        self._add(op)
        return op

    def _op_name(self, name: str) -> str:
        if name.endswith("/"):
            name = name[:-1]
        else:
            if not _OP_NAME_RE.match(name):
                raise InvalidArgumentError(f"{name!r} is not a valid op name; use letters, digits "
                                           "and . _ - / (starting with a letter, digit or .)")
            name = self.unique_name(name)
        if name in self._by_name:
            raise InvalidArgumentError(f"duplicate op name {name!r} in the graph")
        return name

    def _add(self, op: Operation) -> None:
        with self._lock:
            if op.name in self._by_name:
                raise InvalidArgumentError(f"duplicate op name {op.name!r} in the graph")
            self._names_in_use.setdefault(op.name.lower(), 1)
            self._ops.append(op)
            self._by_name[op.name] = op
            self.bump_version()

    def _check_own(self, t: Any, op_type: str) -> None:
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"input to {op_type} must be a dt.Tensor, got {t!r}; "
                                       "convert values with dt.convert_to_tensor")
        if t.graph is not self:
            raise InvalidArgumentError(f"tensor {t.name} input to {op_type} belongs to another "
                                       "graph; build all ops of a step in one dt.Graph")

    # -- lookup ---------------------------------------------------------------------
    def get_operation_by_name(self, name: str) -> Operation:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"operation names are strings, got {name!r}")
        if ":" in name:
            raise InvalidArgumentError(f"{name!r} looks like a tensor name; operation names have "
                                       "no ':N' suffix (use get_tensor_by_name)")
        op = self._by_name.get(name)
        if op is None:
            raise NotFoundError(f"the operation {name!r} does not exist in the graph")
        return op

    def get_tensor_by_name(self, name: str) -> Tensor:
        if not isinstance(name, str) or ":" not in name:
            raise InvalidArgumentError(f"{name!r} is not a tensor name; tensor names look like "
                                       "'op_name:0' (use get_operation_by_name for ops)")
        op_name, _, index = name.rpartition(":")
        op = self._by_name.get(op_name)
        if op is None:
            raise NotFoundError(f"the tensor {name!r} does not exist: the operation {op_name!r} "
                                "is not in the graph")
        if not index.isdigit() or int(index) >= len(op.outputs):
            raise NotFoundError(f"the tensor {name!r} does not exist: operation {op_name!r} has "
                                f"{len(op.outputs)} output(s)")
        return op.outputs[int(index)]

    def as_graph_element(self, obj: Any, allow_tensor: bool = True,
                         allow_operation: bool = True) -> Tensor | Operation:
        """Resolve a fetch: a Tensor, Operation, name, or object with ``_as_graph_element``."""
        if hasattr(obj, "_as_graph_element") and not isinstance(obj, (Tensor, Operation)):
            # TF's fetch hook, private by design: any object (a Variable, a mirrored one)
            # converts itself, and no public attribute of an unrelated object is taken for it
            obj = obj._as_graph_element()  # noqa: SLF001 - TF's hook, see above
        if isinstance(obj, str):
            obj = self.get_tensor_by_name(obj) if ":" in obj else self.get_operation_by_name(obj)
        if isinstance(obj, (Tensor, Operation)):
            if obj.graph is not self:
                raise InvalidArgumentError(f"{obj!r} is not an element of this graph")
            if isinstance(obj, Tensor) and not allow_tensor:
                raise InvalidArgumentError(f"{obj.name} is a tensor; an operation is needed here")
            if isinstance(obj, Operation) and not allow_operation:
                raise InvalidArgumentError(f"{obj.name} is an operation; a tensor is needed here")
            return obj
        raise InvalidArgumentError(f"cannot interpret {obj!r} as a graph element: use a "
                                   "dt.Tensor, dt.Operation, Variable, or their name")

    # -- collections -----------------------------------------------------------
    def add_to_collection(self, name: str, value: Any) -> None:
        self._check_not_finalized()
        with self._lock:
            self._collections.setdefault(name, []).append(value)

    def add_to_collections(self, names: Any, value: Any) -> None:
        names = (names,) if isinstance(names, str) else set(names)
        for name in names:
            self.add_to_collection(name, value)

    def get_collection_ref(self, name: str) -> list[Any]:
        with self._lock:
            return self._collections.setdefault(name, [])

    def get_collection(self, name: str, scope: str | None = None) -> list[Any]:
        """A copy of the collection; with ``scope``, items whose name matches it (re.match)."""
        items = list(self._collections.get(name, ()))
        if scope is None:
            return items
        pattern = re.compile(scope)
        return [i for i in items if hasattr(i, "name") and pattern.match(i.name)]

    def get_all_collection_keys(self) -> list[str]:
        return [k for k, v in self._collections.items() if v]

    def clear_collection(self, name: str) -> None:
        self._check_not_finalized()
        self._collections.pop(name, None)

    # -- GraphDef -------------------------------------------------------------------
    def as_graph_def(self) -> dict[str, Any]:
        """The msgpack-encodable GraphDef of docs/ops.md (read back by
        :func:`distrib.framework.graph_def.graph_from_def`)."""
        return {"version": self.version, "nodes": [op.to_wire() for op in self.get_operations()]}


def _as_operation(obj: Any) -> Operation:
    if hasattr(obj, "_as_graph_element") and not isinstance(obj, (Tensor, Operation)):
        obj = obj._as_graph_element()  # noqa: SLF001 - TF's fetch hook (Graph.as_graph_element)
    if isinstance(obj, Tensor):
        return obj.op
    if isinstance(obj, Operation):
        return obj
    if hasattr(obj, "op") and isinstance(obj.op, Operation):
        return obj.op
    raise InvalidArgumentError(f"expected an Operation or Tensor, got {obj!r}")


# -- the default graph ---------------------------------------------------------------
_global_graph: Graph | None = None
_global_lock = threading.Lock()
# the eager runner (distrib.eager.execute), once dt.enable_eager_execution() ran: the
# process-wide default graph's ops run at once while it says it is active
_eager_runner: list[Any] = []


# a dt.data dataset function is running in this context (distrib.ops.value_mode): an
# op built there on values (no graph tensor among its inputs) runs at once through
# _dataset_runner (an eager runner of its own, installed by value_mode), eager on or not
DATASET_FUNCTION: contextvars.ContextVar[bool] = contextvars.ContextVar("dt_dataset_function",
                                                                         default=False)
_dataset_runner: list[Any] = []


def set_dataset_runner(runner: Any) -> None:
    """The runner of the ops a dataset function builds on values (see DATASET_FUNCTION)."""
    _dataset_runner[:] = [runner] if runner is not None else []


def has_dataset_runner() -> bool:
    """Whether :func:`set_dataset_runner` installed one."""
    return bool(_dataset_runner)


def set_eager_runner(runner: Any) -> None:
    """Run the ops built on the process-wide default graph through ``runner``
    (``runner.active()``: now; ``runner.run(...)``: the op's outputs) instead
    of adding them (TF's eager context); set by ``dt.enable_eager_execution``."""
    _eager_runner[:] = [runner] if runner is not None else []


def is_process_graph(graph: Any) -> bool:
    """Whether ``graph`` is the process-wide default graph (no ``as_default`` one)."""
    return graph is _global_graph


def get_default_graph() -> Graph:
    """The innermost ``as_default`` graph of this thread, else the process-wide one."""
    global _global_graph
    stack = default_graphs()
    if stack:
        return stack[-1]
    with _global_lock:
        if _global_graph is None:
            _global_graph = Graph()
        return _global_graph


def reset_default_graph() -> None:
    """Replace the process-wide default graph with an empty one (not inside as_default)."""
    global _global_graph
    if default_graphs():
        raise FailedPreconditionError(
            "reset_default_graph() cannot be used inside a `with graph.as_default()` block; "
            "leave the block first, or build into a new dt.Graph()")
    with _global_lock:
        _global_graph = Graph()


def _graph_of(values: Any) -> Graph:
    for v in values or ():
        g = getattr(v, "graph", None)
        if isinstance(g, Graph):
            return g
    return get_default_graph()


@contextlib.contextmanager
def name_scope(name: str | None, default_name: str | None = None,
               values: Sequence[Any] | None = None) -> Iterator[str]:
    """``dt.name_scope(name, default_name=None, values=None)`` on the graph of ``values``."""
    g = _graph_of(values)
    scope = name if name is not None else default_name
    with g.as_default(), g.name_scope(scope) as full:
        yield full


def device(device_name_or_function: Any) -> contextlib.AbstractContextManager:
    return get_default_graph().device(device_name_or_function)


def control_dependencies(control_inputs: Sequence[Any] | None) -> contextlib.AbstractContextManager:
    return get_default_graph().control_dependencies(control_inputs)


def colocate_with(op: Any, ignore_existing: bool = False) -> contextlib.AbstractContextManager:
    return get_default_graph().colocate_with(op, ignore_existing)


def add_to_collection(name: str, value: Any) -> None:
    get_default_graph().add_to_collection(name, value)


def add_to_collections(names: Any, value: Any) -> None:
    get_default_graph().add_to_collections(names, value)


def get_collection(name: str, scope: str | None = None) -> list[Any]:
    return get_default_graph().get_collection(name, scope)


def get_collection_ref(name: str) -> list[Any]:
    return get_default_graph().get_collection_ref(name)
