"""``dt.train.Optimizer``: what every TF1 optimizer shares (the update rules are
in ``gradient_descent.py``, ``momentum.py``, ``adagrad.py``, ``adam.py``, ``rmsprop.py``).

An optimizer builds graph ops; it never runs anything. ``minimize`` is
``compute_gradients`` (``dt.gradients`` of the loss with respect to the
variables) followed by ``apply_gradients``, which adds one stateful update op
per variable (``ApplyGradientDescent``, ``ApplyMomentum``, ``ApplyAdagrad``,
``ApplyAdam``; see docs/ops.md) and groups them. Two principles:

* **Every update runs where its variable lives.** The update op, its slot
  variables (``accum``, ``m``, ``v``) and the constants it reads are built
  under ``colocate_with(var)``, so with ``replica_device_setter`` the math runs
  on the ps task that owns the storage and only the gradient crosses the
  network.
* **TF1's graph, names and rules.** Slots are non-trainable global variables
  named ``<var>/Momentum``, ``<var>/Adam``, ``<var>/Adam_1``...; Adam's
  ``beta1_power``/``beta2_power`` live beside the first variable (by name) and
  are advanced after all the updates; with a ``global_step`` the returned
  train op is its ``AssignAdd``, run after the updates.

One deliberate improvement over TF1: a Python-number hyper-parameter becomes a
constant of each variable's own dtype (TF makes a float32 constant and casts
it), so float64 variables are updated with float64 hyper-parameters.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import distribution_context
from distrib.framework.graph import GraphKeys, Operation, Tensor, get_default_graph
from distrib.ops import array_gather
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable, trainable_variables
from distrib.train.checkpoints import trackable

logger = logging.getLogger(__name__)

__all__ = ["Optimizer", "OptimizerArgumentError", "checked_pairs", "gradient_tensor",
           "sparse_gradient", "deduplicate"]

GradsAndVars = list[tuple[Any, Variable]]


class OptimizerArgumentError(InvalidArgumentError, ValueError):
    """A bad argument to an optimizer. It is also a ``ValueError``, which is what TF1 raises,
    so ported ``except ValueError`` code keeps working."""


def _resolve(var: Any) -> Any:
    """A distributed variable (or the first copy of one, as the trainable
    collection holds it) as the copy of the replica being built."""
    container = getattr(var, "distributed_container", None)
    if container is not None and _replica_index() is not None:
        var = container
    component = getattr(var, "_component", None)
    return component() if component is not None else var


def _check_variable(var: Any) -> Variable:
    var = _resolve(var)
    if not isinstance(var, Variable):
        raise OptimizerArgumentError(
            f"{var!r} is not a dt.Variable; optimizers update variables only (pass var_list=[...] "
            "of dt.Variable objects)")
    return var


class Optimizer:
    """Base class of optimizers (TF1 ``tf.train.Optimizer``).

    Subclasses implement ``_create_slots(var_list)``, ``_apply_dense(grad, var)``
    and optionally ``_finish(update_ops, name)``.
    """

    GATE_NONE = 0
    GATE_OP = 1
    GATE_GRAPH = 2

    def __init__(self, use_locking: bool, name: str) -> None:
        if not name:
            raise OptimizerArgumentError("an optimizer needs a non-empty name")
        self._use_locking = bool(use_locking)
        self._name = name
        # slot name -> {variable's op -> slot Variable}
        self._slots: dict[str, dict[Operation, Variable]] = {}
        # (name, graph) -> Variable, e.g. Adam's beta1_power
        self._non_slot_dict: dict[tuple[str, Any], Variable] = {}

    def get_name(self) -> str:
        return self._name

    # -- the public TF1 API -------------------------------------------------------
    def minimize(self, loss: Any, global_step: Any = None, var_list: Sequence[Variable] | None = None,
                 gate_gradients: int = GATE_OP, aggregation_method: Any = None,
                 colocate_gradients_with_ops: bool = False, name: str | None = None,
                 grad_loss: Any = None) -> Operation:
        """``compute_gradients`` then ``apply_gradients``; returns the train op."""
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        if not [v for g, v in grads_and_vars if g is not None]:
            raise OptimizerArgumentError(
                "No gradients provided for any variable, check your graph for ops that do not "
                f"support gradients, between variables {[v.name for _, v in grads_and_vars]} "
                f"and loss {getattr(loss, 'name', loss)!r}")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(self, loss: Any, var_list: Sequence[Variable] | None = None,
                          gate_gradients: int = GATE_OP, aggregation_method: Any = None,
                          colocate_gradients_with_ops: bool = False,
                          grad_loss: Any = None) -> GradsAndVars:
        """``[(gradient or None, variable)]`` of ``loss`` for ``var_list`` (trainable variables).

        As in TF, a variable the loss does not depend on keeps a ``None`` gradient.
        """
        if gate_gradients not in (self.GATE_NONE, self.GATE_OP, self.GATE_GRAPH):
            raise OptimizerArgumentError(
                f"gate_gradients must be one of Optimizer.GATE_NONE, GATE_OP or GATE_GRAPH, "
                f"got {gate_gradients!r}")
        graph = getattr(loss, "graph", None)
        if var_list is None:
            var_list = graph.get_collection(GraphKeys.TRAINABLE_VARIABLES) if graph is not None \
                else trainable_variables()
        var_list = [_check_variable(v) for v in var_list]
        if not var_list:
            raise OptimizerArgumentError("No variables to optimize.")
        grads = _gradients(loss, var_list, grad_loss)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars: Sequence[tuple[Any, Variable]], global_step: Any = None,
                        name: str | None = None) -> Operation:
        """One op that applies every non-None gradient to its variable.

        With ``global_step``, the returned op is the step's ``AssignAdd`` (+1),
        which runs after all the updates (TF1's behaviour). Inside a
        strategy's ``run`` the strategy first sums each gradient over the
        replicas, then every replica applies the sum to its own copy of the
        variable (TF's optimizers do the same through ``merge_call``).
        """
        grads_and_vars = _expand_shards(grads_and_vars)
        replica = distribution_context.replica_context()
        if replica is not None:
            grads_and_vars = [(g, _resolve(v)) for g, v in grads_and_vars]
            if global_step is not None:
                global_step = _resolve(global_step)
            return replica.merge_call(_apply_across_replicas,
                                      args=(self, grads_and_vars, global_step, name))
        return self.apply_gradients_here(grads_and_vars, global_step, name)

    def apply_gradients_here(self, grads_and_vars: Sequence[tuple[Any, Variable]],
                             global_step: Any = None, name: str | None = None) -> Operation:
        """``apply_gradients`` of these gradients to these (plain) variables, with
        no strategy's cross-replica step around it: what a strategy calls once it
        has aggregated the gradients (TF's ``_distributed_apply``)."""
        pairs = checked_pairs(grads_and_vars)
        var_list = [v for g, v in pairs if g is not None]
        graph = var_list[0].graph
        with graph.as_default():
            with graph.control_dependencies(None), graph.name_scope(None):
                self._create_slots(var_list)  # slots must not depend on surrounding ops (init_scope)
            with graph.name_scope(name or self._name) as scope:
                self._prepare()
                update_ops = [self._update_one(g, v) for g, v in pairs if g is not None]
                train_op = self._apply_and_count(update_ops, global_step, scope)
        train_ops = graph.get_collection_ref(GraphKeys.TRAIN_OP)
        if train_op not in train_ops:
            train_ops.append(train_op)
        return train_op

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """The slot ``name`` (e.g. ``"m"``) of ``var``, or None."""
        return self._slots.get(name, {}).get(getattr(var, "op", None))

    def get_slot_names(self) -> list[str]:
        return sorted(self._slots)

    def variables(self) -> list[Variable]:
        """The variables this optimizer created in the current default graph (slots and
        non-slot variables such as Adam's ``beta1_power``), sorted by name.

        As in TF: one optimizer may have been applied in several graphs (one per
        replica, say), and a variable of another graph cannot be run, saved or
        initialized with this graph's session.
        """
        graph = get_default_graph()
        found = [v for slots in self._slots.values() for v in slots.values()]
        found += list(self._non_slot_dict.values())
        return sorted((v for v in found if v.graph is graph), key=lambda v: v.name)

    # -- the pieces subclasses fill in ------------------------------------------------
    def _create_slots(self, var_list: list[Variable]) -> None:
        """Create the slot variables ``var_list`` needs (called outside any name scope)."""

    def _prepare(self) -> None:
        """Convert hyper-parameters to tensors where needed (called in the apply scope)."""

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        raise NotImplementedError(f"{type(self).__name__} does not implement _apply_dense")

    def _finish(self, update_ops: list[Operation], name: str) -> Operation:
        return ops.group(*update_ops, name=name)

    def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var: Variable) -> Operation:
        """A sparse gradient's update (TF1's hook): the ``SparseApply*`` kernels
        sum the rows of a repeated index first, so ``_apply_sparse`` gets it as is."""
        return self._apply_sparse(grad, var)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        """The update of an ``IndexedSlices`` gradient; an optimizer without a
        sparse rule densifies it beside the variable (TF1 would raise)."""
        return self._apply_dense(ops.convert_to_tensor(grad), var)

    # -- building blocks ----------------------------------------------------------------
    def _update_one(self, grad: Any, var: Variable) -> Operation:
        graph = var.graph
        if isinstance(grad, IndexedSlices):   # rows only: applied where the variable lives
            grad = sparse_gradient(grad, var)
            with graph.name_scope("update_" + var.op.name), graph.colocate_with(var.op):
                return self._apply_sparse_duplicate_indices(grad, var)
        grad = gradient_tensor(grad, var)
        with graph.name_scope("update_" + var.op.name), graph.colocate_with(var.op):
            return self._apply_dense(grad, var)

    def _apply_and_count(self, update_ops: list[Operation], global_step: Any, scope: str) -> Operation:
        if global_step is None:
            return self._finish(update_ops, scope)
        if not isinstance(global_step, Variable):
            raise OptimizerArgumentError(
                f"global_step={global_step!r} is not a dt.Variable: pass the step variable "
                "(dt.train.get_or_create_global_step() makes one)")
        step = global_step
        graph = step.graph
        with graph.control_dependencies([self._finish(update_ops, "update")]), \
                graph.colocate_with(step.op):
            return step.assign_add(1, name=scope, read_value=False)

    def _apply_op(self, op_type: str, var: Variable, inputs: list[Tensor],
                  slots: dict[str, Variable] | None = None, **attrs: Any) -> Operation:
        """An update op of docs/ops.md on ``var`` (already under ``colocate_with(var)``)."""
        all_attrs = {"var": var.shared_name, "use_locking": self._use_locking, **attrs}
        all_attrs.update({key: slot.shared_name for key, slot in (slots or {}).items()})
        return var.graph.create_op(op_type, inputs, all_attrs, op_type,
                                   output_specs=[(var.dtype, var.shape)])

    def _hyper(self, value: Any, var: Variable, name: str) -> Tensor:
        """A hyper-parameter as a scalar of ``var``'s dtype, built beside ``var``
        (a callable is called first, as TF 1.15's optimizers do)."""
        if callable(value) and not ops.is_tensor(value):
            value = value()
        if ops.is_tensor(value):
            tensor = ops.convert_to_tensor(value)
            return tensor if tensor.dtype == var.dtype else ops.cast(tensor, var.dtype, name=name)
        return ops.constant(value, dtype=var.dtype, name=name)

    def _zeros_slot(self, var: Variable, slot_name: str, op_name: str) -> Variable:
        return self._get_or_make_slot(var, slot_name, op_name,
                                      lambda: ops.zeros(var.shape.as_list(), dtype=var.dtype))

    def _get_or_make_slot(self, var: Variable, slot_name: str, op_name: str,
                          initial_value: Callable[[], Tensor]) -> Variable:
        """The slot ``slot_name`` of ``var``, created as ``<var>/<op_name>`` beside ``var``."""
        named = self._slots.setdefault(slot_name, {})
        if var.op not in named:
            # a Checkpoint restored before the slot existed: it starts from that value
            restored = trackable.deferred_value(self, ("slot", var.op, slot_name))
            if restored is not None:
                initial_value = _constant_of(restored, var)
            slot = named[var.op] = _create_slot(var, op_name, initial_value)
            primary = getattr(var, "mirror_primary", None)
            # (replica 0 applies first: apply_gradients_across_replicas goes in order)
            if primary is not None and primary.op in named:
                # the slot of a mirrored copy mirrors the first copy's slot (one
                # checkpoint entry, as TF's mirrored slots)
                slot.mirror_primary = named[primary.op]
        return named[var.op]

    def non_slot_variables(self, graph: Any) -> dict[str, list[Variable]]:
        """``{name: [one variable per replica]}`` of the variables that belong to no
        one variable (Adam's ``beta1_power``) in ``graph``: what a checkpoint saves."""
        out: dict[str, list[Variable]] = {}
        for (name, g, replica), var in sorted(self._non_slot_dict.items(),
                                              key=lambda item: item[0][2] or 0):
            if g is graph:
                out.setdefault(name, []).append(var)
        return out

    def _get_non_slot_variable(self, name: str, graph: Any) -> Variable | None:
        return self._non_slot_dict.get((name, graph, _replica_index()))

    def _create_non_slot_variable(self, initial_value: Any, name: str,
                                  colocate_with: Variable) -> Variable:
        """A scalar optimizer variable (e.g. ``beta1_power``) beside ``colocate_with``,
        once per graph; ``initial_value`` as a hyper-parameter (number, tensor, callable)."""
        graph = colocate_with.graph
        key = (name, graph, _replica_index())   # under a mirrored strategy: one per replica
        if key not in self._non_slot_dict:
            restored = trackable.deferred_value(self, ("non_slot", name), keep=True)
            if restored is not None:    # a Checkpoint's value, restored before it existed
                initial_value = _constant_of(restored, colocate_with)
            with graph.as_default(), graph.colocate_with(colocate_with.op):
                var = self._non_slot_dict[key] = Variable(
                    lambda: self._hyper(initial_value, colocate_with, name + "_initial"),
                    trainable=False, name=name)
            if key[2]:                           # saved once, as the first replica's
                var.mirror_primary = self._non_slot_dict.get((name, graph, 0))
        return self._non_slot_dict[key]


# -- module helpers -----------------------------------------------------------------------

def _replica_index() -> int | None:
    replica = distribution_context.replica_context()
    return None if replica is None else getattr(replica, "local_index", None)


def _expand_shards(grads_and_vars: Any) -> list[tuple[Any, Any]]:
    """(gradients of the shards, a sharded variable) pairs as one pair per shard."""
    out: list[tuple[Any, Any]] = []
    for g, v in grads_and_vars:
        shards = getattr(v, "_shards", None)
        if shards is None:
            out.append((g, v))
        elif isinstance(g, (list, tuple)) and len(g) == len(shards):
            out.extend(zip(g, shards))
        else:
            raise OptimizerArgumentError(
                f"the gradient of sharded variable {getattr(v, 'name', v)!r} must be a list "
                f"of {len(shards)} shard gradients (what tape.gradient returns for it)")
    return out


def _apply_across_replicas(strategy: Any, optimizer: Optimizer, grads_and_vars: Any,
                           global_step: Any, name: str | None) -> Any:
    """``merge_call``'s function: the strategy reduces and applies (cross-replica)."""
    return strategy.apply_gradients_across_replicas(optimizer, grads_and_vars, global_step, name)


def _gradients(loss: Any, var_list: list[Variable], grad_loss: Any) -> list[Tensor | None]:
    from distrib.ops.gradients import gradients  # late: the gradient registry is large
    if grad_loss is None:
        return list(gradients(loss, var_list))
    return list(gradients(loss, var_list, grad_ys=grad_loss))


def checked_pairs(grads_and_vars: Sequence[tuple[Any, Variable]]) -> list[tuple[Any, Variable]]:
    pairs = [tuple(p) for p in grads_and_vars]
    if not pairs:
        raise OptimizerArgumentError("No variables provided.")
    for pair in pairs:
        if len(pair) != 2:
            raise OptimizerArgumentError(f"grads_and_vars must hold (gradient, variable) pairs, "
                                         f"got {pair!r}")
        _check_variable(pair[1])
    seen = set()
    for _, var in pairs:
        if var.op in seen:
            raise OptimizerArgumentError(f"variable {var.name} appears twice in grads_and_vars; "
                                         "sum its gradients first (dt.add_n)")
        seen.add(var.op)
    if all(g is None for g, _ in pairs):
        raise OptimizerArgumentError(
            f"No gradients provided for any variable: {[v.name for _, v in pairs]}")
    return pairs  # type: ignore[return-value]


def sparse_gradient(grad: IndexedSlices, var: Variable) -> IndexedSlices:
    """``grad`` checked against ``var``: its dtype, and rows of the variable's row shape."""
    if grad.dtype != var.dtype:
        raise OptimizerArgumentError(
            f"gradient {grad.values.name} has dtype {grad.dtype.name} but variable {var.name} "
            f"is {var.dtype.name}; cast the gradient with dt.cast")
    rows, want = grad.values.shape, var.shape
    if rows.rank is not None and want.rank is not None and not (
            rows.rank == want.rank and rows[1:].is_compatible_with(want[1:])):
        raise OptimizerArgumentError(
            f"sparse gradient {grad.values.name} has rows of shape {rows} for variable "
            f"{var.name} of shape {want}")
    return grad


def deduplicate(grad: IndexedSlices) -> IndexedSlices:
    """The rows of each repeated index summed, one row per index (TF1's
    ``_deduplicate_indexed_slices``: ``Unique`` + ``UnsortedSegmentSum``)."""
    unique_indices, positions = array_gather.unique(grad.indices)
    summed = array_gather.unsorted_segment_sum(grad.values, positions,
                                               array_gather.size(unique_indices))
    return IndexedSlices(summed, unique_indices, grad.dense_shape)


def gradient_tensor(grad: Any, var: Variable) -> Tensor:
    with var.graph.as_default():
        grad = ops.convert_to_tensor(grad)
    if grad.dtype != var.dtype:
        raise OptimizerArgumentError(
            f"gradient {grad.name} has dtype {grad.dtype.name} but variable {var.name} is "
            f"{var.dtype.name}; cast the gradient with dt.cast")
    if not grad.shape.is_compatible_with(var.shape):
        raise OptimizerArgumentError(
            f"gradient {grad.name} has shape {grad.shape} but variable {var.name} has "
            f"{var.shape}")
    return grad


def _constant_of(value: Any, like: Variable) -> Callable[[], Tensor]:
    """An initial value of ``like``'s dtype holding a checkpoint's ``value``."""
    return lambda: ops.constant(value, dtype=like.dtype)


def _create_slot(var: Variable, op_name: str, initial_value: Callable[[], Tensor]) -> Variable:
    if not var.shape.is_fully_defined():
        raise OptimizerArgumentError(
            f"variable {var.name} has shape {var.shape}, not fully known; optimizers with slots "
            "need fully shaped variables")
    graph = var.graph
    # Root name scope and no control deps (init_scope), and beside the primary variable.
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
            graph.colocate_with(var.op):
        return Variable(initial_value, trainable=False, name=f"{var.op.name}/{op_name}")
