"""``dt.keras.utils``: ``experimental.DatasetCreator``, Keras' way of giving ``fit``
a function that makes the dataset instead of the dataset.

``DatasetCreator(dataset_fn)`` wraps ``dataset_fn(input_context)``, which
returns a ``dt.data.Dataset`` of ``(x, y)`` batches for one input pipeline
(``input_context.input_pipeline_id`` of ``num_input_pipelines``). Under
ParameterServerStrategy ``fit`` calls it once per worker (each worker's own
dataset, read through the coordinator); under another strategy once per
process, through ``strategy.distribute_datasets_from_function``; without
one, once. As in Keras, ``fit`` needs ``steps_per_epoch`` with it (the
dataset is usually repeated forever).

Keras' serialization helpers live here too, as in ``tf.keras.utils``:
``register_keras_serializable``, ``get_registered_object``,
``get_registered_name``, ``custom_object_scope`` / ``CustomObjectScope``,
``serialize_keras_object`` and ``deserialize_keras_object``
(``distrib.keras.serialization``).
"""
from __future__ import annotations

import types
from typing import Any, Callable

from distrib.data import Dataset
from distrib.distribute.core.input_lib import InputContext
from distrib.keras.serialization import (
    CustomObjectScope,
    custom_object_scope,
    deserialize_keras_object,
    get_registered_name,
    get_registered_object,
    register_keras_serializable,
    serialize_keras_object,
)

__all__ = ["DatasetCreator", "experimental", "CustomObjectScope", "custom_object_scope",
           "deserialize_keras_object", "get_registered_name", "get_registered_object",
           "register_keras_serializable", "serialize_keras_object"]


class DatasetCreator:
    """``DatasetCreator(dataset_fn, input_options=None)``: see the module header."""

    def __init__(self, dataset_fn: Callable[[InputContext], Dataset],
                 input_options: Any = None) -> None:
        if not callable(dataset_fn):
            raise TypeError("`dataset_fn` for `DatasetCreator` must be a `callable` taking an "
                            f"InputContext and returning a dt.data.Dataset; got {dataset_fn!r}")
        self.dataset_fn = dataset_fn
        self.input_options = input_options

    def __call__(self, input_context: InputContext | None = None) -> Dataset:
        """The dataset of one input pipeline (the first of one when no context is given)."""
        dataset = self.dataset_fn(input_context if input_context is not None
                                  else InputContext())
        if not isinstance(dataset, Dataset):
            raise TypeError("The `callable` provided to `DatasetCreator` must return a "
                            f"dt.data.Dataset; it returned {type(dataset).__name__}")
        return dataset

    def __repr__(self) -> str:
        return f"<dt.keras.utils.experimental.DatasetCreator {self.dataset_fn!r}>"


experimental = types.SimpleNamespace(DatasetCreator=DatasetCreator)
