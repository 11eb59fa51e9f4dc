"""``dt.io.parse_single_example``, ``parse_example``, their feature specs
(``FixedLenFeature``, ``VarLenFeature``) and ``dt.io.read_file``: TF's
``parsing_ops`` and ``io_ops.read_file``.

In a graph both parsers add one ``ParseExampleV2`` op (TF2's op; the keys,
dtypes and shapes are attrs, the dense defaults inputs) whose outputs come
back as a dict: a dense feature a tensor of ``serialized.shape + shape``,
a sparse one a ``dt.SparseTensor`` (indices, values, dense_shape). In a
dataset function (``ds.map(parse)``: see :mod:`distrib.ops.value_mode`)
they parse the value at once with the same kernel code and return numpy
values (a sparse feature a ``SparseTensorValue``).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework import dtypes
from distrib.framework.sparse_tensor import SparseTensor, SparseTensorValue
from distrib.ops import math_ops as ops
from distrib.ops import value_mode

__all__ = ["FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature", "parse_example",
           "parse_single_example", "read_file"]


class FixedLenFeature(NamedTuple):
    """A feature of a fixed ``shape`` of ``dtype`` values; ``default_value``
    for Examples that lack it (None: it is required)."""

    shape: Any
    dtype: Any
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """A feature of any number of ``dtype`` values: parsed as a sparse tensor."""

    dtype: Any


class FixedLenSequenceFeature(NamedTuple):
    """TF's spec of a SequenceExample's feature lists; parse_example refuses it
    here (SequenceExamples are not parsed yet)."""

    shape: Any
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


def _np_type(dtype: Any) -> np.dtype:
    d = dtypes.as_dtype(dtype)
    if d not in (dtypes.string, dtypes.float32, dtypes.int64):
        raise InvalidArgumentError(f"an Example feature is string, float32 or int64, got "
                                   f"{d.name}; parse one of those and cast afterwards")
    return np.dtype(object) if d == dtypes.string else np.dtype(d.as_numpy_dtype)


def _split(features: Any) -> tuple[list, list]:
    if not isinstance(features, dict) or not features:
        raise InvalidArgumentError(f"features must be a non-empty dict of feature name to "
                                   f"FixedLenFeature or VarLenFeature, got {features!r}")
    sparse, dense = [], []
    for key in sorted(features):
        spec = features[key]
        if isinstance(spec, VarLenFeature):
            sparse.append((str(key), _np_type(spec.dtype)))
        elif isinstance(spec, FixedLenFeature):
            shape = [] if spec.shape is None else list(np.asarray(spec.shape, dtype=object)
                                                       .reshape(-1)) if np.ndim(spec.shape) \
                else [spec.shape]
            if any(d is None or int(d) < 0 for d in shape):
                raise InvalidArgumentError(f"FixedLenFeature {key!r}: shape {spec.shape} must "
                                           "be fully known (a variable length is VarLenFeature)")
            shape_t = tuple(int(d) for d in shape)
            dtype = _np_type(spec.dtype)
            default = None
            if spec.default_value is not None:
                default = np.asarray(spec.default_value, dtype=dtype)
                want = int(np.prod(shape_t, dtype=np.int64))
                if default.size not in (1, want):
                    raise InvalidArgumentError(f"FixedLenFeature {key!r}: default_value of "
                                               f"{default.size} values does not fit shape "
                                               f"{list(shape_t)}")
            dense.append((str(key), dtype, shape_t, default))
        else:
            raise InvalidArgumentError(f"feature {key!r}: unsupported spec {spec!r}; use "
                                       "FixedLenFeature or VarLenFeature")
    return sparse, dense


def _pack(sparse: list, dense: list, outs: list, make_sparse: Any) -> dict[str, Any]:
    n = len(sparse)
    result: dict[str, Any] = {}
    for i, (key, _) in enumerate(sparse):
        result[key] = make_sparse(outs[i], outs[n + i], outs[2 * n + i])
    for j, (key, *_rest) in enumerate(dense):
        result[key] = outs[3 * n + j]
    return result


def _parse(serialized: Any, features: Any, name: str | None, rank: int) -> dict[str, Any]:
    sparse, dense = _split(features)
    if value_mode.values_now(serialized):
        from kernels.cpu.parsing import parse_values
        from kernels.registry import KernelError
        value = value_mode.as_value(serialized)
        if value.ndim != rank:
            raise InvalidArgumentError(f"{'parse_single_example' if rank == 0 else 'parse_example'}"
                                       f" takes a {'scalar' if rank == 0 else 'vector'} of "
                                       f"serialized Examples, got shape {list(value.shape)}")
        try:
            outs = parse_values(value, sparse, dense)
        except KernelError as e:
            raise InvalidArgumentError(str(e)) from None
        return _pack(sparse, dense, outs, SparseTensorValue)
    t = ops.convert_to_tensor(serialized, dtype=dtypes.string)
    if t.shape.rank is not None and t.shape.rank != rank:
        raise InvalidArgumentError(f"serialized must have rank {rank}, got shape {t.shape}")
    defaults = [ops.constant(np.zeros(0, d[1]) if d[3] is None else d[3], dtype=_dt(d[1]))
                for d in dense]
    attrs = {"sparse_keys": [k for k, _ in sparse], "sparse_types": [_dt(d) for _, d in sparse],
             "dense_keys": [d[0] for d in dense], "Tdense": [_dt(d[1]) for d in dense],
             "dense_shapes": [list(d[2]) for d in dense], "num_sparse": len(sparse)}
    op = ops.make_op("ParseExampleV2", [t, *defaults], attrs, name or "ParseExampleV2")
    return _pack(sparse, dense, list(op.outputs), SparseTensor)


def _dt(np_dtype: np.dtype) -> dtypes.DType:
    return dtypes.string if np_dtype.kind == "O" else dtypes.as_dtype(np_dtype)


def parse_single_example(serialized: Any, features: Any, name: str | None = None,
                         example_names: Any = None) -> dict[str, Any]:
    """One serialized ``tf.train.Example`` (a string scalar) as a dict of its
    features, each as its spec says (TF's ``tf.io.parse_single_example``)."""
    return _parse(serialized, features, name, 0)


def parse_example(serialized: Any, features: Any, name: str | None = None,
                  example_names: Any = None) -> dict[str, Any]:
    """A vector of serialized Examples as a dict of batched features (TF's
    ``tf.io.parse_example``): dense ``[batch] + shape``, sparse of rank 2."""
    return _parse(serialized, features, name, 1)


def read_file(filename: Any, name: str | None = None) -> Any:
    """The whole contents of a file as a string scalar (TF's ``tf.io.read_file``)."""
    if value_mode.values_now(filename):
        path = value_mode.as_value(filename).item()
        path = path.decode() if isinstance(path, bytes) else str(path)
        try:
            with open(path, "rb") as f:
                return np.array(f.read(), dtype=object)
        except OSError as e:
            raise NotFoundError(f"read_file: {path}: {e.strerror}") from None
    t = ops.convert_to_tensor(filename, dtype=dtypes.string)
    return ops.op_output("ReadFile", [t], None, name or "ReadFile")
