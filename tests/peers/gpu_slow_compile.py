"""A task's server (``python -m distrib.server`` arguments) under the CUDA
simulator whose GPU kernels stand in for numba compiling on first use: the
first call of each GPU op with new argument dtypes and shapes first spins
for ``STANDIN_COMPILE_S`` seconds of Python (holding the GIL between thread
switches, as numba's compiler does), then runs the real kernel."""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

COMPILE_S = float(os.environ.get("STANDIN_COMPILE_S", "1.0"))


def slow_first(fn: Callable[[list, dict], list]) -> Callable[[list, dict], list]:
    compiled: set[tuple] = set()
    lock = threading.Lock()   # numba compiles under one lock, too

    def kernel(inputs: list, attrs: dict) -> list:
        key = tuple((getattr(x, "dtype", None), getattr(x, "shape", None)) for x in inputs)
        with lock:
            if key not in compiled:
                end = time.perf_counter() + COMPILE_S
                while time.perf_counter() < end:
                    pass
                compiled.add(key)
        return fn(inputs, attrs)
    return kernel


def main() -> Any:
    from kernels.registry import GPU, get_kernel, register, registered_ops, unregister
    for op in registered_ops(GPU):
        fn = get_kernel(op, GPU)
        unregister(op, GPU)
        register(op, GPU)(slow_first(fn))
    from distrib.server.__main__ import main as serve
    return serve(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
