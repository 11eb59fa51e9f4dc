"""Element types of tensors, in the model of ``tf.dtypes``.

A :class:`DType` is an interned value object: there is exactly one
``float32``, so identity, ``==`` and hashing agree. Anything a user may write
for a type (a DType, ``"float32"``, ``np.float32``, ``np.dtype("f4")``,
``float``) goes through :func:`as_dtype`. Strings are ``string``: their numpy
form is an object array (``<U`` arrays are accepted too), as in TensorFlow.
In a GraphDef a dtype is written as its name (``"float32"``).
"""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError

__all__ = [
    "DType", "as_dtype", "float16", "float32", "float64", "int8", "int16",
    "int32", "int64", "uint8", "bool", "string", "ALL_DTYPES",
    # the rest of tf.dtypes (issue 39)
    "uint16", "uint32", "uint64", "complex64", "complex128", "half", "double",
]


class DType:
    """One element type. Compare with ``==`` (also against names and numpy types)."""

    __slots__ = ("_name", "_np")

    def __init__(self, name: str, np_type: Any) -> None:
        self._name = name
        self._np = np_type

    @property
    def name(self) -> str:
        return self._name

    @property
    def as_numpy_dtype(self) -> Any:
        """The numpy scalar type (``np.float32``; ``np.object_`` for string)."""
        return self._np

    @property
    def base_dtype(self) -> DType:
        # distrib has no reference dtypes; kept so TF code (`v.dtype.base_dtype`) ports unchanged
        return self

    @property
    def is_floating(self) -> bool:
        return self._np in (np.float16, np.float32, np.float64)

    @property
    def is_integer(self) -> bool:
        return self._np in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                            np.uint32, np.uint64)

    @property
    def is_unsigned(self) -> bool:
        return self._np in (np.uint8, np.uint16, np.uint32, np.uint64)

    @property
    def is_complex(self) -> bool:
        return self._np in (np.complex64, np.complex128)

    @property
    def real_dtype(self) -> DType:
        """float32 for complex64, float64 for complex128, else the dtype itself."""
        return {"complex64": float32, "complex128": float64}.get(self._name, self)

    @property
    def size(self) -> int:
        """Bytes per element (TF's ``DType.size``; 1 for string, as a pointer's stand-in)."""
        return 1 if self._np is np.object_ else np.dtype(self._np).itemsize

    @property
    def limits(self) -> tuple[Any, Any]:
        """(min, max) of the type (TF's ``DType.limits``)."""
        return (self.min, self.max)

    def is_compatible_with(self, other: Any) -> bool:
        return self == other

    @property
    def is_bool(self) -> bool:
        return self._np is np.bool_

    @property
    def is_numeric(self) -> bool:
        return self.is_floating or self.is_integer

    @property
    def min(self) -> Any:
        return np.finfo(self._np).min if self.is_floating else np.iinfo(self._np).min

    @property
    def max(self) -> Any:
        return np.finfo(self._np).max if self.is_floating else np.iinfo(self._np).max

    def __eq__(self, other: object) -> bool:
        if other is None:
            return False
        if not isinstance(other, DType):
            try:
                other = as_dtype(other)
            except InvalidArgumentError:
                return False
        return self is other

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f"dt.{self._name}"

    def __str__(self) -> str:
        return f"<dtype: {self._name!r}>"

    def __reduce__(self):  # copies and pickles (in-process only) keep the singleton
        return (as_dtype, (self._name,))


float16 = DType("float16", np.float16)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
int8 = DType("int8", np.int8)
int16 = DType("int16", np.int16)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
uint8 = DType("uint8", np.uint8)
bool = DType("bool", np.bool_)  # noqa: A001 - the TF name, on purpose
string = DType("string", np.object_)
uint16 = DType("uint16", np.uint16)
uint32 = DType("uint32", np.uint32)
uint64 = DType("uint64", np.uint64)
complex64 = DType("complex64", np.complex64)
complex128 = DType("complex128", np.complex128)
half, double = float16, float64   # TF's other names

ALL_DTYPES: tuple[DType, ...] = (
    float16, float32, float64, int8, int16, int32, int64, uint8, bool, string,
    uint16, uint32, uint64, complex64, complex128)

_BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({"half": float16, "float": float32, "double": float64, "str": string})
_BY_NP: dict[Any, DType] = {np.dtype(d.as_numpy_dtype): d for d in ALL_DTYPES if d is not string}
_BY_PY: dict[Any, DType] = {float: float32, int: int32, builtins.bool: bool, str: string,
                            bytes: string}


def as_dtype(value: Any) -> DType:
    """Convert a DType, a name, a numpy dtype/type or a Python type to a DType.

    Raises InvalidArgumentError naming the value and listing valid names.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = _BY_NAME.get(value)
        if found is not None:
            return found
    elif isinstance(value, type) and value in _BY_PY:
        return _BY_PY[value]
    else:
        found = _from_numpy(value)
        if found is not None:
            return found
    raise InvalidArgumentError(
        f"cannot interpret {value!r} as a dtype; use one of "
        f"{', '.join(d.name for d in ALL_DTYPES)} (names, dt.<name>, or numpy types)")


def _from_numpy(value: Any) -> DType | None:
    try:
        npd = np.dtype(value)
    except TypeError:
        return None
    if npd.kind in ("U", "S", "O"):
        return string
    return _BY_NP.get(npd)
