"""``_FusedElementwise``: a chain of elementwise float ops run as one CPU
kernel (the graph optimizer's fusion pass writes the node; docs/ops.md).

The node's attrs hold the chain as a program (see
:mod:`kernels.cpu.fused_jit` for its encoding): ``code`` (an int64 array,
one row per op), ``ops`` (each row's op type), ``imms`` (the scalar
constants folded into it), ``n_regs``, ``dtype`` (float32 or float64) and
``fused`` (the names of the ops it replaces, for messages).

A run takes the numba interpreter when every input has the chain's dtype,
the inputs that are not scalars share one shape and the interpreter for the
dtype is ready; anything else (a feed of another dtype, shapes that
broadcast, numba missing or still loading) runs the program with the numpy
kernels of the ops themselves, op by op, so the result, and any error, is
the unfused graph's. numba is imported by a thread the first fused run
starts (the runs meanwhile take the numpy path), never by ``import
kernels``; if it cannot be imported, every run takes the numpy path.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
from types import ModuleType
from typing import Any

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable, get_kernel

__all__ = ["OPCODES", "FUSIBLE_DTYPES", "INEXACT_OPS", "check_program", "jit_module", "prepare",
           "ready_jit", "run_numpy", "join_loaders", "LOADER_EXIT_WAIT_S"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

logger = logging.getLogger(__name__)

# op type -> (opcode, arity); the opcodes are kernels.cpu.fused_jit's
OPCODES: dict[str, tuple[int, int]] = {
    "Add": (1, 2), "Sub": (2, 2), "Mul": (3, 2), "RealDiv": (4, 2),
    "Neg": (10, 1), "Square": (11, 1), "Abs": (12, 1), "Exp": (13, 1), "Log": (14, 1),
    "Sqrt": (15, 1), "Tanh": (16, 1), "Sigmoid": (17, 1),
}
FUSIBLE_DTYPES = frozenset({"float32", "float64"})
# ops whose fused result may differ from numpy's by a few ulp (the C library's
# exp, log, tanh against numpy's own vector code): fused only when asked for
INEXACT_OPS = frozenset({"Exp", "Log", "Tanh", "Sigmoid"})

_lock = threading.Lock()
_jit: list[Any] = []   # [module or None] once loaded
_ready: set[np.dtype] = set()      # dtypes whose interpreter is compiled or loaded
_loading: set[np.dtype] = set()    # dtypes a loader thread is preparing
_loaders: list[threading.Thread] = []   # joined (bounded) at exit: see join_loaders
LOADER_EXIT_WAIT_S = 30.0


def jit_module() -> ModuleType | None:
    """:mod:`kernels.cpu.fused_jit` (imported, so numba loaded, on the first
    call), or None when numba cannot be imported."""
    if _jit:
        return _jit[0]
    with _lock:
        if not _jit:
            try:
                from kernels.cpu import fused_jit
                _jit.append(fused_jit)
            except ImportError as e:   # numba missing or broken: the numpy path
                logger.info("fused CPU kernels run on numpy: numba unavailable (%s)", e)
                _jit.append(None)
    return _jit[0]


def prepare(dtype: Any) -> bool:
    """Compile (or load from numba's disk cache) the interpreter for
    ``dtype``, waiting for it; False when numba is unavailable."""
    dt = np.dtype(dtype)
    jit = jit_module()
    if jit is None:
        return False
    if dt not in _ready:
        jit.warm(dt)
        _ready.add(dt)
    return True


def ready_jit(dt: np.dtype) -> ModuleType | None:
    """The interpreter module when ``dt``'s is ready, else None, after
    starting a thread that gets it ready: the steps meanwhile run the
    program on numpy (same results), so a first step does not wait for
    numba's import and compile."""
    if dt in _ready:
        return _jit[0]
    with _lock:
        if dt in _loading or (_jit and _jit[0] is None):
            return None
        _loading.add(dt)
    thread = threading.Thread(target=_load, args=(dt,), name="fused-kernel-loader", daemon=True)
    with _lock:
        if not _loaders:
            atexit.register(join_loaders)
        _loaders.append(thread)
    thread.start()
    return None


def join_loaders(timeout: float = LOADER_EXIT_WAIT_S) -> None:
    """At exit: wait (bounded) for loader threads still inside numba. A
    daemon thread left compiling while the interpreter finalizes can crash
    the process (SIGSEGV) after the program itself finished."""
    deadline = time.monotonic() + timeout
    with _lock:
        loaders = list(_loaders)
    for thread in loaders:
        thread.join(max(0.0, deadline - time.monotonic()))


def _load(dt: np.dtype) -> None:
    try:
        prepare(dt)
    except Exception:   # a broken numba: every run stays on numpy
        logger.warning("could not compile the fused CPU kernel for %s", dt, exc_info=True)


def run_numpy(inputs: list, attrs: dict) -> np.ndarray:
    """The program run op by op with each op's own numpy kernel: the
    unfused graph's result (and errors) exactly."""
    dt = np.dtype(attrs["dtype"])
    imms = [np.asarray(v, dt) for v in attrs["imms"]]
    regs: dict[int, Any] = {}

    def operand(kind: int, idx: int) -> Any:
        if kind == 0:
            return inputs[idx]
        if kind == 1:
            return regs[idx]
        return imms[idx]

    out = None
    names = attrs.get("fused") or ()
    for k, (row, op) in enumerate(zip(np.asarray(attrs["code"]).tolist(), attrs["ops"])):
        _, d, ak, ai, bk, bi = row
        args = [operand(ak, ai)] if bk < 0 else [operand(ak, ai), operand(bk, bi)]
        try:
            out = regs[d] = get_kernel(op, CPU)(args, {})[0]
        except (ValueError, TypeError, ArithmeticError) as e:   # name the op, as unfused
            name = names[k] if k < len(names) else op
            raise KernelError(f"{op} (op {name!r}, fused): {e}") from e
    return out


_KINDS = (-1, 0, 1, 2)   # an operand: none (unary), input, register, immediate
_CHECKED_MAX = 4096
_checked: dict[int, tuple[dict, int]] = {}   # id(attrs) -> (attrs, inputs it needs)


def check_program(attrs: dict) -> int:
    """How many inputs the program in ``attrs`` reads, after checking that it
    only names registers, inputs and immediates it has (the interpreter
    does not check bounds: a bad program would write anywhere); a malformed
    one is a KernelError (InvalidArgumentError). Checked once per attrs dict."""
    hit = _checked.get(id(attrs))
    if hit is not None and hit[0] is attrs:
        return hit[1]
    try:
        dt = np.dtype(attrs["dtype"])
        code = attrs["code"]
        ops = attrs["ops"]
        n_regs = attrs["n_regs"]
        n_imms = len(np.asarray(attrs["imms"]).reshape(-1))
        if dt.name not in FUSIBLE_DTYPES or type(code) is not np.ndarray \
                or code.dtype != np.int64 or code.ndim != 2 or code.shape[1] != 6 \
                or not code.shape[0] or not isinstance(ops, (list, tuple)) \
                or len(ops) != code.shape[0] or isinstance(n_regs, bool) \
                or not isinstance(n_regs, (int, np.integer)) or not 0 < n_regs <= code.shape[0]:
            raise ValueError("bad dtype, code, ops or n_regs")
        n_inputs = 0
        written: set[int] = set()
        for row, op in zip(code.tolist(), ops):
            opcode, d, ak, ai, bk, bi = row
            if not isinstance(op, str) or OPCODES.get(op, (None, 0))[0] != opcode \
                    or not 0 <= d < n_regs or ak not in (0, 1, 2) or bk not in _KINDS \
                    or (bk == -1) != (OPCODES[op][1] == 1):
                raise ValueError(f"bad row {row} for {op!r}")
            for kind, idx in ((ak, ai), (bk, bi)):
                if kind == 0:
                    n_inputs = max(n_inputs, idx + 1)
                if (kind == 0 and not 0 <= idx < 1 << 30) or (kind == 1 and idx not in written) \
                        or (kind == 2 and not 0 <= idx < n_imms):
                    raise ValueError(f"row {row}: operand {idx} out of range")
            written.add(d)
    except (KeyError, TypeError, ValueError) as e:
        raise KernelError(f"_FusedElementwise: malformed program ({e})") from None
    if len(_checked) >= _CHECKED_MAX:   # attrs that never repeat: forget, stay bounded
        _checked.clear()
    _checked[id(attrs)] = (attrs, n_inputs)
    return n_inputs


@KERNELS("_FusedElementwise", CPU)
def fused_elementwise(inputs: list, attrs: dict) -> list:
    if len(inputs) < check_program(attrs):
        raise KernelError(f"_FusedElementwise: the program reads {check_program(attrs)} "
                          f"inputs, the node has {len(inputs)}")
    dt = np.dtype(attrs["dtype"])
    shape = None
    ok = True
    for x in inputs:
        if type(x) is not np.ndarray or x.dtype != dt:
            ok = False
            break
        if x.ndim:
            if shape is None:
                shape = x.shape
            elif x.shape != shape:
                ok = False
                break
    jit = ready_jit(dt) if ok else None
    if jit is None:
        return [np.asarray(run_numpy(inputs, attrs))]
    return [_run_jit(jit, inputs, attrs, dt, shape)]


def _run_jit(jit: ModuleType, inputs: list, attrs: dict, dt: np.dtype,
             shape: tuple | None) -> np.ndarray:
    m = len(inputs)
    n_imms = len(attrs["imms"])
    in_kind = np.zeros(m, np.int64)
    in_idx = np.zeros(m, np.int64)
    scalars = []
    rows = []
    for k, x in enumerate(inputs):
        if x.ndim:
            in_idx[k] = len(rows)
            rows.append(x)
        else:
            in_kind[k] = 1
            in_idx[k] = n_imms + len(scalars)
            scalars.append(x)
    scal = np.empty(max(1, n_imms + len(scalars)), dt)
    scal[:n_imms] = attrs["imms"]
    for j, x in enumerate(scalars):
        scal[n_imms + j] = x
    n = 1
    if shape is not None:
        for s in shape:
            n *= s
    if len(rows) == 1:
        ins = np.ascontiguousarray(rows[0]).reshape(1, n)
    elif rows:
        ins = np.empty((len(rows), n), dt)
        for j, x in enumerate(rows):
            ins[j] = x.reshape(n)
    else:
        ins = np.zeros((1, 1), dt)
    regs = np.empty((int(attrs["n_regs"]), min(n, jit.BLOCK) or 1), dt)
    out = np.empty(n, dt)
    if n:
        jit.run_program(np.asarray(attrs["code"]), ins, scal, in_kind, in_idx, regs, out, n,
                        dt.type(1))
    return out.reshape(shape if shape is not None else ())

