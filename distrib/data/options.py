"""``dt.data.Options``: settings that travel with a dataset, as ``tf.data.Options``.

``ds.with_options(options)`` returns a dataset carrying them; ``ds.options()``
reads the merged result. Merging follows TF: an option set later overrides
the same option set earlier, and an option never set reads as its default.
Setting a name an options object does not have raises AttributeError (TF's
``Cannot set the property``), so a typo cannot pass silently.

``experimental_distribute.auto_shard_policy`` (the strategies read it
through :mod:`distrib.data.distribute_input`) and ``deterministic`` (the
parallel map and interleave read it when the dataset is iterated) change
behaviour; the other fields are accepted so that TF scripts run, and are
recorded.
"""
from __future__ import annotations

import copy
import enum
from typing import Any

__all__ = ["AutoShardPolicy", "DistributeOptions", "ThreadingOptions", "OptimizationOptions",
           "Options"]


class AutoShardPolicy(enum.IntEnum):
    """How ``experimental_distribute_dataset`` splits a dataset between workers (TF's values).

    OFF: every worker reads the whole dataset. AUTO: shard by files when the
    pipeline reads files (and has a file for each worker), else by data.
    FILE: shard the input files (an error for a pipeline that reads none).
    DATA: every worker runs the whole pipeline and keeps its own part of every
    global batch. HINT: shard where ``shard(SHARD_HINT, SHARD_HINT)`` says.
    """

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class _OptionGroup:
    """A group of named options with defaults; remembers which were set."""

    _defaults: dict[str, Any] = {}

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):   # copy/pickle probe dunders before _values exists
            raise AttributeError(name)
        defaults = self._defaults
        if name in defaults:
            value = self._values.get(name, _UNSET)
            if value is _UNSET:
                value = defaults[name]() if callable(defaults[name]) else defaults[name]
                if isinstance(value, _OptionGroup):   # a nested group is created on first read
                    self._values[name] = value
            return value
        raise AttributeError(f"{type(self).__name__} has no option {name!r}; the options are "
                             f"{', '.join(sorted(defaults))}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._defaults:
            raise AttributeError(f"Cannot set the property {name!r} on {type(self).__name__}; "
                                 f"the options are {', '.join(sorted(self._defaults))}")
        self._values[name] = value

    def _merged(self, other: _OptionGroup) -> _OptionGroup:
        # reads and writes other groups' values: option groups, all of this class
        out = copy.deepcopy(self)
        for name, value in other._values.items():  # noqa: SLF001 - same class
            mine = out._values.get(name)  # noqa: SLF001 - same class
            if isinstance(value, _OptionGroup) and isinstance(mine, _OptionGroup):
                out._values[name] = mine._merged(value)  # noqa: SLF001 - same class
            else:
                out._values[name] = copy.deepcopy(value)  # noqa: SLF001 - same class
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in self._defaults)

    def __repr__(self) -> str:
        set_ = ", ".join(f"{k}={v!r}" for k, v in sorted(self._values.items()))
        return f"{type(self).__name__}({set_})"


_UNSET = object()


class DistributeOptions(_OptionGroup):
    """``options.experimental_distribute``: ``auto_shard_policy`` (AUTO) and ``num_devices``."""

    _defaults = {"auto_shard_policy": AutoShardPolicy.AUTO, "num_devices": None}


class ThreadingOptions(_OptionGroup):
    """``options.threading``: accepted for TF scripts; the client pipeline ignores them."""

    _defaults = {"max_intra_op_parallelism": None, "private_threadpool_size": None}


class OptimizationOptions(_OptionGroup):
    """``options.experimental_optimization``: accepted for TF scripts; recorded only."""

    _defaults = {"apply_default_optimizations": None, "map_and_batch_fusion": None,
                 "map_parallelization": None, "noop_elimination": None,
                 "parallel_batch": None, "shuffle_and_repeat_fusion": None,
                 "inject_prefetch": None}


class Options(_OptionGroup):
    """``dt.data.Options()``, as ``tf.data.Options``."""

    _defaults = {"deterministic": None, "experimental_deterministic": None,
                 "experimental_distribute": DistributeOptions,
                 "experimental_optimization": OptimizationOptions,
                 "threading": ThreadingOptions, "experimental_threading": ThreadingOptions,
                 "experimental_slack": None, "autotune": None,
                 "experimental_external_state_policy": None}

    def merge(self, options: Options) -> Options:
        """A new Options: this one's settings, overridden by those ``options`` set."""
        if not isinstance(options, Options):
            raise TypeError(f"Options.merge takes a dt.data.Options, not {type(options).__name__}")
        return self._merged(options)  # type: ignore[return-value]
