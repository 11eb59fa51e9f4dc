"""The shape of a dataset's elements: nested structures of numpy arrays.

An element is a numpy array or a nest of them, as in ``tf.data``: tuples
(namedtuples too) and dicts are *structures*, while a list is a *value* that
becomes one array (``from_tensor_slices([1, 2, 3])`` slices a vector, as
TF's ``normalize_element`` does). Dict keys are visited in sorted order, the
order TF's ``nest`` flattens them in, and rebuilt as the dict they came from.

Python values become arrays by TF's conversion rules, not numpy's: a Python
float is float32 and a Python int int32 (int64 when it does not fit), so a
batch fed to a ``dt.placeholder(dt.float32)`` has the dtype TF would give it.
A numpy value keeps its own dtype, as ``tf.constant(np_array)`` does.

Arrays a source captures are copied once and made read-only: a dataset is a
value (TF's tensors are immutable), so neither the caller's later writes nor a
consumer's in-place edit of a yielded slice can change the next epoch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.tensor_shape import TensorShape

__all__ = ["TensorSpec", "is_structure", "flatten", "pack_as", "map_structure",
           "map_structure_unchecked", "same_structure", "to_array", "normalize", "freeze",
           "spec_of", "unknown_spec", "relax", "with_batch_dim", "without_batch_dim"]


@dataclass(frozen=True)
class TensorSpec:
    """The static description of one component: its shape (partial) and dtype.

    ``dtype`` is a ``dt.DType`` (``dt.float32`` ...); ``shape`` a ``dt.TensorShape``
    whose unknown dimensions are None (the batch dimension of ``batch(b)``
    without ``drop_remainder``, for example).
    """

    shape: TensorShape
    dtype: Any = dtypes.float32
    name: str | None = None

    def __post_init__(self) -> None:
        # TF's TensorSpec(shape=[None, 3], dtype=dt.float32): a list and a dtype name work too
        if not isinstance(self.shape, TensorShape):
            object.__setattr__(self, "shape", TensorShape(self.shape))
        if not isinstance(self.dtype, dtypes.DType):
            object.__setattr__(self, "dtype", dtypes.as_dtype(self.dtype))

    def __repr__(self) -> str:
        dims = self.shape.dims
        shape = "<unknown>" if dims is None else str(tuple(dims))
        dtype = getattr(self.dtype, "name", self.dtype)
        return f"TensorSpec(shape={shape}, dtype={dtype}, name={self.name!r})"

    def is_compatible_with(self, value: Any) -> bool:
        """Whether an array (or another spec) fits this spec's dtype and shape."""
        other = value if isinstance(value, TensorSpec) else spec_of(value)
        return self.dtype == other.dtype and self.shape.is_compatible_with(other.shape)


def is_structure(value: Any) -> bool:
    """Tuples (namedtuples too) and dicts nest; everything else, lists included, is a leaf."""
    return isinstance(value, (tuple, dict))


def _keys(value: dict) -> list:
    try:
        return sorted(value)
    except TypeError:  # keys of mixed types: keep the dict's own order
        return list(value)


def flatten(value: Any) -> list[Any]:
    """The leaves of a nest, depth first; dict values in sorted-key order."""
    if isinstance(value, dict):
        return [leaf for k in _keys(value) for leaf in flatten(value[k])]
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in flatten(item)]
    return [value]


def pack_as(structure: Any, leaves: list[Any]) -> Any:
    """Rebuild ``structure`` with ``leaves`` (as returned by :func:`flatten`) in place."""
    it = iter(leaves)
    packed = _pack(structure, it)
    if next(it, _MISSING) is not _MISSING:
        raise InvalidArgumentError("pack_as: more leaves than the structure has places")
    return packed


_MISSING = object()


def _pack(structure: Any, it: Any) -> Any:
    if isinstance(structure, dict):
        built = {k: _pack(structure[k], it) for k in _keys(structure)}
        return type(structure)((k, built[k]) for k in structure) if type(structure) is not dict \
            else {k: built[k] for k in structure}
    if isinstance(structure, tuple):
        items = [_pack(item, it) for item in structure]
        return type(structure)(*items) if hasattr(structure, "_fields") else tuple(items)
    leaf = next(it, _MISSING)
    if leaf is _MISSING:
        raise InvalidArgumentError("pack_as: fewer leaves than the structure has places")
    return leaf


def same_structure(a: Any, b: Any) -> bool:
    """Whether two nests have the same shape of tuples and dicts (leaves may differ)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and set(a) == set(b)
                and all(same_structure(a[k], b[k]) for k in a))
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(same_structure(x, y) for x, y in zip(a, b)))
    return True


def map_structure(fn: Callable[..., Any], *values: Any) -> Any:
    """``fn`` applied leaf-wise over nests of the same structure."""
    first = values[0]
    for other in values[1:]:
        if not same_structure(first, other):
            raise InvalidArgumentError(
                f"the two structures differ: {_describe(first)} and {_describe(other)}")
    flat = [flatten(v) for v in values]
    return pack_as(first, [fn(*leaves) for leaves in zip(*flat)])


def _describe(value: Any) -> str:
    return repr(map_structure_unchecked(lambda _: ".", value))


def map_structure_unchecked(fn: Callable[[Any], Any], value: Any) -> Any:
    """``fn`` on every leaf of one nest (no structure check needed)."""
    return pack_as(value, [fn(leaf) for leaf in flatten(value)])


def to_array(value: Any) -> np.ndarray | np.generic:
    """One leaf as a numpy value, by TF's conversion rules (see the module header)."""
    if isinstance(value, np.generic):
        return value
    if isinstance(value, np.ndarray):
        return value
    if type(value).__name__ == "EagerTensor":   # an op's value in a map: its dtype kept
        return value.numpy()
    if value is None:
        raise InvalidArgumentError("an element of a dataset cannot be None; use an array "
                                   "(np.zeros((0,)) for an empty one) or leave the component out")
    try:
        arr = np.asarray(value)
    except ValueError as exc:  # ragged nesting
        raise InvalidArgumentError(f"cannot convert {value!r} to an array: nested lists must "
                                   f"be rectangular ({exc})") from None
    kind = arr.dtype.kind
    if kind == "O":
        raise InvalidArgumentError(f"cannot convert {value!r} to an array: it holds values of "
                                   "mixed kinds; use a tuple for a structure of components")
    if kind == "f" and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    elif kind in "iu" and arr.dtype != np.int32:
        fits = arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31)
        arr = arr.astype(np.int32 if fits else np.int64)
    return arr[()] if arr.ndim == 0 else arr


def normalize(element: Any) -> Any:
    """Every leaf of an element converted with :func:`to_array`."""
    return map_structure_unchecked(to_array, element)


def freeze(element: Any) -> Any:
    """A normalized, private, read-only copy of an element (what a source keeps)."""
    def one(leaf: Any) -> Any:
        arr = to_array(leaf)
        if isinstance(arr, np.ndarray):
            arr = np.array(arr, copy=True)
            arr.flags.writeable = False
        return arr
    return map_structure_unchecked(one, element)


def _dtype_of(arr: Any) -> Any:
    try:
        return dtypes.as_dtype(np.asarray(arr).dtype)
    except InvalidArgumentError:
        return np.asarray(arr).dtype


def spec_of(element: Any) -> Any:
    """The TensorSpec nest that describes one element."""
    return map_structure_unchecked(
        lambda leaf: TensorSpec(TensorShape(np.shape(leaf)), _dtype_of(leaf)), element)


def unknown_spec() -> TensorSpec:
    """The spec of a component nothing is known about (an empty map's output)."""
    return TensorSpec(TensorShape(None), None)


def relax(spec: TensorSpec, other: TensorSpec) -> TensorSpec:
    """The most specific spec both fit: unequal dims become None (concatenate, map probing)."""
    a, b = spec.shape.dims, other.shape.dims
    if a is None or b is None or len(a) != len(b):
        shape = TensorShape(None)
    else:
        shape = TensorShape([x if x == y else None for x, y in zip(a, b)])
    return TensorSpec(shape, spec.dtype if spec.dtype == other.dtype else None)


def with_batch_dim(spec: TensorSpec, dim: int | None) -> TensorSpec:
    """``spec`` with a leading dimension added (batch)."""
    dims = spec.shape.dims
    return TensorSpec(TensorShape(None if dims is None else (dim, *dims)), spec.dtype)


def without_batch_dim(spec: TensorSpec) -> TensorSpec:
    """``spec`` with its leading dimension removed (unbatch, from_tensor_slices)."""
    dims = spec.shape.dims
    return TensorSpec(TensorShape(None if dims is None else dims[1:]), spec.dtype)
