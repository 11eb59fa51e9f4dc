"""CPU kernels of TF's everyday array names that real programs call (issue
39's remainder): ``Fill``, ``Size``, ``Rank``, ``LinSpace``, ``Roll``,
``DepthToSpace``/``SpaceToDepth``, ``LowerBound``/``UpperBound``
(``tf.searchsorted``), and the ops with side effects of ``tf.print`` and the
``tf.debugging`` asserts: ``StringFormat``, ``PrintV2``, ``Assert``.

TF's rules and messages (array_ops.cc, logging_ops.cc, the kernels'
``OP_REQUIRES``): ``LinSpace``'s last element is ``stop`` exactly; a
``Roll`` of one axis named twice shifts it by the sum; ``StringFormat``
prints a tensor as TF's ``SummarizeValue`` does (``[0 1 2 ... 7 8 9]`` at
``summarize=3``, rows on new lines); a failed ``Assert`` is an error
carrying its data as TF's kernel writes it (``assertion failed: [message]
[1 2 3...]``, each input bracketed, its first ``summarize`` elements). ``PrintV2`` writes to the stream it names in the process
that runs it (stderr, stdout, or the ``logging`` module's levels).
"""
from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np

from kernels.dtypes import as_dtype
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["format_tensor", "format_template", "summarize_legacy", "KERNELS"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

logger = logging.getLogger(__name__)


def _int_vector(value: Any, what: str, op: str) -> list[int]:
    v = np.asarray(value)
    if v.dtype.kind not in "iu" or v.ndim > 1:
        raise KernelError(f"{op}: {what} must be an integer scalar or vector, got {v.dtype} "
                          f"of shape {list(v.shape)}")
    return [int(x) for x in v.reshape(-1)]


@KERNELS("Fill", CPU)
def fill(inputs: list, attrs: dict) -> list:
    dims, value = np.asarray(inputs[0]), np.asarray(inputs[1])
    if dims.ndim != 1:
        raise KernelError(f"Fill: dims must be a vector, got shape {list(dims.shape)}")
    if value.ndim != 0:
        raise KernelError(f"Fill: value must be a scalar, got shape {list(value.shape)}")
    shape = _int_vector(dims, "dims", "Fill")
    if any(d < 0 for d in shape):
        raise KernelError(f"Fill: dims {shape} must be non-negative")
    return [np.full(shape, value, dtype=value.dtype)]


@KERNELS("Size", CPU)
def size(inputs: list, attrs: dict) -> list:
    return [np.asarray(np.size(inputs[0]), dtype=as_dtype(attrs.get("out_type") or "int32"))]


@KERNELS("Rank", CPU)
def rank(inputs: list, attrs: dict) -> list:
    return [np.asarray(np.ndim(inputs[0]), dtype=np.int32)]


@KERNELS("LinSpace", CPU)
def lin_space(inputs: list, attrs: dict) -> list:
    start, stop, num = (np.asarray(v) for v in inputs)
    if start.ndim or stop.ndim or num.ndim:
        raise KernelError(f"LinSpace: start, stop and num must be scalars, got shapes "
                          f"{list(start.shape)}, {list(stop.shape)}, {list(num.shape)}")
    n = int(num)
    if n <= 0:
        raise KernelError(f"LinSpace: Requires num > 0: {n}")
    dtype = start.dtype
    if n == 1:
        return [np.array([start], dtype=dtype)]
    step = (stop - start) / dtype.type(n - 1)
    out = start + step * np.arange(n, dtype=dtype)
    out[-1] = stop
    return [out.astype(dtype, copy=False)]


@KERNELS("Roll", CPU)
def roll(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    shift = _int_vector(inputs[1], "shift", "Roll")
    axis = _int_vector(inputs[2], "axis", "Roll")
    if np.ndim(inputs[1]) != np.ndim(inputs[2]) or len(shift) != len(axis):
        raise KernelError(f"Roll: shift and axis must have the same size, got {shift} and "
                          f"{axis}")
    for a in axis:
        if not -x.ndim <= a < x.ndim:
            raise KernelError(f"Roll: axis {a} is out of range for a rank-{x.ndim} input")
    if x.ndim == 0 or not axis:
        return [x.copy()]
    return [np.roll(x, tuple(shift), tuple(a % x.ndim for a in axis))]


# -- depth and space ------------------------------------------------------------------------
def _nhwc(x: np.ndarray, fmt: str, op: str) -> np.ndarray:
    if x.ndim != 4:
        raise KernelError(f"{op}: input must be 4-D, got shape {list(x.shape)}")
    if fmt not in ("NHWC", "NCHW"):
        raise KernelError(f"{op}: data_format must be NHWC or NCHW, got {fmt!r}")
    return x if fmt == "NHWC" else x.transpose(0, 2, 3, 1)


def _block(attrs: dict, op: str) -> int:
    b = int(attrs.get("block_size", 0))
    if b < 2:
        raise KernelError(f"{op}: Block size should be > 1, got {b}")
    return b


@KERNELS("DepthToSpace", CPU)
def depth_to_space(inputs: list, attrs: dict) -> list:
    fmt = attrs.get("data_format") or "NHWC"
    b = _block(attrs, "DepthToSpace")
    x = _nhwc(np.asarray(inputs[0]), fmt, "DepthToSpace")
    n, h, w, c = x.shape
    if c % (b * b):
        raise KernelError(f"DepthToSpace: Input depth dimension {c} should be divisible by: "
                          f"{b * b}")
    out = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
    out = out.reshape(n, h * b, w * b, c // (b * b))
    return [np.ascontiguousarray(out if fmt == "NHWC" else out.transpose(0, 3, 1, 2))]


@KERNELS("SpaceToDepth", CPU)
def space_to_depth(inputs: list, attrs: dict) -> list:
    fmt = attrs.get("data_format") or "NHWC"
    b = _block(attrs, "SpaceToDepth")
    x = _nhwc(np.asarray(inputs[0]), fmt, "SpaceToDepth")
    n, h, w, c = x.shape
    if h % b or w % b:
        raise KernelError(f"SpaceToDepth: Image width {w} and height {h} should be divisible "
                          f"by block_size: {b}")
    out = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
    out = out.reshape(n, h // b, w // b, b * b * c)
    return [np.ascontiguousarray(out if fmt == "NHWC" else out.transpose(0, 3, 1, 2))]


# -- searchsorted ---------------------------------------------------------------------------
def _bound(inputs: list, attrs: dict, side: str, op: str) -> list:
    seq, values = np.asarray(inputs[0]), np.asarray(inputs[1])
    if seq.ndim < 1 or values.ndim < 1 or seq.shape[:-1] != values.shape[:-1]:
        raise KernelError(f"{op}: sorted_inputs {list(seq.shape)} and values "
                          f"{list(values.shape)} must have the same leading dimensions "
                          "(all but the last)")
    rows_s = seq.reshape(-1, seq.shape[-1])
    rows_v = values.reshape(-1, values.shape[-1])
    out = np.empty(rows_v.shape, dtype=as_dtype(attrs.get("out_type") or "int32"))
    for i in range(rows_v.shape[0]):
        out[i] = np.searchsorted(rows_s[i], rows_v[i], side=side)
    return [out.reshape(values.shape)]


@KERNELS("LowerBound", CPU)
def lower_bound(inputs: list, attrs: dict) -> list:
    return _bound(inputs, attrs, "left", "LowerBound")


@KERNELS("UpperBound", CPU)
def upper_bound(inputs: list, attrs: dict) -> list:
    return _bound(inputs, attrs, "right", "UpperBound")


# -- tf.print and the asserts ---------------------------------------------------------------
def _element(v: Any, quote: bool) -> str:
    if isinstance(v, (bytes, str)):
        s = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        return f'"{s}"' if quote else s
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (float, np.floating)):
        for digits in ((6, 9) if isinstance(v, np.float32) else (15, 17)):
            text = f"{float(v):.{digits}g}"
            if type(v)(text) == v or np.isnan(v):
                return text
        return text
    return str(v)


def _summarize(x: np.ndarray, n: int, depth: int, quote: bool) -> str:
    if x.ndim == 0:
        return _element(x[()], quote)
    size = x.shape[0]
    if 0 <= n and size > 2 * n:
        idx = list(range(n)) + [None] + list(range(size - n, size))
    else:
        idx = list(range(size))
    if x.ndim == 1:
        return "[" + " ".join("..." if i is None else _element(x[i], quote) for i in idx) + "]"
    sep = "\n" * (x.ndim - 1) + " " * (depth + 1)
    return "[" + sep.join("..." if i is None else _summarize(x[i], n, depth + 1, quote)
                          for i in idx) + "]"


def format_tensor(value: Any, summarize: int = 3) -> str:
    """A tensor as TF's ``StringFormat`` prints it: ``[0 1 2 ... 7 8 9]`` with
    ``summarize`` elements kept at each end of each dimension (-1: all)."""
    x = np.asarray(value)
    return _summarize(x, int(summarize), 0, quote=x.ndim > 0)


def format_template(template: str, placeholder: str, values: list, summarize: int) -> str:
    """``template`` with each ``placeholder`` replaced by the next value, formatted."""
    parts = template.split(placeholder)
    if len(parts) - 1 != len(values):
        raise KernelError(f"StringFormat: {len(values)} inputs but the template {template!r} "
                          f"has {len(parts) - 1} placeholders {placeholder!r}")
    out = [parts[0]]
    for v, rest in zip(values, parts[1:]):
        out += [format_tensor(v, summarize), rest]
    return "".join(out)


@KERNELS("StringFormat", CPU)
def string_format(inputs: list, attrs: dict) -> list:
    text = format_template(str(attrs.get("template", "%s")), str(attrs.get("placeholder", "%s")),
                           list(inputs), int(attrs.get("summarize", 3)))
    return [np.array(text, dtype=object)]


_LOG_LEVELS = {"log(info)": logging.INFO, "log(warning)": logging.WARNING,
               "log(error)": logging.ERROR}


def write_line(text: str, stream: str, end: str) -> None:
    """Write ``text + end`` to ``stream``: ``stderr``, ``stdout`` or ``log(info)``... ."""
    if stream in _LOG_LEVELS:
        logger.log(_LOG_LEVELS[stream], "%s", text)
    elif stream in ("stderr", "stdout"):
        out = sys.stderr if stream == "stderr" else sys.stdout
        out.write(text + end)
        out.flush()
    else:
        raise KernelError(f"PrintV2: unknown output_stream {stream!r}: use stderr, stdout, "
                          "log(info), log(warning) or log(error)")


@KERNELS("PrintV2", CPU)
def print_v2(inputs: list, attrs: dict) -> list:
    v = np.asarray(inputs[0], dtype=object)
    if v.ndim != 0:
        raise KernelError(f"PrintV2: input must be a string scalar, got shape {list(v.shape)}")
    item = v.item()
    text = item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
    write_line(text, str(attrs.get("output_stream", "stderr")), str(attrs.get("end", "\n")))
    return []


@KERNELS("Assert", CPU)
def assert_(inputs: list, attrs: dict) -> list:
    cond = np.asarray(inputs[0])
    if cond.ndim != 0 or cond.dtype != np.bool_:
        raise KernelError(f"Assert: condition must be a bool scalar, got {cond.dtype} of shape "
                          f"{list(cond.shape)}")
    if not bool(cond):
        summarize = int(attrs.get("summarize", 3))
        data = " ".join(f"[{summarize_legacy(v, summarize)}]" for v in inputs[1:])
        raise KernelError(f"assertion failed: {data}")
    return []


def summarize_legacy(value: Any, limit: int) -> str:
    """``value`` as TF's ``Tensor::SummarizeValue`` (not v2) writes it into an
    ``Assert``'s message: its first ``limit`` elements (-1: all) in row order,
    inner rows bracketed (``[1 2][3 4]``), ``...`` when some were left out."""
    x = np.asarray(value)
    if x.ndim == 0:
        return _element(x[()], False)
    flat = x.reshape(-1)
    n = flat.size if limit < 0 else min(limit, flat.size)
    if x.ndim == 1:
        text = " ".join(_element(v, False) for v in flat[:n])
        return text + ("..." if n < flat.size else "")
    count = [0]

    def rows(sub: np.ndarray) -> str:
        if sub.ndim == 1:   # a row cut at the limit ends in "...", as TF's PrintOneDim
            take = max(0, min(sub.size, n - count[0]))
            count[0] += take
            return " ".join(_element(v, False) for v in sub[:take]) + \
                ("..." if 0 < take < sub.size else "")
        return "".join(f"[{rows(r)}]" for r in sub if count[0] < n)
    return rows(x) + ("..." if n < flat.size else "")
