"""Static shapes of tensors, in the model of ``tf.TensorShape``.

A shape is known only partly while a graph is built: the rank may be unknown
(``TensorShape(None)``) and any dimension may be unknown (``None``, e.g. the
batch dimension of a placeholder). Shape inference works on these partial
shapes and reports a mismatch only when two *known* dimensions disagree.

Indexing a shape gives a known dimension as a :class:`Dimension`: an ``int``
(TF2 code does arithmetic on it) that also has TF1's ``.value``
(``x.get_shape()[1].value``, as the CIFAR-10 tutorial reads it); an unknown
one is None, as TF2 gives it.
"""
from __future__ import annotations

from typing import Any, Iterator

__all__ = ["TensorShape", "Dimension", "as_shape", "unknown_shape", "dimension_value"]


class Dimension(int):
    """A known dimension: an ``int`` with TF1's ``.value``."""

    __slots__ = ()

    @property
    def value(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"Dimension({int(self)})"

    def __str__(self) -> str:   # TF1's str(Dimension(3)) is "3", and so are f-strings
        return int.__repr__(self)

    def __format__(self, spec: str) -> str:
        return format(int(self), spec)


def dimension_value(dim: Any) -> int | None:
    """TF's ``tf.compat.dimension_value``: the int of a dimension (None if unknown)."""
    if dim is None:
        return None
    return int(dim.value) if hasattr(dim, "value") and dim.value is not None else \
        (None if hasattr(dim, "value") else int(dim))


class TensorShape:
    """An immutable, possibly partial shape. ``dims`` is None when the rank is unknown."""

    __slots__ = ("_dims",)

    def __init__(self, dims: Any = None) -> None:
        if isinstance(dims, TensorShape):
            # TensorShape reads other TensorShapes' dims directly (same class), here and
            # in is_compatible_with / merge_with: shape inference runs on every op built
            self._dims = dims._dims  # noqa: SLF001 - same class
        elif dims is None:
            self._dims = None
        elif isinstance(dims, (int,)) and not isinstance(dims, bool):
            self._dims = (_dim(dims),)  # TF: TensorShape(3) is the vector shape [3]
        else:
            self._dims = tuple(_dim(d) for d in dims)

    @property
    def dims(self) -> tuple[int | None, ...] | None:
        return self._dims

    @property
    def rank(self) -> int | None:
        return None if self._dims is None else len(self._dims)

    ndims = rank

    def as_list(self) -> list[int | None] | None:
        """The dims as a list (None for unknown dims); None when the rank is unknown.

        (TF raises here for an unknown rank; returning None lets a GraphDef carry it.)
        """
        return None if self._dims is None else list(self._dims)

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self) -> int | None:
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims:  # type: ignore[union-attr]
            n *= d  # type: ignore[operator]
        return n

    def is_compatible_with(self, other: Any) -> bool:
        other = as_shape(other)
        if self._dims is None or other._dims is None:  # noqa: SLF001 - same class
            return True
        if len(self._dims) != len(other._dims):  # noqa: SLF001 - same class
            return False
        return all(a is None or b is None or a == b
                   for a, b in zip(self._dims, other._dims))  # noqa: SLF001 - same class

    def merge_with(self, other: Any) -> TensorShape:
        """The most specific shape compatible with both; ValueError if they conflict."""
        other = as_shape(other)
        if not self.is_compatible_with(other):
            raise ValueError(f"shapes {self} and {other} are not compatible")
        if self._dims is None:
            return other
        if other._dims is None:  # noqa: SLF001 - same class
            return self
        return TensorShape([a if a is not None else b
                            for a, b in zip(self._dims, other._dims)])  # noqa: SLF001 - same class

    def with_rank(self, rank: int) -> TensorShape:
        return self.merge_with(unknown_shape(rank))

    def __len__(self) -> int:
        if self._dims is None:
            raise ValueError("cannot take the length of a shape of unknown rank")
        return len(self._dims)

    def __iter__(self) -> Iterator[int | None]:
        if self._dims is None:
            raise ValueError("cannot iterate over a shape of unknown rank")
        return iter(self._dims)

    def __getitem__(self, key: Any) -> Any:
        if self._dims is None:
            return TensorShape(None) if isinstance(key, slice) else None
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        d = self._dims[key]
        return None if d is None else Dimension(d)

    def __eq__(self, other: object) -> bool:
        try:
            other = as_shape(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self._dims == other._dims

    def __hash__(self) -> int:
        return hash(self._dims)

    def __repr__(self) -> str:
        return f"TensorShape({self.as_list()!r})"

    def __str__(self) -> str:
        if self._dims is None:
            return "<unknown>"
        return "[" + ", ".join("?" if d is None else str(d) for d in self._dims) + "]"


def _dim(d: Any) -> int | None:
    if d is None:
        return None
    if hasattr(d, "value") and not isinstance(d, int):  # TF Dimension-like objects
        d = d.value
        if d is None:
            return None
    value = int(d)
    if value < 0:
        if value == -1:  # TF accepts -1 for an unknown dim in some places
            return None
        raise ValueError(f"dimension must be >= 0 or None, got {d}")
    return value


def as_shape(shape: Any) -> TensorShape:
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)


def unknown_shape(rank: int | None = None) -> TensorShape:
    return TensorShape(None if rank is None else [None] * rank)
