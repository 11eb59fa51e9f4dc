"""Keras' merge layers: ``Add``, ``Subtract``, ``Multiply``, ``Average``, ``Maximum``,
``Minimum``, ``Concatenate`` and their functions (``add([a, b])`` ...).

Each takes a list of tensors (at least two; ``Subtract`` exactly two) and
merges them elementwise, broadcasting as the ops do (Keras 2's ``_Merge``
checks that the shapes agree but for the batch axis and broadcastable
axes of 1, and says which do not); ``Concatenate(axis=-1)`` joins them
along ``axis``, their other axes equal.
"""
from __future__ import annotations

from functools import reduce
from typing import Any

from distrib.keras.base_layer import Layer, shape_tuple
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat

__all__ = ["Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate",
           "add", "subtract", "multiply", "average", "maximum", "minimum", "concatenate"]


def _broadcast_shape(a: tuple[int | None, ...], b: tuple[int | None, ...],
                     name: str) -> tuple[int | None, ...]:
    if len(a) < len(b):
        a, b = b, a
    out = list(a)
    for i, d in enumerate(b[::-1]):
        j = len(a) - 1 - i
        if d is None or d == 1:
            continue
        if out[j] in (None, 1):
            out[j] = d
        elif out[j] != d:
            raise ValueError(f"Inputs have incompatible shapes. Received shapes {a} and {b} "
                             f"(layer {name!r})")
    return tuple(out)


class _Merge(Layer):
    """Elementwise merge of a list of at least two tensors."""

    _min_inputs = 2

    def build(self, input_shape: Any) -> None:
        if not isinstance(input_shape, list) or len(input_shape) < self._min_inputs:
            raise ValueError(f"A merge layer should be called on a list of at least "
                             f"{self._min_inputs} inputs. Got {input_shape!r} "
                             f"(layer {self.name!r})")
        batch = {s[0] for s in input_shape if s and s[0] is not None}
        if len(batch) > 1:
            raise ValueError(f"Cannot merge tensors with different batch sizes. Got tensors "
                             f"with shapes {input_shape}")
        reduce(lambda a, b: _broadcast_shape(a, b, self.name), [tuple(s) for s in input_shape])
        self.built = True

    def _merge(self, inputs: list[Any]) -> Any:
        raise NotImplementedError

    def call(self, inputs: Any) -> Any:
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(f"A merge layer should be called on a list of inputs. Received: "
                             f"inputs={inputs!r} (not a list of tensors)")
        return self._merge(list(inputs))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shapes = [shape_tuple(s) for s in input_shape]
        return reduce(lambda a, b: _broadcast_shape(a, b, self.name), shapes)


class Add(_Merge):
    """``Add()([a, b, ...])``: their sum."""

    def _merge(self, inputs: list[Any]) -> Any:
        return reduce(ops.add, inputs)


class Subtract(_Merge):
    """``Subtract()([a, b])``: ``a - b`` (exactly two inputs)."""

    def build(self, input_shape: Any) -> None:
        if not isinstance(input_shape, list) or len(input_shape) != 2:
            raise ValueError(f"A `Subtract` layer should be called on exactly 2 inputs. "
                             f"Received: input_shape={input_shape}")
        super().build(input_shape)

    def _merge(self, inputs: list[Any]) -> Any:
        if len(inputs) != 2:
            raise ValueError(f"A `Subtract` layer should be called on exactly 2 inputs. "
                             f"Received: {len(inputs)} inputs")
        return ops.subtract(inputs[0], inputs[1])


class Multiply(_Merge):
    """``Multiply()([a, b, ...])``: their elementwise product."""

    def _merge(self, inputs: list[Any]) -> Any:
        return reduce(ops.multiply, inputs)


class Average(_Merge):
    """``Average()([a, b, ...])``: their mean."""

    def _merge(self, inputs: list[Any]) -> Any:
        return reduce(ops.add, inputs) * (1.0 / len(inputs))


class Maximum(_Merge):
    """``Maximum()([a, b, ...])``: their elementwise maximum."""

    def _merge(self, inputs: list[Any]) -> Any:
        return reduce(ops.maximum, inputs)


class Minimum(_Merge):
    """``Minimum()([a, b, ...])``: their elementwise minimum."""

    def _merge(self, inputs: list[Any]) -> Any:
        return reduce(ops.minimum, inputs)


class Concatenate(_Merge):
    """``Concatenate(axis=-1)([a, b, ...])``: joined along ``axis``."""

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = int(axis)

    def build(self, input_shape: Any) -> None:
        if not isinstance(input_shape, list) or len(input_shape) < 1:
            raise ValueError(f"A `Concatenate` layer should be called on a list of at least "
                             f"1 input. Received: input_shape={input_shape}")
        ranks = {len(s) for s in input_shape}
        if len(ranks) != 1:
            raise ValueError(f"A `Concatenate` layer requires inputs with matching shapes "
                             f"except for the concatenation axis. Received: "
                             f"input_shape={input_shape}")
        rank = ranks.pop()
        axis = self.axis % rank
        for i in range(rank):
            dims = {s[i] for s in input_shape if s[i] is not None}
            if i != axis and i != 0 and len(dims) > 1:
                raise ValueError(f"A `Concatenate` layer requires inputs with matching shapes "
                                 f"except for the concatenation axis. Received: "
                                 f"input_shape={input_shape}")
        self.built = True

    def _merge(self, inputs: list[Any]) -> Any:
        rank = inputs[0].shape.rank
        return concat(inputs, self.axis % rank if rank else self.axis)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shapes = [shape_tuple(s) for s in input_shape]
        axis = self.axis % len(shapes[0])
        out = list(shapes[0])
        sizes = [s[axis] for s in shapes]
        out[axis] = None if any(d is None for d in sizes) else sum(sizes)
        return tuple(out)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "axis": self.axis}


def add(inputs: list[Any], **kwargs: Any) -> Any:
    """``Add(**kwargs)(inputs)``."""
    return Add(**kwargs)(inputs)


def subtract(inputs: list[Any], **kwargs: Any) -> Any:
    """``Subtract(**kwargs)(inputs)``."""
    return Subtract(**kwargs)(inputs)


def multiply(inputs: list[Any], **kwargs: Any) -> Any:
    """``Multiply(**kwargs)(inputs)``."""
    return Multiply(**kwargs)(inputs)


def average(inputs: list[Any], **kwargs: Any) -> Any:
    """``Average(**kwargs)(inputs)``."""
    return Average(**kwargs)(inputs)


def maximum(inputs: list[Any], **kwargs: Any) -> Any:
    """``Maximum(**kwargs)(inputs)``."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs: list[Any], **kwargs: Any) -> Any:
    """``Minimum(**kwargs)(inputs)``."""
    return Minimum(**kwargs)(inputs)


def concatenate(inputs: list[Any], axis: int = -1, **kwargs: Any) -> Any:
    """``Concatenate(axis=axis, **kwargs)(inputs)``."""
    return Concatenate(axis=axis, **kwargs)(inputs)
