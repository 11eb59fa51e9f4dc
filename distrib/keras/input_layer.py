"""``dt.keras.Input`` and ``dt.keras.layers.InputLayer``: where a functional model starts.

``Input(shape=(3,), dtype='int64', name='features')`` makes an ``InputLayer``
and returns its symbolic tensor: a placeholder of shape ``(batch_size,
*shape)`` in the default graph (the graph the model will live in), stamped
as that layer's output (``keras.node``). Layers called on it record the
functional graph ``keras.Model(inputs, outputs)`` runs. Names are Keras 2's
(``input_1``, ``input_2`` ...); the dtype defaults to floatx (float32).

An ``InputLayer`` also opens a ``Sequential`` (``Sequential([InputLayer((4,)),
Dense(2)])`` or ``Sequential([keras.Input((4,)), ...])``): it passes its input
through and gives the stack its input shape. Its config is Keras 2's
(``batch_input_shape``, ``dtype``, ``sparse``, ``ragged``, ``name``).
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.eager.context import graph_mode
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, get_default_graph
from distrib.keras import backend, node
from distrib.keras.base_layer import Layer, shape_tuple
from distrib.ops import math_ops as ops

__all__ = ["InputLayer", "Input"]


class InputLayer(Layer):
    """``InputLayer(input_shape=None, batch_size=None, dtype=None, input_tensor=None,
    sparse=None, name=None, ragged=None, type_spec=None)``."""

    is_input_layer = True

    def __init__(self, input_shape: Sequence[int | None] | None = None,
                 batch_size: int | None = None, dtype: Any = None, input_tensor: Any = None,
                 sparse: Any = None, name: str | None = None, ragged: Any = None,
                 type_spec: Any = None, **kwargs: Any) -> None:
        batch_input_shape = kwargs.pop("batch_input_shape", None)
        kwargs.pop("batch_shape", None)
        if sparse or ragged or type_spec is not None:
            raise NotImplementedError("InputLayer(sparse=True / ragged=True / type_spec=...) "
                                      "is not supported by dt.keras: dense inputs only")
        if input_shape is not None and batch_input_shape is not None:
            raise ValueError("Only provide the input_shape OR batch_input_shape argument to "
                             "InputLayer, not both at the same time.")
        if input_tensor is not None and batch_input_shape is None:
            batch_input_shape = shape_tuple(ops.convert_to_tensor(input_tensor).shape)
        if batch_input_shape is None:
            if input_shape is None:
                raise ValueError("Please provide to Input a `shape` or a `tensor` argument. "
                                 "Note that `shape` does not include the batch dimension.")
            batch_input_shape = (batch_size, *tuple(input_shape))
        self._input_dtype = dtypes.as_dtype(dtype or backend.floatx()).name
        super().__init__(name=name or f"input_{backend.get_uid('input')}",
                         dtype=dtype if dtype is not None and dtypes.as_dtype(dtype).is_floating
                         else None,
                         batch_input_shape=tuple(batch_input_shape), **kwargs)
        self.built = True
        if input_tensor is None:
            graph = get_default_graph()
            with graph.name_scope(None), graph_mode():   # symbolic, eager on or off
                input_tensor = ops.placeholder(self._input_dtype, list(self.batch_input_shape),
                                               name=self.name)
        else:
            input_tensor = ops.convert_to_tensor(input_tensor)
        node.mark_input(input_tensor, self)
        self.input = input_tensor
        self.output = input_tensor
        self.inbound_nodes.append(node.Node(self, [], {}, input_tensor, None))

    def __call__(self, inputs: Any, training: Any = None, **kwargs: Any) -> Any:
        return inputs   # in a Sequential: the stack's input passes through

    def call(self, inputs: Any, training: Any = None) -> Any:
        return inputs

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return tuple(self.batch_input_shape)

    def get_config(self) -> dict[str, Any]:
        return {"batch_input_shape": tuple(self.batch_input_shape),
                "dtype": self._input_dtype, "sparse": False, "ragged": False,
                "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> InputLayer:
        config = dict(config)
        config["batch_input_shape"] = tuple(config["batch_input_shape"])
        return cls(**config)


def Input(shape: Sequence[int | None] | None = None, batch_size: int | None = None,  # noqa: N802 - Keras' name
          name: str | None = None, dtype: Any = None, sparse: Any = None, tensor: Any = None,
          ragged: Any = None, type_spec: Any = None, **kwargs: Any) -> Tensor:
    """``keras.Input(shape=(3,), batch_size=None, name=None, dtype=None, tensor=None)``:
    a new ``InputLayer``'s symbolic tensor (module header)."""
    batch_shape = kwargs.pop("batch_shape", None)
    if kwargs:
        raise ValueError(f"Unrecognized keyword arguments: {sorted(kwargs)}")
    if shape is None and tensor is None and batch_shape is None:
        raise ValueError("Please provide to Input a `shape` or a `tensor` or a `type_spec` "
                         "argument. Note that `shape` does not include the batch dimension.")
    layer = InputLayer(input_shape=None if batch_shape is not None else
                       (tuple(shape) if shape is not None else None),
                       batch_size=batch_size, name=name, dtype=dtype, sparse=sparse,
                       input_tensor=tensor, ragged=ragged, type_spec=type_spec,
                       **({"batch_input_shape": tuple(batch_shape)} if batch_shape else {}))
    return layer.output
