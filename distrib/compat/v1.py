"""``dt.compat.v1``: TF's ``tf.compat.v1`` (``import distrib.compat.v1 as tf``).

Every name of the ``dt`` namespace (``Session``, ``placeholder``,
``get_variable``, ``train``, ``layers``, ``losses``, ``gfile``, ``app``,
``global_variables_initializer``, ``enable_eager_execution`` ...), read from
the ``distrib`` package when asked, and TF1's names that TF2 dropped:
``disable_v2_behavior``/``enable_v2_behavior`` and ``disable_eager_execution``
(graphs are distrib's default already: nothing to do; after
``enable_eager_execution`` there is no way back, and it says so), ``div_no_nan``, ``to_float`` and the
other ``to_*`` casts, ``random_normal``/``random_uniform``, ``log_sigmoid``.
"""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["disable_v2_behavior", "enable_v2_behavior", "disable_eager_execution",
           "to_float", "to_double", "to_int32", "to_int64"]


def disable_v2_behavior() -> None:
    """TF1's switch back to graphs: distrib builds graphs unless eager values are on."""
    disable_eager_execution()


def enable_v2_behavior() -> None:
    """Nothing to do: distrib has TF2's names beside TF1's."""


def disable_eager_execution() -> None:
    """Graphs, as distrib's default: nothing to do. Eager values, once turned on, stay
    on for the process (``distrib.eager.context``): a FailedPreconditionError then
    (it called a ``disable_eager_execution`` that did not exist and did nothing)."""
    context = sys.modules.get("distrib.eager.context")
    if context is not None and context.eager_enabled():
        from distrib.errors import FailedPreconditionError
        raise FailedPreconditionError(
            "eager execution was turned on in this process and cannot be turned off: call "
            "disable_eager_execution() / disable_v2_behavior() before "
            "enable_eager_execution(), or drop the latter (graphs are the default)")


def _cast(dtype_name: str) -> Any:
    def cast(x: Any, name: str = "ToFloat") -> Any:
        dt = _dt()
        return dt.cast(x, getattr(dt, dtype_name), name=name)
    cast.__name__ = f"to_{dtype_name}"
    return cast


to_float, to_double = _cast("float32"), _cast("float64")
to_int32, to_int64 = _cast("int32"), _cast("int64")

_RENAMED = {"div_no_nan": "divide_no_nan", "mod": "floormod"}


def _dt() -> Any:
    return sys.modules["distrib"]


def __getattr__(name: str) -> Any:
    if name == "image":   # TF1's tf.image: resize is resize_images (issue 40)
        import importlib
        return importlib.import_module("distrib.compat.v1_image")
    dt = _dt()
    return getattr(dt, _RENAMED.get(name, name))


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(dir(_dt())) | set(_RENAMED))
