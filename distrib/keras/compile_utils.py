"""``compile``'s losses, loss weights and metrics, matched to the model's outputs.

Keras 2's ``LossesContainer`` and ``MetricsContainer`` (``tf_keras``'s
``engine/compile_utils.py``), as one object the traced step and the client's
running totals share:

* **Matching.** ``loss`` is one loss (used for every output), a list (by
  position) or a dict (by output name; an output left out, or given None, has
  no loss). ``loss_weights`` the same (a number weighs every output).
  ``metrics`` one metric or a flat list (each given to every output, a copy
  per output when there are several), a list of lists (by position) or a dict
  (by output name, each value one metric or a list). Targets ``y`` match the
  outputs the same way: one array (given to every output), a list, or a dict
  by output name (a missing key: that output's loss and metrics are skipped).
* **Names.** An output is named after the layer that made it (a functional
  model's ``output_names``: repeated names get ``_1``, ``_2`` ...); a
  subclassed model's outputs are ``output_1``, ``output_2`` ... (a dict's by
  key). With several outputs each metric's name gets ``<output>_`` in front
  and each output with a loss adds ``<output>_loss``; the logs (``History``,
  ``evaluate``) are ``loss``, the per-output losses, then the metrics, in
  output order: Keras' ``metrics_names``.
* **The step's statistics** (``engine.py``'s header): ``[sum of the weighted
  per-example losses (+ penalties), rows]``, then with several outputs each
  output's plain loss sum, then every metric's statistics. One output gives
  exactly the vector (and the ops) of the single-output step. ``logs`` turns
  the summed vector into Keras' values: the loss a mean over the examples
  (``SUM`` reduction: over the steps), each output's loss likewise before its
  weight (Keras' per-output ``Mean``), each metric its own result.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from distrib.framework.graph import Tensor
from distrib.keras import losses as losses_mod
from distrib.keras import metrics as metrics_mod
from distrib.keras import node
from distrib.keras.losses import Reduction
from distrib.keras.losses_utils import match_dtype_and_rank
from distrib.ops import math_ops as ops

__all__ = ["CompiledLoss", "output_names"]


def output_names(outputs: list[Tensor]) -> list[str]:
    """A functional model's output names: each output's layer name, made unique."""
    names: list[str] = []
    counts: dict[str, int] = {}
    for t in outputs:
        h = node.history(t)
        base = h[0].name if h is not None else t.op.name.split("/")[0]
        proposal = base
        while proposal in names:
            counts[base] = counts.get(base, 1)
            proposal = f"{base}_{counts[base]}"
            counts[base] += 1
        names.append(proposal)
    return names


def _pseudo_names(structure: Any) -> list[str]:
    """A subclassed model's output names (Keras' ``create_pseudo_output_names``)."""
    if isinstance(structure, dict):
        return [f"{k}_{n}" if len(node.flatten(structure[k])) > 1 else str(k)
                for k in sorted(structure)
                for n in range(1, len(node.flatten(structure[k])) + 1)]
    count = len(node.flatten(structure))
    return [f"output_{i}" for i in range(1, count + 1)]


def _nested(value: Any) -> bool:
    return isinstance(value, (list, tuple, dict))


class CompiledLoss:
    """``compile(loss, loss_weights, metrics)`` for a model: see the module header."""

    def __init__(self, loss: Any, loss_weights: Any = None, metrics: Any = None) -> None:
        if loss is None:
            raise ValueError("compile needs a loss: a name ('mse', "
                             "'sparse_categorical_crossentropy' ...), a dt.keras.losses "
                             "object, or one per output (a list or a dict by output name)")
        self._loss_arg = loss
        self._weights_arg = loss_weights
        self._metrics_arg = metrics
        self.loss: Any = _map(losses_mod.get, loss)   # model.loss: the resolved structure
        self.built = False
        self.names: list[str] = []
        self.losses: list[Any] = []
        self.weights: list[float | None] = []
        self.metrics: list[list[metrics_mod.Metric]] = []
        if not _nested(loss) and not _nested(metrics):   # one output: resolved at once
            self.losses = [self.loss]
            self.metrics = [[metrics_mod.get(m, self.loss) for m in _as_list(metrics)]]

    # -- building: the arguments conformed to the outputs ----------------------------------
    @property
    def multi(self) -> bool:
        return len(self.names) > 1

    def build(self, outputs: Any, names: list[str] | None = None) -> None:
        """Match the arguments to ``outputs`` (the model's output structure)."""
        if self.built:
            return
        names = list(names or _pseudo_names(outputs))
        count = len(names)
        self.losses = self._conform(outputs, names, self.loss, "losses")   # the same objects
        self.weights = [None if w is None else float(w)
                        for w in self._conform(outputs, names, self._weights_arg, "losses")]
        if count != 1 or len(self.metrics) != 1:   # (one output: the metrics made at init)
            per_output = self._conform_metrics(outputs, names)
            self.metrics = [[metrics_mod.get(m, self.losses[i]) for m in _as_list(ms)]
                            for i, ms in enumerate(per_output)]
        self.names = names
        if self.multi:
            seen: set[str] = set()
            for name, metrics in zip(names, self.metrics):
                for m in metrics:
                    m.name = f"{name}_{m.name}"
                    if m.name in seen:
                        raise ValueError(f"Found two metrics with the same name: {m.name}. "
                                         "All the metrics added to the model need to have "
                                         "unique names.")
                    seen.add(m.name)
        if all(f is None for f in self.losses):
            raise ValueError(f"compile's loss gives none of the outputs {names} a loss: "
                             "name at least one output's loss")
        self.built = True

    def _conform(self, outputs: Any, names: list[str], struct: Any, what: str) -> list[Any]:
        """``struct`` as one entry per output (Keras' ``_conform_to_outputs``)."""
        count = len(names)
        if not _nested(struct):
            return [struct] * count
        if isinstance(struct, dict):
            keys = sorted(outputs) if isinstance(outputs, dict) and len(outputs) == count \
                else names
            unknown = [k for k in struct if k not in keys]
            if unknown:
                raise ValueError(f"Found unexpected {what} or metrics that do not correspond "
                                 f"to any Model output: {unknown}. Valid mode output names: "
                                 f"{keys}. Received struct is: {struct}.")
            return [struct.get(k) for k in keys]
        flat = list(struct)
        if len(flat) != count:
            raise ValueError(f"compile was given {len(flat)} {what} for a model with {count} "
                             f"output(s) {names}: give one per output, one for all, or a "
                             "dict by output name")
        return flat

    def _conform_metrics(self, outputs: Any, names: list[str]) -> list[Any]:
        metrics = self._metrics_arg
        count = len(names)
        broadcast = not _nested(metrics) or (
            isinstance(metrics, (list, tuple)) and not any(_nested(m) for m in metrics))
        if broadcast:   # Keras: a flat list is every output's list
            flat = _as_list(metrics)
            if count == 1:
                return [flat]
            return [[_copy_metric(m) for m in flat] for _ in range(count)]   # Keras copies
        return self._conform(outputs, names, metrics, "metrics")

    # -- the traced step -------------------------------------------------------------------
    def metrics_in_order(self) -> list[metrics_mod.Metric]:
        return [m for ms in self.metrics for m in ms]

    def metrics_names(self) -> list[str]:
        """Keras' ``model.metrics_names``: the logs' keys, in order."""
        per_output = [f"{n}_loss" for n, f in zip(self.names, self.losses) if f is not None] \
            if self.multi else []
        return ["loss", *per_output, *(m.name for m in self.metrics_in_order())]

    def targets(self, y: Any, y_pred: Any) -> list[Any]:
        """The targets, one per output (None: none given for it)."""
        count = len(self.names)
        if isinstance(y, dict):
            keys = sorted(y_pred) if isinstance(y_pred, dict) and len(y_pred) == count \
                else self.names
            unknown = [k for k in y if k not in keys]
            if unknown:
                raise ValueError(f"the targets' keys {unknown} name no output of the model; "
                                 f"its outputs are {keys}")
            return [y.get(k) for k in keys]
        if isinstance(y, (list, tuple)):
            if len(y) != count:
                raise ValueError(f"{len(y)} targets were given for a model with {count} "
                                 f"output(s) {self.names}: give one per output (a list, or a "
                                 "dict by output name)")
            return list(y)
        return [y] * count

    def step(self, y: Any, y_pred: Any, replicas: int, penalties: list[Any]
             ) -> tuple[Tensor, list[Tensor]]:
        """The loss to differentiate and the step's statistics (module header)."""
        if y is None:
            raise ValueError("the data has no targets (y): fit and evaluate need (x, y)")
        if not self.built:
            self.build(y_pred)
        loss = total = rows = None
        out_sums: list[Tensor] = []
        metric_parts: list[Tensor] = []
        for yt, yp, fn, w, metrics in zip(self.targets(y, y_pred), node.flatten(y_pred),
                                          self.losses, self.weights, self.metrics):
            if yt is None:   # no target for this output: skipped (zeros keep the layout)
                if fn is not None and self.multi:
                    out_sums.append(ops.zeros([], "float32"))
                metric_parts += [ops.zeros([m.num_statistics], "float32") for m in metrics]
                continue
            # Keras 2's compile: [N] labels against [N, k] outputs are one label per row
            yt, yp, _ = match_dtype_and_rank(yt, yp)
            if fn is not None:
                per_example = fn.per_example(yt, yp)
                part = ops.reduce_sum(per_example)
                count = ops.reduce_sum(ops.ones_like(per_example))
                if fn.reduction in (Reduction.SUM, Reduction.NONE):
                    value = part
                else:
                    value = part / ops.maximum(count, 1.0)
                    if replicas > 1:
                        value = value * (1.0 / replicas)
                if self.multi:
                    out_sums.append(part)
                if w is not None:
                    value, part = value * w, part * w
                loss = value if loss is None else loss + value
                total = part if total is None else total + part
                rows = count if rows is None else rows
            metric_parts += [s for m in metrics for s in m.step_statistics(yt, yp)]
        if loss is None or total is None or rows is None:
            raise ValueError(f"no output with a loss has a target: the targets name none of "
                             f"{[n for n, f in zip(self.names, self.losses) if f is not None]}")
        if penalties:   # regularizers: in the loss, scaled as Keras 2 scales them
            penalty = ops.add_n([p if p.dtype.name == "float32" else ops.cast(p, "float32")
                                 for p in map(ops.convert_to_tensor, penalties)])
            loss = loss + (penalty * (1.0 / replicas) if replicas > 1 else penalty)
            # the reported loss is Keras' mean of (batch loss + penalty) over the rows
            total = total + (penalty * (1.0 / replicas) if self._all_by_sum() else
                             penalty * rows)
        parts = [total, rows, *out_sums, *metric_parts]
        return loss, [p if p.dtype.name == "float32" else ops.cast(p, "float32") for p in parts]

    def _all_by_sum(self) -> bool:
        return all(f.reduction in (Reduction.SUM, Reduction.NONE)
                   for f in self.losses if f is not None)

    # -- the client's totals -----------------------------------------------------------------
    def num_statistics(self) -> int:
        per_output = sum(f is not None for f in self.losses) if self.multi else 0
        return 2 + per_output + sum(m.num_statistics for m in self.metrics_in_order())

    def logs(self, totals: np.ndarray, steps: int, prefix: str = "") -> dict[str, float]:
        """``{'loss', '<output>_loss' ..., <metric> ...}`` from the summed statistics."""
        rows = float(totals[1]) if len(totals) > 1 else 0.0

        def mean(value: float, by_sum: bool) -> float:
            if by_sum:
                return float(value / max(steps, 1))
            return float(value / rows) if rows else 0.0
        live = [f for f in self.losses if f is not None]
        out = {prefix + "loss": mean(totals[0], bool(live) and all(
            f.reduction == Reduction.SUM for f in live))}
        at = 2
        if self.multi:
            for name, fn in zip(self.names, self.losses):
                if fn is not None:
                    out[f"{prefix}{name}_loss"] = mean(totals[at],
                                                       fn.reduction == Reduction.SUM)
                    at += 1
        for metric in self.metrics_in_order():
            metric.reset_state()
            metric.merge_statistics(totals[at:at + metric.num_statistics], rows)
            at += metric.num_statistics
            out[prefix + metric.name] = metric.result_value()
        return out


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v for v in node.flatten(list(value)) if v is not None]
    return [value]


def _map(fn: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return {k: None if v is None else fn(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [None if v is None else fn(v) for v in value]
    return fn(value)


def _copy_metric(metric: Any) -> Any:
    """Each output its own metric object (Keras copies a Metric through its config)."""
    if not isinstance(metric, metrics_mod.Metric):
        return metric   # a name or a function: made anew per output
    try:
        return type(metric).from_config(metric.get_config())
    except (TypeError, ValueError, KeyError):
        clone = copy.copy(metric)
        clone.reset_state()
        return clone
