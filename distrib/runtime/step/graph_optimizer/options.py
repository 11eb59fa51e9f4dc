"""Which passes run: a session's ``graph_options`` (the dict form of
:class:`distrib.client.graph_options.GraphOptions`, as the master gets it
with the session's config) and the setting ``DISTRIB_GRAPH_OPTIMIZER``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.settings import GRAPH_OPTIMIZER

__all__ = ["Passes", "resolve_passes"]

DEFAULT, ON, OFF, AGGRESSIVE = 0, 1, 2, 3
L0 = -1


@dataclass(frozen=True)
class Passes:
    """The passes to run (all exact unless ``aggressive_arithmetic``)."""

    common_subgraph_elimination: bool = True
    constant_folding: bool = True
    arithmetic: bool = True
    aggressive_arithmetic: bool = False   # rewrites that change rounding (TF's defaults)
    pruning: bool = True
    fusion: bool = True
    aggressive_fusion: bool = False   # exp, log, tanh, sigmoid too: a few ulp off numpy

    @property
    def any(self) -> bool:
        return (self.common_subgraph_elimination or self.constant_folding or self.arithmetic
                or self.pruning or self.fusion)


NONE = Passes(False, False, False, False, False, False, False)


def _toggle(rewrite: dict[str, Any], name: str) -> int:
    v = rewrite.get(name, DEFAULT)
    if isinstance(v, bool) or v not in (DEFAULT, ON, OFF, AGGRESSIVE):
        raise InvalidArgumentError(f"graph_options.rewrite_options.{name} must be a Toggle "
                                   f"(DEFAULT, ON, OFF, AGGRESSIVE), not {v!r}")
    return v


def resolve_passes(graph_options: Any, environ: Any = None) -> Passes:
    """The passes ``graph_options`` (None, or the GraphOptions dict) asks for;
    none at all when ``DISTRIB_GRAPH_OPTIMIZER`` is ``off``."""
    if GRAPH_OPTIMIZER.get(environ) == "off":
        return NONE
    if graph_options is None:
        return Passes()
    if not isinstance(graph_options, dict):
        raise InvalidArgumentError("config: graph_options must be a dt.GraphOptions (a dict on "
                                   f"the wire), not {type(graph_options).__name__}")
    rewrite = graph_options.get("rewrite_options") or {}
    classic = graph_options.get("optimizer_options") or {}
    if not isinstance(rewrite, dict) or not isinstance(classic, dict):
        raise InvalidArgumentError("config: graph_options' rewrite_options and "
                                   "optimizer_options must be dicts")
    level_off = classic.get("opt_level", 0) == L0

    def classic_pass(toggle: str, flag: str) -> bool:
        t = _toggle(rewrite, toggle)
        if t == DEFAULT:
            return bool(classic.get(flag, True)) and not level_off
        return t != OFF

    arith = _toggle(rewrite, "arithmetic_optimization")
    return Passes(
        common_subgraph_elimination=classic_pass("common_subgraph_elimination",
                                                 "do_common_subexpression_elimination"),
        constant_folding=classic_pass("constant_folding", "do_constant_folding"),
        arithmetic=arith != OFF,
        aggressive_arithmetic=arith == AGGRESSIVE,
        pruning=(_toggle(rewrite, "dependency_optimization") != OFF
                 and not rewrite.get("disable_model_pruning", False)),
        fusion=_toggle(rewrite, "remapping") != OFF,
        aggressive_fusion=_toggle(rewrite, "remapping") == AGGRESSIVE,
    )
