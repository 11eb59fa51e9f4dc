"""Every CUDA kernel the registry can launch, compiled for real GPUs on a
machine without one.

numba's CUDA simulator runs kernels as Python and accepts code the real
compiler refuses (a shared array whose shape is an expression, say: every
MatMul failed on the first real GPU while the simulator suite passed). So
this test compiles, with NVIDIA's own NVVM compiler (the ``nvidia-nvvm``
wheel of the ``test`` extra), each (kernel, argument types) pair that the
registered GPU ops launch, for compute capabilities 8.0 and 9.0, as
``numba.cuda.compile_ptx`` does: the same typing, lowering and NVVM code
generation a first launch on a GPU goes through, without a driver (typed
and lowered once, NVVM run per target; ``compile_all`` says when that is
the same, and the test checks it). Two child interpreters share the work.

Which pairs: a fresh interpreter without the simulator (``record`` below)
replaces numba's device arrays by host arrays that type like them and its
kernel launches by a recorder, then runs every op of ``registered_ops("GPU")``
for every dtype its CPU kernel serves, on cases built from the op catalogue
(an update op's variable, slots and hyper-parameters from its entry; other
ops from ``CASES`` or, by default, one tensor per declared input). A new GPU
op is therefore picked up by itself; one that no case can run fails the test
and says what to add. Every kernel object reachable from the ``kernels.cuda``
modules must have been launched by some case, and every launched kernel must
cache its compiled code on disk (``cache=True``) with a key numba can compute.

The test skips (with the reason) only when the NVVM wheel is not installed.
"""
from __future__ import annotations

import importlib.metadata
import json
import operator
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:     # run as a script (the compile children)
    sys.path.insert(0, ROOT)
from tests import background  # noqa: E402

CCS = ((8, 0), (9, 0))
PARTS = 2   # child interpreters, each compiling its share of the launches for every target
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
RNG = np.random.default_rng(7)


def _nvvm_missing() -> str | None:
    try:
        importlib.metadata.version("nvidia-nvvm")
    except importlib.metadata.PackageNotFoundError:
        return ("NVIDIA's NVVM compiler wheel (nvidia-nvvm) is not installed: "
                "pip install -e '.[test]' brings it")
    return None


# --- cases: (inputs, attrs) an op runs on, per dtype --------------------------------

def _x(dtype: str, *shape: int) -> np.ndarray:
    a = RNG.standard_normal(shape or (4, 6)) * 3
    if dtype == "bool":
        return a > 0
    if np.dtype(dtype).kind in "iu":
        return np.abs(a).astype(dtype) + 1   # positive, no zero (RealDiv, Log, Sqrt)
    return (np.abs(a) + 0.5).astype(dtype)


def _binary(d: str) -> list:
    x = _x(d)
    return [([x, _x(d)], {}), ([x, _x(d, 6)], {}), ([x, _x(d, 1).reshape(())], {}),
            ([_x(d, 1).reshape(()), x], {}), ([_x(d, 4, 1), x], {})]


def _labels(dtype: str) -> list:
    return [([_x(dtype), np.eye(6, dtype=dtype)[[0, 3, 5, 1]]], {})]


# the convolutional ops (kernels.cuda.conv, pooling, normalization): NHWC x (2, 5, 6, 3)
_CONV = ({"strides": [1, 1, 1, 1], "padding": "SAME"},
         {"strides": [1, 2, 1, 1], "padding": "VALID", "dilations": [1, 1, 2, 1]},
         {"strides": [1, 1, 2, 1], "padding": "EXPLICIT", "explicit_paddings": [0, 0, 1, 0, 2, 1, 0, 0]})
_POOL = ({"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"},
         {"ksize": [1, 1, 3, 3], "strides": [1, 1, 2, 2], "padding": "VALID", "data_format": "NCHW"})


def _cpu_shape(op: str, inputs: list, attrs: dict) -> tuple:
    from kernels.registry import CPU, get_kernel
    return get_kernel(op, CPU)([np.array(x) for x in inputs], dict(attrs))[0].shape


def _conv(op: str, d: str) -> list:
    out = []
    for attrs in _CONV + ({**_CONV[0], "data_format": "NCHW", "strides": [1, 1, 1, 2]},):
        nchw = attrs.get("data_format") == "NCHW"
        x, w = _x(d, *((2, 3, 5, 6) if nchw else (2, 5, 6, 3))), _x(d, 3, 3, 3, 4)
        try:
            dy = _x(d, *_cpu_shape("Conv2D", [x, w], attrs))
        except (ValueError, TypeError):   # a dtype Conv2D does not serve
            dy = _x(d, 2, 5, 6, 4)
        ins = {"Conv2D": [x, w], "Conv2DBackpropInput": [np.array(x.shape, np.int32), w, dy],
               "Conv2DBackpropFilter": [x, np.array(w.shape, np.int32), dy]}[op]
        out.append((ins, attrs))
    if op == "Conv2DBackpropFilter":   # k = 4 * 16 * 16: split over the grid, then summed
        x, dy = _x(d, 4, 16, 16, 3), _x(d, 4, 16, 16, 4)
        out.append(([x, np.array([3, 3, 3, 4], np.int32), dy], _CONV[0]))
    return out


def _depthwise(op: str, d: str) -> list:
    x, w, dy = _x(d, 2, 5, 6, 3), _x(d, 3, 3, 3, 2), _x(d, 2, 5, 6, 6)
    ins = {"DepthwiseConv2dNative": [x, w],
           "DepthwiseConv2dNativeBackpropInput": [np.array(x.shape, np.int32), w, dy],
           "DepthwiseConv2dNativeBackpropFilter": [x, np.array(w.shape, np.int32), dy]}[op]
    return [(ins, _CONV[0])]


def _pool(op: str, d: str) -> list:
    out = []
    for attrs in _POOL:
        x = _x(d, *((2, 3, 5, 6) if attrs.get("data_format") == "NCHW" else (2, 5, 6, 3)))
        if op in ("MaxPool", "AvgPool"):
            out.append(([x], attrs))
            continue
        try:
            y = _x(d, *_cpu_shape("MaxPool", [x], attrs))
        except (ValueError, TypeError):
            y = _x(d, 2, 3, 3, 3)
        out.append(([x, y, y] if op == "MaxPoolGrad" else [np.array(x.shape, np.int32), y], attrs))
    return out


def _lrn(op: str, d: str) -> list:
    x = _x(d, 2, 5, 6, 3)
    return [([x] if op == "LRN" else [x, x, x], {"depth_radius": 2, "alpha": 0.1, "beta": b})
            for b in (0.75, 0.5, 1.0, 0.6)]


def _batch_norm(op: str, d: str) -> list:
    u = "float64" if d == "float64" else "float32"
    out = []
    for attrs in ({"is_training": True}, {"is_training": False},
                  {"is_training": True, "exponential_avg_factor": 0.5},
                  {"is_training": True, "data_format": "NCHW"}):
        x = _x(d, *((2, 3, 5, 6) if attrs.get("data_format") == "NCHW" else (2, 5, 6, 3)))
        vecs = [_x(u, 3) for _ in range(4 if op == "FusedBatchNormV3" else 3)]
        out.append(([x] + vecs if op == "FusedBatchNormV3" else [x, x] + vecs, attrs))
    return out


CASES: dict[str, Callable[[str], list]] = {
    "Const": lambda d: [([], {"value": _x(d), "dtype": d})],
    "Zeros": lambda d: [([], {"shape": [4, 6], "dtype": d})],
    "Ones": lambda d: [([], {"shape": [4, 6], "dtype": d})],
    "Cast": lambda d: [([_x(d)], {"dtype": to}) for to in DTYPES],
    "Reshape": lambda d: [([_x(d)], {"shape": [6, -1]})],
    "BiasAdd": lambda d: [([_x(d), _x(d, 6)], {})],
    "MatMul": lambda d: [([_x(d), _x(d, 6, 5)], {}),
                         ([_x(d, 6, 4), _x(d, 6, 5)], {"transpose_a": True}),
                         ([_x(d), _x(d, 5, 6)], {"transpose_b": True})],
    "Sum": lambda d: [([_x(d)], {"axis": a}) for a in (None, 0, 1)],
    "Mean": lambda d: [([_x(d)], {"axis": a}) for a in (None, 0, 1)],
    "ArgMax": lambda d: [([_x(d)], {"axis": 1, "output_type": t}) for t in ("int32", "int64")],
    "_FusedBiasRelu": lambda d: [([_x(d), _x(d, 6)], {"bias_add": True}), ([_x(d), _x(d)], {}),
                                 ([_x(d), _x(d, 4, 1)], {})],
    "BroadcastToShapeOf": lambda d: [
        ([_x(d, 1).reshape(()), np.zeros((4, 6), d)], {"mean": m}) for m in (False, True)] + [
        ([_x(d, 4), np.zeros((4, 6), d)], {"axis": 1})],
    "SumToShapeOf": lambda d: [([_x(d), np.zeros(s, d)], {}) for s in ((), (6,), (1, 6))],
    "BroadcastTo": lambda d: [([_x(d, 4, 1), np.array([3, 4, 6], t)], {}) for t in ("int32",
                                                                                    "int64")],
    "SoftmaxCrossEntropyWithLogits": _labels,
    "SparseSoftmaxCrossEntropyWithLogits": lambda d: [
        ([_x(d), np.array([0, 3, 5, 1], t)], {}) for t in ("int32", "int64")],
    **{op: (lambda d, op=op: _conv(op, d))
       for op in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")},
    **{op: (lambda d, op=op: _depthwise(op, d))
       for op in ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
                  "DepthwiseConv2dNativeBackpropFilter")},
    **{op: (lambda d, op=op: _pool(op, d))
       for op in ("MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad")},
    **{op: (lambda d, op=op: _lrn(op, d)) for op in ("LRN", "LRNGrad")},
    **{op: (lambda d, op=op: _batch_norm(op, d))
       for op in ("FusedBatchNormV3", "FusedBatchNormGradV3")},
}
_IDS = ("int32", "int64")
# the embeddings' ops (kernels/cuda/gather.py): rows of a table at ids, a variable's rows updated
CASES.update({
    "GatherV2": lambda d: [([_x(d, 5, 3), np.array([4, 0, 4], t)], {"axis": 0, "batch_dims": 0})
                           for t in _IDS],
    "ResourceGather": lambda d: [([_x(d, 5, 3), np.array([4, 0, 4], t)], {}) for t in _IDS],
    "UnsortedSegmentSum": lambda d: [([_x(d, 6, 3), np.array([1, 0, -1, 1, 2, 0], t),
                                       np.array(3, np.int32)], {}) for t in _IDS],
    **{op: (lambda d: [([_x(d, 5, 3), np.array([4, 1, 4], t), _x(d, 3, 3)], {}) for t in _IDS])
       for op in ("ScatterAdd", "ScatterSub")},
})

# an update op's inputs that are tensors shaped like the variable; the others are scalars
_TENSOR_INPUTS = {"grad", "delta", "value"}


def cases_for(op: str, dtype: str) -> list:
    """The (inputs, attrs) cases of ``op`` for ``dtype`` (the inputs host arrays)."""
    from distrib.framework.op_def import op_def
    if op in CASES:
        return CASES[op](dtype)
    d = op_def(op)
    if d.is_update:   # [var, *slots, *inputs] (distrib.runtime.state.stateful)
        state = [_x(dtype) for _ in range(1 + len(d.slot_attrs))]
        args = [_x(dtype) if name in _TENSOR_INPUTS else _x(dtype, 1).reshape(())
                for name in d.inputs]
        out = [(state + args, {})]
        if op == "ApplyMomentum":
            out.append((state + args, {"use_nesterov": True}))
        if any(name in ("delta", "value") for name in d.inputs):   # a scalar delta
            out.append((state + [_x(dtype, 1).reshape(())], {}))
        return out
    required = [n for n in d.inputs if not n.endswith(("?", "*"))]
    if len(required) == 2:   # equal shapes, a row, scalars (those its CPU kernel takes)
        return _binary(dtype)
    return [([_x(dtype) for _ in required], {})]


# --- the child: record every launch, compile it for each target -------------------

class FakeDeviceArray:
    """Host memory posing as a numba device array: the kernels' host code runs
    on it unchanged, and numba types it as it types a contiguous device array."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = np.ascontiguousarray(host)

    shape = property(lambda self: self.host.shape)
    dtype = property(lambda self: self.host.dtype)
    ndim = property(lambda self: self.host.ndim)
    size = property(lambda self: self.host.size)
    nbytes = property(lambda self: self.host.nbytes)

    @property
    def _numba_type_(self) -> Any:
        from numba import typeof
        return typeof(self.host)

    def reshape(self, *shape: Any) -> FakeDeviceArray:
        return FakeDeviceArray(self.host.reshape(*shape))

    def copy_to_host(self, ary: Any = None, stream: Any = 0) -> np.ndarray:
        return self.host.copy()

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        self.host[...] = np.asarray(ary)


class _Recorder:
    """What ``kernel[grid, block]`` returns while recording: notes the argument types."""

    def __init__(self, kernel: Any, launches: dict, label: list) -> None:
        self.kernel, self.launches, self.label = kernel, launches, label

    def __call__(self, *args: Any) -> None:
        sig = tuple(self.kernel.typeof_pyval(a) for a in args)
        entry = self.launches.setdefault((id(self.kernel), sig), [self.kernel, sig, []])
        if len(entry[2]) < 3:
            entry[2].append(self.label[0])


def _install_fakes(launches: dict, label: list) -> None:
    from numba import cuda
    from numba.cuda.dispatcher import CUDADispatcher
    CUDADispatcher.__getitem__ = lambda self, cfg: _Recorder(self, launches, label)
    cuda.to_device = lambda obj, *a, **k: FakeDeviceArray(np.array(obj, copy=True))
    cuda.device_array = lambda shape, dtype=np.float64, *a, **k: FakeDeviceArray(
        np.zeros(shape, dtype=dtype))
    cuda.as_cuda_array = lambda obj, *a, **k: FakeDeviceArray(np.asarray(obj))
    # the device copies kept for reuse are keyed by the current device's id
    cuda.get_current_device = lambda: SimpleNamespace(id=0)


def _kernel_objects() -> dict[int, tuple[Any, str]]:
    """Every CUDA kernel (not device function) reachable from the kernels.cuda
    modules: their globals, the dicts among them, and the closures of their
    functions (factories' kernels live there), by id."""
    from numba.cuda.dispatcher import CUDADispatcher
    found: dict[int, tuple[Any, str]] = {}
    seen: set[int] = set()

    def visit(obj: Any, where: str, depth: int) -> None:
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        if isinstance(obj, CUDADispatcher):
            if not obj.targetoptions.get("device"):
                found[id(obj)] = (obj, where)
            return
        if isinstance(obj, dict):
            for k, v in list(obj.items()):
                visit(v, f"{where}[{k!r}]", depth + 1)
        elif callable(obj) and getattr(obj, "__closure__", None):
            for name, cell in zip(obj.__code__.co_freevars, obj.__closure__):
                try:
                    visit(cell.cell_contents, f"{where}.<{name}>", depth + 1)
                except ValueError:   # an empty cell
                    pass

    for name, mod in sorted(sys.modules.items()):
        if name.startswith("kernels.cuda") and mod is not None:
            for attr, value in vars(mod).items():
                visit(value, f"{name}.{attr}", 0)
    from kernels.registry import GPU, get_kernel, registered_ops
    for op in registered_ops(GPU):
        visit(get_kernel(op, GPU), f"registry[{op}]", 0)
    return found


def _cache_problem(kernel: Any, sig: tuple) -> str | None:
    """Why ``kernel`` would not reuse its compiled code from disk, or None."""
    from numba.cuda.dispatcher import CUDACache

    class Codegen:   # the key's target part, without a driver
        def magic_tuple(self) -> tuple:
            return ((13, 0), (9, 0))
    cache = kernel._cache
    if not isinstance(cache, CUDACache):
        return "not cached on disk: give its @cuda.jit cache=True"
    try:
        cache._index_key(sig, Codegen())
    except Exception as e:   # e.g. a closure variable numba cannot pickle
        return f"numba cannot compute its cache key: {type(e).__name__}: {e}"
    return None


def _assign(ufunc: Any) -> Callable[[list, dict], list]:
    # what distrib.runtime.state.stateful does for a CPU variable
    def run(inputs: list, attrs: dict) -> list:
        return [ufunc(inputs[0], np.asarray(inputs[1], inputs[0].dtype), out=inputs[0])]
    return run


# the CPU behaviour of GPU ops that the runtime, not a CPU kernel, runs on a CPU
REFERENCES: dict[str, Callable[[list, dict], list]] = {
    "AssignAdd": _assign(np.add), "AssignSub": _assign(np.subtract)}


def _cpu_reference(op: str) -> Callable[[list, dict], list] | None:
    from kernels.registry import CPU, get_kernel, has_kernel
    return get_kernel(op, CPU) if has_kernel(op, CPU) else REFERENCES.get(op)


def _run_case(op: str, dtype: str, inputs: list, attrs: dict, label: list) -> str:
    """'cpu': the CPU kernel refuses it (a dtype the op does not serve) or the
    GPU kernel does with a KernelError; 'ok'; or the GPU kernel's crash."""
    import kernels
    from kernels.registry import GPU
    try:
        _cpu_reference(op)([np.array(x) for x in inputs], dict(attrs))
    except (ValueError, TypeError, ArithmeticError):
        return "cpu"
    label[0] = f"{op}[{dtype}]{attrs or ''}"
    try:
        kernels.get_kernel(op, GPU)([FakeDeviceArray(x) for x in inputs], dict(attrs))
    except kernels.KernelError:   # refused with a typed error: a case the GPU op does not serve
        return "cpu"
    except Exception as e:   # the GPU op's host code broke where the CPU kernel ran
        return f"{type(e).__name__}: {e}"
    return "ok"


def record() -> tuple[dict, list[str], dict]:
    """Every (kernel, argument types) the registered GPU ops launch; the ops
    no case could run; each op's (dtype: outcome) table."""
    launches: dict = {}
    label = [""]
    _install_fakes(launches, label)
    from kernels.cuda.loader import load as load_gpu_kernels
    from kernels.registry import GPU, registered_ops
    load_gpu_kernels()   # raises what the registry would only log (it falls back to CPU)
    no_case, served = [], {}
    for op in registered_ops(GPU):
        if _cpu_reference(op) is None:
            no_case.append(f"{op}: no CPU kernel to check a case against; add one to "
                           "REFERENCES in tests/test_kernels_compile.py")
            continue
        outcomes = {}
        for dtype in DTYPES:
            try:
                cases = cases_for(op, dtype)
            except Exception as e:
                outcomes[dtype] = f"case error: {type(e).__name__}: {e}"
                continue
            results = [_run_case(op, dtype, ins, attrs, label) for ins, attrs in cases]
            outcomes[dtype] = next((r for r in results if r not in ("ok", "cpu")),
                                   "ok" if "ok" in results else "cpu")
        served[op] = outcomes
        if all(v == "cpu" for v in outcomes.values()):
            no_case.append(f"{op}: its CPU kernel refused every case; add one to CASES in "
                           "tests/test_kernels_compile.py")
    return launches, no_case, served


class _WatchedCC(tuple):
    """The compute capability numba's lowering reads from its flags, noting
    every comparison with another value: a decision that could differ
    between the targets."""

    seen: set = set()
    reads = 0

    def _note(self, op: str, other: Any) -> None:
        if not isinstance(other, _WatchedCC):   # the flags' own value: equal on every target
            import traceback
            frame = traceback.extract_stack(limit=3)[0]   # the comparison's line
            where = f"{frame.filename.rsplit('site-packages/', 1)[-1]}:{frame.lineno}"
            _WatchedCC.seen.add((op, other if not isinstance(other, tuple) else tuple(other), where))

    def __lt__(self, o: Any) -> bool:
        self._note("__lt__", o)
        return tuple.__lt__(self, o)

    def __le__(self, o: Any) -> bool:
        self._note("__le__", o)
        return tuple.__le__(self, o)

    def __gt__(self, o: Any) -> bool:
        self._note("__gt__", o)
        return tuple.__gt__(self, o)

    def __ge__(self, o: Any) -> bool:
        self._note("__ge__", o)
        return tuple.__ge__(self, o)

    def __eq__(self, o: Any) -> bool:
        self._note("__eq__", o)
        return tuple.__eq__(self, o)

    def __ne__(self, o: Any) -> bool:
        self._note("__ne__", o)
        return tuple.__ne__(self, o)

    __hash__ = tuple.__hash__


def _watch_lowering_cc() -> None:
    from numba.cuda.flags import CUDAFlags
    prop = CUDAFlags.__dict__["compute_capability"]

    def read(flags: Any) -> Any:
        cc = prop.fget(flags)
        if cc is None:
            return cc
        _WatchedCC.reads += 1
        return _WatchedCC(cc)
    CUDAFlags.compute_capability = property(read, prop.fset, prop.fdel)


def _target_dependent(targets: tuple) -> list[str]:
    """The comparisons lowering made whose outcome differs between ``targets``."""
    out = []
    for op, other, where in sorted(_WatchedCC.seen, key=repr):
        outcomes = set()
        for cc in targets:
            try:
                outcomes.add(getattr(operator, op)(cc, other))
            except TypeError as e:   # an ordering against None, say
                outcomes.add(type(e))
        if len(outcomes) > 1:
            out.append(f"{where}: compute capability {op} {other!r}")
    return out


def _claim(claims: str, group: int) -> bool:
    """Whether this child takes ``group`` (no other child took it first)."""
    try:
        os.close(os.open(os.path.join(claims, str(group)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def compile_all(claims: str) -> dict:
    """The child's work: record, then compile its share of the launches for
    every target of ``CCS``: a kernel's launches at a time, those of the
    kernels no other child claimed first in folder ``claims`` (the children
    record the same launches in the same order).

    numba types and lowers a launch once, at the first target's compute
    capability (a device function a kernel calls compiles with the current
    device's, which numba asks the driver for, and stays compiled in its
    dispatcher), and NVVM generates each target's PTX from that IR: what a
    first launch on each GPU does, as long as the lowering decides nothing
    on the compute capability that differs between the targets. Every
    comparison the lowering makes with it is noted, and one that would come
    out otherwise for another target fails the test (then lower per target)."""
    t0 = time.perf_counter()
    launches, no_case, served = record()
    import numba.cuda.dispatcher as dispatcher
    from numba.cuda import compiler
    lowering_cc = CCS[0]
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=lowering_cc)
    _watch_lowering_cc()
    launched_ids = {k[0] for k in launches}
    never = sorted(where for kid, (_, where) in _kernel_objects().items() if kid not in launched_ids)
    failures, cache = [], []
    t1 = time.perf_counter()
    named = [(f"{kernel.py_func.__module__}.{kernel.py_func.__qualname__}{tuple(map(str, sig))}",
              kernel, sig, labels) for kernel, sig, labels in launches.values()]
    groups: dict[int, list[int]] = {}   # a kernel's launches, by kernel
    for i, (kernel, _, _) in enumerate(launches.values()):
        groups.setdefault(id(kernel), []).append(i)
    share: list[int] = []   # claimed one kernel at a time, when this child is ready for it
    mine = (i for g, group in enumerate(groups.values()) if _claim(claims, g) for i in group)
    for i in mine:
        share.append(i)
        name, kernel, sig, labels = named[i]
        problem = _cache_problem(kernel, sig)
        if problem:
            cache.append(f"{name}: {problem}")
        opts = {k: kernel.targetoptions[k] for k in ("fastmath", "debug", "lineinfo")
                if k in kernel.targetoptions}
        stage = "cc " + " and ".join(f"{cc[0]}.{cc[1]}" for cc in CCS) + " (typing, lowering)"
        try:   # what cuda.compile_ptx does, its code library kept for every target
            lib, _ = compiler._compile_pyfunc_with_fixup(
                kernel.py_func, sig, device=False, abi="numba", cc=lowering_cc, **opts)
            for cc in CCS:
                stage = f"cc {cc[0]}.{cc[1]}"
                ptx = lib.get_asm_strs(cc=cc)
                if len(ptx) != 1 or f".target sm_{cc[0]}{cc[1]}" not in ptx[0]:
                    raise RuntimeError(f"not one PTX module for sm_{cc[0]}{cc[1]}: {len(ptx)}")
        except Exception as e:
            msg = [m.strip() for m in str(e).strip().splitlines() if m.strip()]
            failures.append(f"{stage}: {name}, launched by {labels}: "
                            f"{type(e).__name__}: {' '.join(msg[:6])}")
    return {"pairs": len(launches), "compiled": share,
            "order": [name for name, *_ in named],
            "kernels": len(launched_ids), "failures": failures,
            "never_launched": never, "no_case": no_case, "cache": cache,
            "target_dependent": _target_dependent(CCS), "cc_reads": _WatchedCC.reads,
            "gpu_crashed": {op: {d: r for d, r in o.items() if r not in ("ok", "cpu")}
                            for op, o in served.items()},
            "record_s": t1 - t0, "compile_s": time.perf_counter() - t1}


# --- the test -------------------------------------------------------------------------

def _part(part: int) -> background.Spec | None:
    """Child ``part``: every child records every launch, then compiles the pairs it
    claims first in the session's claims directory (shared by the parts)."""
    if _nvvm_missing():
        return None
    claims = os.path.join(background.scratch_dir(), "kernels-compile-claims")
    os.makedirs(claims, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(CUDA_VISIBLE_DEVICES="", NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    return background.Spec([sys.executable, os.path.abspath(__file__), claims], env, 900)


BACKGROUND = {f"kernels_compile_{i}": (lambda i=i: _part(i)) for i in range(PARTS)}


def _child(part: int) -> dict:
    out = background.run(f"kernels_compile_{part}", _part(part))
    assert out.returncode == 0, out.stderr[-6000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.background(*BACKGROUND)
def test_every_gpu_kernel_compiles_for_real_targets():
    reason = _nvvm_missing()
    if reason:
        pytest.skip(reason)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(PARTS) as pool:   # two interpreters: two cores (or started early)
        results = list(pool.map(_child, range(PARTS)))
    took = time.perf_counter() - t0
    first = results[0]
    # every child recorded the same launches in the same order, and compiled its own share
    assert all(r["order"] == first["order"] for r in results)
    assert sorted(i for r in results for i in r["compiled"]) == list(range(first["pairs"]))
    print(f"{first['kernels']} kernels, {first['pairs']} (kernel, types) pairs, x{len(CCS)} "
          f"targets: {took:.1f}s (record {first['record_s']:.1f}s, compile "
          f"{'/'.join(format(r['compile_s'], '.1f') for r in results)}s)")
    assert first["pairs"] > 0 and first["kernels"] > 10
    assert not first["no_case"], "\n".join(first["no_case"])
    assert not first["never_launched"], (
        "CUDA kernels that no case launches (add a case to CASES in "
        "tests/test_kernels_compile.py):\n" + "\n".join(first["never_launched"]))
    failures = [f for r in results for f in r["failures"]]
    assert not failures, f"{len(failures)} kernel compilations failed:\n" + "\n".join(failures)
    crashed = {op: r for op, r in first["gpu_crashed"].items() if r}
    assert not crashed, f"the GPU kernel crashed where the CPU kernel ran: {crashed}"
    cache = [c for r in results for c in r["cache"]]
    assert not cache, "\n".join(cache)
    # (a part started early may have compiled every pair before the other started)
    assert all(r["cc_reads"] > 0 for r in results if r["compiled"]), \
        "the lowering's compute capability went unwatched"
    dependent = sorted({d for r in results for d in r["target_dependent"]})
    assert not dependent, (
        "numba's lowering decides on the compute capability otherwise for another target; "
        "lower each launch per target (cc passed to compile_ptx):\n" + "\n".join(dependent))


def test_a_lowering_decision_that_differs_between_the_targets_is_caught():
    seen = set(_WatchedCC.seen)
    try:
        _WatchedCC.seen.clear()
        cc = _WatchedCC(CCS[0])
        assert cc >= (7, 5) and cc == _WatchedCC(CCS[0])   # the same on every target
        assert not _target_dependent(CCS)
        assert not cc >= (9, 0)   # true on 9.0 only
        [found] = _target_dependent(CCS)
        assert found.startswith(os.path.abspath(__file__) + ":"), found   # where it was made
        assert found.endswith("compute capability __ge__ (9, 0)"), found
    finally:
        _WatchedCC.seen.clear()
        _WatchedCC.seen.update(seen)


def test_the_compile_check_runs_in_the_test_dependencies():
    """``make test`` and CI install the test extra: the NVVM wheels must be in it,
    so the compile test above runs there instead of skipping."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        test_extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    names = {r.split("==")[0].split("[")[0].strip().lower() for r in test_extra}
    assert {"numba-cuda", "nvidia-nvvm", "nvidia-cuda-nvrtc"} <= names


def test_the_compile_check_skips_only_for_a_missing_nvvm_wheel(monkeypatch):
    def absent(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", absent)
    assert "nvidia-nvvm" in _nvvm_missing()


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    json.dump(compile_all(sys.argv[1]), sys.stdout)
    print()
