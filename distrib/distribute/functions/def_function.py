"""``dt.function``: TF2's ``tf.function`` on the graph runtime: trace once per
input signature, then run the traced graph per call (awaitable).

    @dt.function
    def step(x, y): ...             # builds ops (dt.*, strategy.run, tape.gradient ...)
    loss = await step(xb, yb)       # numpy in, numpy out

* **Tracing.** The first call with a new signature runs the Python body once
  with placeholders in place of the array arguments (their dtype and shape
  are the signature; a Python number or string is part of the signature by
  value and baked in as a constant, as TF does; a ``PerReplica`` argument,
  what a distributed dataset yields, becomes one placeholder per replica;
  an iterator is an input whose ``next`` reads at every call, keyed by its
  element spec; any other object is keyed by the object, never by ``id()``:
  ``inputs``).
  The ops go into the default graph, beside the variables the strategy's
  scope made, so no capture is needed: the traced function *is* a set of
  fetches and feeds of that graph.
* **Running.** Each call feeds the arrays and runs the fetches on the
  strategy's target (the scope open when the function was first called, or
  the strategy whose ``run`` it called), else, when its step reads or
  updates the variables of a strategy with a server of its own
  (ParameterServerStrategy), through any input, that server, else the
  default target (``local_target``), in one session
  per graph, target and event loop. Outputs come back in the function's structure, numpy values
  (``PerReplica`` of numpy where the function returned per-replica values).
* **Variables are initialized on first use**, as TF2's eager variables are:
  before a run, every global variable of the graph that this process has not
  initialized on that target yet starts from its initial value (the strategy
  decides how: a multi-worker strategy broadcasts the chief's values), even
  where the server holds a variable of that name from an earlier graph. TF1
  graphs run with a Session keep ``global_variables_initializer``.
* **Only the variables that live there**: a variable made under a strategy
  (``distribute_lib.variable_owner``) is initialized only by a function that
  runs on that strategy's target; one made outside every strategy, by the
  first function on any target. So a second strategy in the same process (a
  notebook, a test suite) never initializes the first one's variables, as in
  TF2 a variable belongs to its object: not on its own servers (the first's
  may be pinned to a ps task its cluster lacks) and not on a ps task both
  share (the first's trained values stay).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import weakref
from typing import Any, Callable

import numpy as np

from distrib.client.run_metadata import function_tracing
from distrib.client.session import Session
from distrib.distribute.core.distribute_lib import (
    get_strategy,
    owning_new_variables,
    strategies_used,
    variable_owner,
)
from distrib.distribute.core.values import DistributedValues, PerReplica
from distrib.distribute.functions import eager_sync
from distrib.distribute.functions.inputs import (
    IteratorReads,
    check_signature,
    leaves,
    placeholders,
    signature,
)
from distrib.distribute.functions.local_target import default_target, home_of
from distrib.eager.context import executing_eagerly, graph_mode
from distrib.eager.tensor import wrap as wrap_eager
from distrib.errors import OpError
from distrib.framework import auto_deps, distribution_context
from distrib.framework.graph import GraphKeys, Operation, Tensor, get_default_graph, name_scope
from distrib.framework.op_def import op_types
from distrib.summary.writer import capture as summary_writes

__all__ = ["function", "Function"]


def function(func: Callable[..., Any] | None = None, input_signature: Any = None,
             autograph: bool = True, jit_compile: Any = None, reduce_retracing: bool = False,
             experimental_relax_shapes: Any = None, **_ignored: Any) -> Any:
    """``@dt.function`` or ``dt.function(fn)``: see the module header."""
    def wrap(fn: Callable[..., Any]) -> Function:
        return Function(fn, input_signature=input_signature)
    return wrap if func is None else wrap(func)


class Function:
    """A traced Python function (``dt.function``'s result); ``await f(...)``."""

    def __init__(self, fn: Callable[..., Any], input_signature: Any = None) -> None:
        self._fn = fn
        self._input_signature = input_signature
        self._traces: dict[Any, _Trace] = {}
        self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        bound = self._bound.get(obj)
        if bound is None:
            bound = Function(functools.partial(self._fn, obj), self._input_signature)
            self._bound[obj] = bound
        return bound

    @property
    def python_function(self) -> Callable[..., Any]:
        return self._fn

    def experimental_get_tracing_count(self) -> int:
        return len(self._traces)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> _Trace:
        return self._trace_for(args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``await f(...)`` runs the traced graph; called while another function
        is being traced, ``f`` is inlined into it (its ops join that graph), as TF's are."""
        if auto_deps.tracing():
            return self._fn(*args, **kwargs)
        trace = self._trace_for(args, kwargs)
        if trace.agreement is None:   # eager on, called eagerly: EagerTensors back, as TF2's
            return trace.run(args, kwargs, executing_eagerly())
        return self._run_elastic(trace, args, kwargs)

    async def _run_elastic(self, trace: _Trace, args: tuple, kwargs: dict) -> Any:
        """An elastic strategy's step: a step that failed because a member died
        runs again, traced for the new group, once the strategy regrouped
        (``distrib.distribute.elastic.controller``); a step whose first use moved the
        strategy to a newer group is traced again before it runs. What
        follows a step that ran (its count, a regroup) is outside the retry:
        a failed regroup never runs the step again."""
        while True:
            try:
                if trace.agreement is None:
                    result, agreed = await trace.step(args, kwargs)
                else:
                    result, agreed = await trace.agreement.watched(trace.step(args, kwargs))
                break
            except _Retrace:
                pass
            except OpError as e:
                if trace.agreement is None or not await trace.agreement.recover(
                        e, await _session(trace.graph, trace.target())):
                    raise
            trace = self._trace_for(args, kwargs)
        if trace.agreement is not None:
            await trace.agreement.after_step(await _session(trace.graph, trace.target()), agreed)
        return result

    async def call_on(self, device: str, strategy: Any, args: tuple, kwargs: dict) -> Any:
        """Run on ``device`` (a coordinator's worker): traced once per device, under
        ``strategy``, its ops placed there unless they name a device themselves."""
        return await self._trace_for(args, kwargs, device, strategy).run(args, kwargs)

    def _trace_for(self, args: tuple, kwargs: dict, device: str | None = None,
                   strategy: Any = None) -> _Trace:
        graph = get_default_graph()
        strategy = strategy if strategy is not None else distribution_context.strategy()
        if self._input_signature is not None:
            check_signature(self._input_signature, args, kwargs)
            key: Any = (id(graph), id(strategy), device, "input_signature")
        else:
            key = (id(graph), id(strategy), device, signature((args, kwargs)))
        trace = self._traces.get(key)
        if trace is not None and trace.epoch != getattr(trace.strategy, "trace_epoch", None):
            trace = None   # traced under an elastic strategy's old group: trace anew
        if trace is None:
            trace = self._traces[key] = _Trace(self._fn, graph, strategy, args, kwargs,
                                               self._input_signature, device)
        return trace


class _Retrace(Exception):
    """An elastic step whose trace's group is no longer the strategy's."""


class _Trace:
    """One signature's graph: its feeds (placeholders) and fetches."""

    def __init__(self, fn: Callable[..., Any], graph: Any, strategy: Any, args: tuple,
                 kwargs: dict, input_signature: Any = None, device: str | None = None
                 ) -> None:
        self.graph = graph
        self.strategy = strategy
        self._signed = input_signature is not None
        self._placeholders: list[Tensor] = []
        self._reads = IteratorReads()   # the iterator arguments' next() in the body
        self._calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__",
                                                        "function")
        name = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).strip("_") or "function"   # '<lambda>'

        first_new = len(graph.get_operations())
        place = graph.device(device) if device is not None else contextlib.nullcontext()
        with graph_mode(), graph.as_default(), place, name_scope(name):   # a graph, eager or not
            if input_signature is not None:   # placeholders of the specs' (partial) shapes
                call_args = tuple(placeholders(spec, self._placeholders)
                                  for spec in input_signature)
                call_kwargs: dict = {}
            else:
                call_args, call_kwargs = placeholders((args, kwargs), self._placeholders,
                                                      self._reads)
            # summary_writes: what dt.summary writes through a writer at each call
            with strategies_used() as used, auto_deps.trace(), summary_writes() as self._summaries:
                if strategy is not None:
                    with distribution_context.enter(strategy,
                                                    distribution_context.replica_context()), \
                            owning_new_variables(strategy):
                        outputs = _as_fetchable(fn(*call_args, **call_kwargs))
                else:
                    outputs = _as_fetchable(fn(*call_args, **call_kwargs))
                # eager variables the body used: their twins' sync (eager_sync)
                self._eager = eager_sync.collect(graph, graph.get_operations()[first_new:])
        if self.strategy is None and used:
            self.strategy = used[0]   # called outside its scope: its strategy.run says where
        self._outputs = outputs
        # an elastic strategy's group (its epoch) and a step's membership agreement
        self.epoch = getattr(self.strategy, "trace_epoch", None)
        agree = getattr(self.strategy, "elastic_step", None) if self.strategy in used else None
        self.agreement = agree(graph) if agree is not None else None
        # (a variable's initializer runs once, on first use: not in the step)
        inits = {v.initializer for key in (GraphKeys.GLOBAL_VARIABLES, GraphKeys.LOCAL_VARIABLES)
                 for v in graph.get_collection(key)} | self._eager.initializers
        # reads and writes of each variable in the order the Python body made them
        auto_deps.order(graph.get_operations()[first_new:], inits)
        if self.agreement is not None:   # elastic: a step failed in any collective wrote nothing
            auto_deps.writes_after_collectives(graph.get_operations()[first_new:], inits)
        self._fetches, self._rebuild = _fetch_plan(outputs)
        # TF runs every stateful op a function made (its automatic control
        # dependencies): updates, collectives, queue ops run even when unfetched
        waited_on = {c for other in graph.get_operations() for c in other.control_inputs}
        self._effects = [op for op in graph.get_operations()[first_new:] if op not in inits
                         and (op.type in _EFFECT_OPS or (op.type == "NoOp" and op.control_inputs
                                                         and op not in waited_on))]
        # outside every strategy: where the variables the step reads or updates live
        # (those made before the trace too), when that is a strategy's own server (a
        # ParameterServerStrategy's), else the default target
        self._home = None if self.strategy is not None else home_of(
            graph, [*self._fetches, *self._effects, *self._summaries.fetches()])

    @property
    def structured_outputs(self) -> Any:
        return self._outputs

    @property
    def side_effect_ops(self) -> list[Operation]:
        """The ops each call runs beside the outputs, fetched or not (TF's
        automatic control dependencies): those of a type with side effects in
        the op catalogue, and the groups nothing waits on."""
        return list(self._effects)

    async def run(self, args: tuple, kwargs: dict, eager: bool = False) -> Any:
        """One call's result (``eager``: each array as an ``EagerTensor``)."""
        result, agreed = await self.step(args, kwargs)
        if self.agreement is not None:
            await self.agreement.after_step(await _session(self.graph, self.target()), agreed)
        return _eager_values(result) if eager else result

    async def step(self, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        """Run once: the result, and the agreed membership version (elastic; else None)."""
        agreement = self.agreement
        values: list[Any] = []
        given = (tuple(np.asarray(a) for a in args), kwargs) if self._signed else (args, kwargs)
        if agreement is None:
            self._feeds(given, values)
        session = await _session(self.graph, self.target())
        await _initialize_variables(session, self.graph, self.strategy)
        if not self._eager:   # (the graph path: no context manager per call)
            return await self._call(session, given, values)
        async with self._eager.exclusive(session):   # eager variables' push .. pull
            return await self._call(session, given, values)

    async def _call(self, session: Any, given: Any, values: list[Any]) -> tuple[Any, Any]:
        agreement = self.agreement
        if agreement is not None:   # read after first use: a newcomer's input moves to the group's
            if self.epoch != getattr(self.strategy, "trace_epoch", None):
                raise _Retrace()   # its first use joined a newer group than this trace's
            self._feeds(given, values)
        call = self._calls.get(session)   # fetches and feed names worked out once a session
        if call is None:
            fetches = [self._fetches, self._effects, self._summaries.fetches(), self._eager.reads]
            feeds = self._placeholders
            if agreement is not None:
                fetches, feeds = [*fetches, agreement.fetch], [*feeds, agreement.feed]
            call = self._calls[session] = session.make_callable(fetches, feeds, True)
        if agreement is not None:
            values.append(await agreement.value())
        tracing = function_tracing()   # dt.summary.trace_on: this call runs traced
        out = await (call(*values) if tracing is None else call(*values, **tracing.run_kwargs()))
        if self._summaries:
            self._summaries.write(out[2])
        if self._eager.written:
            self._eager.pull(session.target, out[3])
        return self._rebuild(out[0]), (out[4] if agreement is not None else None)

    def _feeds(self, given: Any, values: list[Any]) -> None:
        """The arrays of this call's arguments, then one element of the iterator
        arguments per read the body made (OutOfRangeError at their end)."""
        iterators: list[Any] = []
        leaves(given, values, iterators)
        self._reads.feed(iterators, values)

    def target(self) -> str:
        strategy = self.strategy
        if strategy is not None and getattr(strategy, "target", ""):
            return strategy.target
        if self._home is not None:
            return self._home.target
        return default_target()



# the ops with side effects (the op catalogue's has_side_effects: updates,
# resource ops, collectives; not the reads of a variable or a queue's size)
_EFFECT_OPS = op_types(lambda d: d.has_side_effects)



# -- outputs ----------------------------------------------------------------------------
def _as_fetchable(value: Any) -> Any:
    """``value`` with each variable returned as a read made now, in the trace (so
    it comes after the function's earlier writes, see auto_deps)."""
    if isinstance(value, (Tensor, Operation)) or value is None:
        return value
    if isinstance(value, DistributedValues) and not hasattr(value, "_component"):
        return type(value)([_as_fetchable(v) for v in value.values])
    if hasattr(value, "_as_graph_element"):
        return value._as_graph_element()  # noqa: SLF001 - TF's fetch hook (Graph.as_graph_element)
    if isinstance(value, tuple):
        items = [_as_fetchable(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_as_fetchable(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_fetchable(v) for k, v in value.items()}
    return value


def _fetch_plan(outputs: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The fetches of ``outputs`` and a function from their values to the result."""
    fetches: list[Any] = []

    def plan(value: Any) -> Callable[[list[Any]], Any]:
        if isinstance(value, DistributedValues):
            parts = [plan(v) for v in value.values]
            kind = PerReplica if not hasattr(value, "_component") else PerReplica
            return lambda vals: kind([p(vals) for p in parts])
        if isinstance(value, (Tensor, Operation)) or hasattr(value, "_as_graph_element"):
            i = len(fetches)
            fetches.append(value)
            return (lambda vals: None) if isinstance(value, Operation) else \
                (lambda vals: vals[i])
        if isinstance(value, tuple):
            parts = [plan(v) for v in value]
            if hasattr(value, "_fields"):
                return lambda vals: type(value)(*[p(vals) for p in parts])
            return lambda vals: tuple(p(vals) for p in parts)
        if isinstance(value, list):
            parts = [plan(v) for v in value]
            return lambda vals: [p(vals) for p in parts]
        if isinstance(value, dict):
            parts_d = {k: plan(v) for k, v in value.items()}
            return lambda vals: {k: p(vals) for k, p in parts_d.items()}
        return lambda vals: value   # None, or a Python value returned as is
    build = plan(outputs)
    return fetches, build


def _eager_values(value: Any) -> Any:
    """A call's result with each array an ``EagerTensor`` (TF2's ``tf.function`` called
    eagerly returns eager tensors); nests, None and Python values kept as they are."""
    if isinstance(value, (np.ndarray, np.generic)):
        return wrap_eager(np.asarray(value))
    if isinstance(value, tuple):
        items = [_eager_values(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_eager_values(v) for v in value]
    if isinstance(value, dict):
        return {k: _eager_values(v) for k, v in value.items()}
    return value


# -- sessions and first-use initialization -------------------------------------------------
_sessions: dict[Any, dict] = {}   # loop -> {key: Session}; a closed loop's are dropped
# graph -> {target: how many of its global variables this process initialized there};
# not per loop, so
# a second event loop (a test's) never initializes a variable again
_initialized: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_init_locks: dict[Any, dict] = {}   # loop -> {key: Lock}


async def _session(graph: Any, target: str) -> Session:
    loop = asyncio.get_running_loop()
    for old in [lp for lp in list(_sessions) if lp.is_closed()]:
        _sessions.pop(old, None)    # a finished asyncio.run: its sessions' sockets go with it
        _init_locks.pop(old, None)
    per_loop = _sessions.setdefault(loop, {})
    key = (id(graph), target)
    entry = per_loop.get(key)
    if entry is None or entry[0]() is not graph:
        session = Session(target, graph=graph)
        await session.__aenter__()
        entry = per_loop[key] = (weakref.ref(graph), session)
    return entry[1]


async def _initialize_variables(session: Session, graph: Any, strategy: Any) -> None:
    """Initialize the graph's variables that this process has not initialized on
    this target yet: a variable made for TF2-style code starts from its initial
    value, as an eager one does, even where a server holds one of that name."""
    # the collection only grows: what this target has seen is a prefix of it, so a
    # call checks one length instead of every variable
    variables = graph.get_collection_ref(GraphKeys.GLOBAL_VARIABLES)
    seen = _initialized.setdefault(graph, {})
    if seen.get(session.target, 0) == len(variables):
        return
    lock = _init_locks.setdefault(asyncio.get_running_loop(), {}).setdefault(
        (id(graph), session.target), asyncio.Lock())
    async with lock:   # steps started together (a coordinator's) initialize once
        start, end = seen.get(session.target, 0), len(variables)
        # one restored by a Saver already holds its values (resuming a job); one of a
        # strategy that runs elsewhere is not ours to touch (the module header). Both
        # answers are final, so the prefix stays the record of what was decided.
        homes: dict[int, str | None] = {}
        todo = [v for v in variables[start:end]
                if not getattr(v, "restored_from_checkpoint", False)
                and _lives_on(v, strategy, session.target, homes)]
        if todo:
            await _initialize(session, todo, strategy)
        seen[session.target] = end


def _lives_on(variable: Any, running: Any, target: str, homes: dict[int, str | None]) -> bool:
    """Whether ``variable`` is initialized by a function of strategy ``running``
    on ``target``: made outside every strategy, or under one whose steps run there."""
    strategy = variable_owner(variable)
    if strategy is None or strategy is running:
        return True
    if id(strategy) not in homes:
        try:
            homes[id(strategy)] = strategy.target
        except (ValueError, OpError):   # a strategy that runs no server (any more)
            homes[id(strategy)] = None
    return homes[id(strategy)] == target


async def _initialize(session: Session, fresh: list[Any], strategy: Any) -> None:
    initialize = getattr(strategy or get_strategy(), "initialize_variables", None)
    if initialize is not None:
        await initialize(session, fresh)
    else:
        await session.run([v.initializer for v in fresh])


session_for = _session   # the session a dt.function of ``graph`` runs in, on ``target``


async def close_sessions() -> None:
    """Close this loop's function sessions (tests; a program's end closes them anyway)."""
    per_loop = _sessions.pop(asyncio.get_running_loop(), {})
    for _, session in per_loop.values():
        await session.close()
