"""Choices the GPU kernels take from the runtime, without importing numba.

The kernels never read the environment themselves (``distrib.settings``
declares and parses every ``DISTRIB_*`` variable, and this package may not
import ``distrib``): the runtime hands them a source of the choice instead,
here ``set_matmul_choice(GPU_MATMUL.get)`` (``distrib.framework.config``,
when a server of the process lists its GPUs), read again at every GPU
MatMul, so a value set at run time is seen by the next one. Without a
source (the kernels used on their own, the benchmarks) the choice is
``auto``.
"""
from __future__ import annotations

from typing import Callable

from kernels.registry import KernelError

__all__ = ["MATMUL_CHOICES", "CublasUnavailableError", "set_matmul_choice", "matmul_choice"]

MATMUL_CHOICES = ("auto", "numba", "cublas")


class CublasUnavailableError(KernelError):
    """MatMul was told to run through cuBLAS (``DISTRIB_GPU_MATMUL=cublas``)
    where NVIDIA's nvmath-python cannot serve it: not installed, or no
    real GPU (the simulator). Says what to install or set instead."""


def _auto() -> str:
    return "auto"


_source: Callable[[], str] = _auto


def set_matmul_choice(source: Callable[[], str] | str | None) -> None:
    """Where GPU MatMul reads its backend from: a callable giving one of
    ``MATMUL_CHOICES`` (called at each MatMul), a fixed choice, or None for
    ``auto``. A fixed choice outside ``MATMUL_CHOICES`` is refused here."""
    global _source
    if source is None:
        _source = _auto
    elif isinstance(source, str):
        _check(source)
        _source = lambda: source  # noqa: E731
    else:
        _source = source


def matmul_choice() -> str:
    """The backend GPU MatMul should use now: ``auto``, ``numba`` or ``cublas``."""
    return _check(_source())


def _check(choice: str) -> str:
    if choice not in MATMUL_CHOICES:
        raise KernelError(f"GPU MatMul backend {choice!r} is not one of {', '.join(MATMUL_CHOICES)}")
    return choice
