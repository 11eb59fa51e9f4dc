"""The kernel registry: (op type, device type) -> function.

A kernel is ``fn(inputs: list, attrs: dict) -> list`` (see docs/ops.md). CPU
kernels are numpy, GPU kernels numba.cuda; each wing's modules load when
something first asks for a kernel of its device type (the wing's loader,
named in ``LOADERS``), so ``import kernels`` defines and registers nothing
and a task that never touches a GPU never pays numba's half-second import.

This package knows nothing of the runtime: it raises :class:`KernelError`
(a ``ValueError``) or plain ``ValueError``/``TypeError`` for bad inputs and
:class:`KernelNotFound` (a ``KeyError``) for a missing kernel; the runtime maps
them to its own typed errors.
"""
from __future__ import annotations

import importlib
import logging
import threading
from typing import Callable

__all__ = [
    "CPU", "GPU", "Kernel", "KernelError", "KernelNotFound",
    "register", "unregister", "register_loader", "get_kernel", "has_kernel", "registered_ops",
    "KernelTable", "register_table",
    "device_types",
]

logger = logging.getLogger(__name__)

CPU = "CPU"
GPU = "GPU"

Kernel = Callable[[list, dict], list]

# Device type -> the module whose ``load()`` imports the wing's kernel modules
# (their ``@register`` decorators fill the table), run on the first lookup for
# that device type.
LOADERS = {CPU: "kernels.cpu.loader", GPU: "kernels.cuda.loader"}
# Loaders added at run time (``register_loader``), ahead of ``LOADERS``.
_LOADERS: dict[str, Callable[[], None]] = {}

_registry: dict[str, dict[str, Kernel]] = {}
_loaded: set[str] = set()
_load_lock = threading.Lock()


class KernelError(ValueError):
    """A kernel was given inputs or attrs it cannot run on (shape, dtype, value)."""


class KernelNotFound(KeyError):
    """No kernel is registered for this (op type, device type)."""

    def __init__(self, message: str, op_type: str = "", device_type: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.op_type = op_type
        self.device_type = device_type

    def __str__(self) -> str:  # KeyError would show the message quoted like a key
        return self.message


def register(op_type: str, device_type: str) -> Callable[[Kernel], Kernel]:
    """Decorator: register ``fn`` as the kernel of ``op_type`` on ``device_type``.

    Registering the same pair twice is a programming error (two modules
    fighting over one op) and raises ``ValueError``.
    """
    def deco(fn: Kernel) -> Kernel:
        table = _registry.setdefault(device_type, {})
        if op_type in table and table[op_type] is not fn:
            raise ValueError(f"kernel for {op_type} on {device_type} is already registered "
                             f"({table[op_type].__module__}.{table[op_type].__qualname__})")
        table[op_type] = fn
        return fn
    return deco


def unregister(op_type: str, device_type: str) -> None:
    """Remove the kernel of ``op_type`` on ``device_type``, if there is one (a
    test's stand-in kernel, say)."""
    _registry.get(device_type, {}).pop(op_type, None)


class KernelTable:
    """The kernels one module of a wing declares, ``@KERNELS("Op", CPU)``:
    declaring registers nothing (importing the module for a constant of it
    changes no table); the wing's loader registers the table on the first
    lookup for its device type (:func:`register_table`)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, Kernel]] = []

    def __call__(self, op_type: str, device_type: str) -> Callable[[Kernel], Kernel]:
        def declare(fn: Kernel) -> Kernel:
            self.entries.append((op_type, device_type, fn))
            return fn
        return declare


def register_table(table: KernelTable) -> None:
    """Register every kernel ``table`` declares (a wing's loader does)."""
    for op_type, device_type, fn in table.entries:
        register(op_type, device_type)(fn)


def register_loader(device_type: str, loader: Callable[[], None]) -> None:
    """Call ``loader`` (which registers ``device_type``'s kernels) on the
    first lookup of a kernel for ``device_type``."""
    _LOADERS[device_type] = loader


def _ensure_loaded(device_type: str) -> None:
    """Run the loader of ``device_type``'s kernels, once."""
    if device_type in _loaded or (device_type not in _LOADERS and device_type not in LOADERS):
        return
    with _load_lock:
        if device_type in _loaded:
            return
        try:
            loader = _LOADERS.get(device_type)
            if loader is None:
                loader = importlib.import_module(LOADERS[device_type]).load
            loader()
        except ImportError as exc:
            if device_type == CPU:
                raise   # no CPU kernels is no runtime: say so, and try again next lookup
            # A broken numba install must not take the CPU path down with it:
            # the device type then simply has no kernels (KernelNotFound).
            logger.warning("cannot load %s kernels (%s); %s ops will run on CPU",
                           device_type, exc, device_type)
        except Exception as exc:   # e.g. a CUDA library that fails as numba-cuda loads it
            if device_type == CPU:
                raise
            logger.error("loading the %s kernels failed (%s: %s); %s ops will run on CPU",
                         device_type, type(exc).__name__, exc, device_type, exc_info=exc)
        _loaded.add(device_type)
        logger.debug("loaded %s kernels (%d ops)", device_type,
                     len(_registry.get(device_type, {})))


def get_kernel(op_type: str, device_type: str) -> Kernel:
    """The kernel of ``op_type`` on ``device_type``; raises :class:`KernelNotFound`.

    Asking for a GPU kernel loads numba and the CUDA kernels on first use.
    """
    _ensure_loaded(device_type)
    fn = _registry.get(device_type, {}).get(op_type)
    if fn is not None:
        return fn
    raise KernelNotFound(_not_found_message(op_type, device_type), op_type, device_type)


def _not_found_message(op_type: str, device_type: str) -> str:
    if device_type not in _LOADERS and device_type not in LOADERS and device_type not in _registry:
        return (f"no kernels for device type {device_type!r} (op {op_type}); "
                f"known device types: {device_types()}")
    having = sorted(d for d, table in _registry.items() if op_type in table)
    if having:
        return (f"no {device_type} kernel for op {op_type}; it has kernels on {having}: "
                f"place the op there (or enable soft placement)")
    return (f"no kernel for op {op_type} on {device_type} or any loaded device type; "
            f"check the op type against docs/ops.md")


def has_kernel(op_type: str, device_type: str) -> bool:
    """Whether ``op_type`` has a kernel on ``device_type`` (loads GPU kernels if asked)."""
    _ensure_loaded(device_type)
    return op_type in _registry.get(device_type, {})


def registered_ops(device_type: str) -> list[str]:
    """Sorted op types with a kernel on ``device_type``."""
    _ensure_loaded(device_type)
    return sorted(_registry.get(device_type, {}))


def device_types() -> list[str]:
    """Device types this package knows how to load kernels for."""
    return sorted(set(_LOADERS) | set(LOADERS) | set(_registry))
