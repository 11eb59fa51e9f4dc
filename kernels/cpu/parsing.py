"""CPU kernels of TF's parsing and file ops: ``ParseExampleV2`` (what
``dt.io.parse_example`` and ``parse_single_example`` run) and ``ReadFile``.

``ParseExampleV2`` takes the serialized Examples (a scalar or a vector) and
one default per dense key; the keys, dtypes and shapes are attrs
(``sparse_keys``, ``sparse_types``, ``dense_keys``, ``Tdense``,
``dense_shapes``; TF passes the keys as constant inputs, the rest alike).
Outputs, in TF's order: every sparse key's ``indices`` (int64 [n, rank+1]),
then every ``values`` ([n]), then every ``dense_shape`` ([rank+1]); then
the dense values, ``serialized.shape + dense_shape``. TF's rules and words:
a dense feature without a default that is missing is "required but could
not be found"; one with the wrong number of values or the wrong kind cannot
be parsed; a sparse feature's values are its list, batch row by row.

:func:`parse_values` is the same work on Python values, which the data
pipeline's ``parse_single_example`` calls directly (no graph per element).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.cpu.example_wire import BYTES, FLOAT, INT64, parse_features
from kernels.dtypes import as_dtype
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["parse_values", "kind_of"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them
_KIND_NAMES = {BYTES: "string", FLOAT: "float", INT64: "int64"}


def kind_of(dtype: np.dtype) -> int:
    """The Feature list an Example holds values of ``dtype`` in."""
    if dtype.kind in "OSU":
        return BYTES
    if dtype == np.float32:
        return FLOAT
    if dtype == np.int64:
        return INT64
    raise KernelError(f"an Example holds only string, float32 and int64 features, not {dtype}; "
                      "parse as one of those and cast afterwards")


def _as_array(kind: int, values: Any) -> np.ndarray:
    if kind == BYTES:
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return values


def _dense(name: str, kind: int, shape: tuple[int, ...], default: Any,
           found: tuple[int, Any] | None, row: int) -> np.ndarray:
    want = int(np.prod(shape, dtype=np.int64))
    if found is None:
        if default is None or np.size(default) == 0:
            raise KernelError(f"Feature: {name} (data type: {_KIND_NAMES[kind]}) is required "
                              f"but could not be found (Example {row}); give the "
                              "FixedLenFeature a default_value or write the feature")
        value = np.asarray(default, dtype=object if kind == BYTES else None)
        return value.reshape(shape) if value.size == want else np.broadcast_to(value, shape)
    got_kind, values = found
    if got_kind != kind:
        raise KernelError(f"Name: <unknown>, Key: {name}, Index: {row}.  Data types don't "
                          f"match. Data type: {_KIND_NAMES[got_kind]} but expected type: "
                          f"{_KIND_NAMES[kind]}")
    if len(values) != want:
        raise KernelError(f"Name: <unknown>, Key: {name}, Index: {row}.  Number of "
                          f"{_KIND_NAMES[kind]} values != expected.  Values size: "
                          f"{len(values)} but output shape: {list(shape)}")
    return _as_array(kind, values).reshape(shape)


def parse_values(serialized: Any, sparse: list[tuple[str, np.dtype]],
                 dense: list[tuple[str, np.dtype, tuple[int, ...], Any]]) -> list[np.ndarray]:
    """Parse ``serialized`` (one Example's bytes, or an array of them): the
    outputs of ``ParseExampleV2`` (see the module header) as numpy arrays."""
    batch = np.asarray(serialized, dtype=object)
    if batch.ndim > 1:
        raise KernelError(f"ParseExampleV2: serialized must be a scalar or a vector, got shape "
                          f"{list(batch.shape)}")
    records = [batch.item()] if batch.ndim == 0 else list(batch)
    wanted = frozenset([k for k, _ in sparse] + [d[0] for d in dense])
    parsed = []
    for row, record in enumerate(records):
        if isinstance(record, str):
            record = record.encode("latin-1")
        try:
            parsed.append(parse_features(record, wanted))
        except ValueError as e:
            raise KernelError(f"Could not parse example input, value: Example {row} is not a "
                              f"serialized tf.train.Example ({e})") from None
    indices, values, shapes = [], [], []
    for key, dtype in sparse:
        kind = kind_of(dtype)
        idx, vals, longest = [], [], 0
        for row, features in enumerate(parsed):
            found = features.get(key)
            if found is None:
                continue
            if found[0] != kind:
                raise KernelError(f"Name: <unknown>, Key: {key}, Index: {row}.  Data types "
                                  f"don't match. Expected type: {_KIND_NAMES[kind]}")
            n = len(found[1])
            longest = max(longest, n)
            idx.append(np.stack([np.full(n, row), np.arange(n)], axis=1)
                       if batch.ndim else np.arange(n).reshape(n, 1))
            vals.append(_as_array(kind, found[1]))
        cols = 2 if batch.ndim else 1
        indices.append(np.concatenate(idx).astype(np.int64) if idx
                       else np.zeros((0, cols), np.int64))
        values.append(np.concatenate(vals).astype(dtype, copy=False) if vals
                      else np.zeros(0, dtype))
        shapes.append(np.array([len(records), longest] if batch.ndim else [longest], np.int64))
    outs = []
    for key, dtype, shape, default in dense:
        kind = kind_of(dtype)
        rows = [_dense(key, kind, shape, default, f.get(key), r) for r, f in enumerate(parsed)]
        arr = (np.stack(rows) if rows else np.zeros((0, *shape), dtype)).astype(dtype, copy=False)
        outs.append(arr if batch.ndim else arr[0])
    return [*indices, *values, *shapes, *outs]


@KERNELS("ParseExampleV2", CPU)
def parse_example_v2(inputs: list, attrs: dict) -> list:
    """TF's ``ParseExampleV2`` (see the module header): inputs ``serialized``
    and the dense defaults (an empty array: required)."""
    sparse = [(k, as_dtype(t)) for k, t in zip(attrs.get("sparse_keys") or [],
                                              attrs.get("sparse_types") or [])]
    keys, types = attrs.get("dense_keys") or [], attrs.get("Tdense") or []
    shapes = attrs.get("dense_shapes") or []
    defaults = list(inputs[1:])
    if not len(keys) == len(types) == len(shapes) == len(defaults):
        raise KernelError(f"ParseExampleV2: {len(keys)} dense keys, {len(types)} Tdense, "
                          f"{len(shapes)} dense_shapes and {len(defaults)} defaults must agree")
    dense = [(k, as_dtype(t), tuple(int(d) for d in s), None if np.size(v) == 0 else np.asarray(v))
             for k, t, s, v in zip(keys, types, shapes, defaults)]
    return parse_values(inputs[0], sparse, dense)


@KERNELS("ReadFile", CPU)
def read_file(inputs: list, attrs: dict) -> list:
    """The whole contents of the file named by a string scalar (TF's ``ReadFile``)."""
    name = np.asarray(inputs[0], dtype=object).item()
    path = name.decode() if isinstance(name, bytes) else str(name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise KernelError(f"ReadFile: {path}: {e.strerror}") from None
    return [np.array(data, dtype=object)]
