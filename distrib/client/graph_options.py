"""TF's ``GraphOptions``: which passes of the graph optimizer run
(``ConfigProto(graph_options=...)``).

The master optimizes each partition of a step before it caches it
(``distrib.runtime.step.graph_optimizer``); these options, sent with the
session's config, switch its passes, as TF's ``RewriterConfig`` switches
Grappler's and ``OptimizerOptions`` its classic graph optimizer:

- ``rewrite_options`` (:class:`RewriterConfig`): one :class:`Toggle` per pass
  (``DEFAULT``, ``ON``, ``OFF``; ``AGGRESSIVE`` on ``arithmetic_optimization``
  also allows the rewrites that change rounding, as TF's arithmetic
  optimizer does by default: ``x + 0.0 -> x`` and ``(x * c1) * c2 ->
  x * (c1 * c2)`` on floats; on ``remapping``, fusion of ``exp``, ``log``,
  ``tanh`` and the sigmoid too, a few ulp off numpy's own functions);
- ``optimizer_options`` (:class:`OptimizerOptions`):
  ``do_common_subexpression_elimination`` and ``do_constant_folding``, and
  ``opt_level`` ``L0`` (both off unless a toggle says ON) or ``L1`` (the
  default). ``do_function_inlining`` is accepted and ignored (there is no
  function call op to inline), and so is ``place_pruned_graph``.

The setting ``DISTRIB_GRAPH_OPTIMIZER=off`` on the master's process turns
every pass off, whatever the options say.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["GraphOptions", "OptimizerOptions", "RewriterConfig", "Toggle"]


class Toggle:
    """TF's ``RewriterConfig.Toggle`` values."""

    DEFAULT = 0
    ON = 1
    OFF = 2
    AGGRESSIVE = 3


_TOGGLES = (Toggle.DEFAULT, Toggle.ON, Toggle.OFF, Toggle.AGGRESSIVE)


@dataclass
class RewriterConfig:
    """Grappler's switches, one per pass of distrib's optimizer:
    ``constant_folding``, ``arithmetic_optimization`` (x * 1, x + (-0.0),
    integer chains of constant multiplies; AGGRESSIVE: float ones too),
    ``dependency_optimization`` (dead-node pruning; ``disable_model_pruning``
    turns it off as well), ``remapping`` (fusion of elementwise chains into
    one compiled CPU kernel) and ``common_subgraph_elimination``."""

    DEFAULT = Toggle.DEFAULT
    ON = Toggle.ON
    OFF = Toggle.OFF
    AGGRESSIVE = Toggle.AGGRESSIVE

    constant_folding: int = Toggle.DEFAULT
    arithmetic_optimization: int = Toggle.DEFAULT
    dependency_optimization: int = Toggle.DEFAULT
    remapping: int = Toggle.DEFAULT
    common_subgraph_elimination: int = Toggle.DEFAULT
    disable_model_pruning: bool = False

    def __post_init__(self) -> None:
        for name in ("constant_folding", "arithmetic_optimization", "dependency_optimization",
                     "remapping", "common_subgraph_elimination"):
            if getattr(self, name) not in _TOGGLES:
                raise ValueError(f"RewriterConfig.{name} is a Toggle (DEFAULT, ON, OFF, "
                                 f"AGGRESSIVE), not {getattr(self, name)!r}")


@dataclass
class OptimizerOptions:
    """TF's classic optimizer options (``L1`` = 0 is the default level,
    ``L0`` = -1 turns CSE and constant folding off)."""

    L1 = 0
    L0 = -1
    DEFAULT = 0

    do_common_subexpression_elimination: bool = True
    do_constant_folding: bool = True
    opt_level: int = 0
    do_function_inlining: bool = True   # accepted, ignored

    def __post_init__(self) -> None:
        if self.opt_level not in (self.L0, self.L1):
            raise ValueError(f"OptimizerOptions.opt_level is L0 (-1) or L1 (0), "
                             f"not {self.opt_level!r}")


@dataclass
class GraphOptions:
    """``ConfigProto.graph_options``."""

    optimizer_options: OptimizerOptions = field(default_factory=OptimizerOptions)
    rewrite_options: RewriterConfig = field(default_factory=RewriterConfig)
    place_pruned_graph: bool = False   # accepted, ignored

    def __post_init__(self) -> None:
        if isinstance(self.optimizer_options, dict):
            self.optimizer_options = OptimizerOptions(**self.optimizer_options)
        if isinstance(self.rewrite_options, dict):
            self.rewrite_options = RewriterConfig(**self.rewrite_options)
        if not isinstance(self.optimizer_options, OptimizerOptions):
            raise TypeError(f"optimizer_options is a dt.OptimizerOptions, "
                            f"not {self.optimizer_options!r}")
        if not isinstance(self.rewrite_options, RewriterConfig):
            raise TypeError(f"rewrite_options is a dt.RewriterConfig, not {self.rewrite_options!r}")

    @classmethod
    def coerce(cls, value: Any) -> GraphOptions:
        """``value`` (a GraphOptions, a dict of its fields, or None) as GraphOptions."""
        if value is None:
            return cls()
        if isinstance(value, dict):
            return cls(**value)
        if not isinstance(value, cls):
            raise TypeError(f"graph_options is a dt.GraphOptions, not {value!r}")
        return value
