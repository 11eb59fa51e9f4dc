"""``dt.keras``: a small Keras on the graph runtime: ``Sequential``, ``Dense``,
``Flatten``, ``Dropout``, compile/fit/evaluate/predict, callbacks and weight
checkpoints, under no strategy, any synchronous strategy or ParameterServerStrategy
(``fit`` through a ClusterCoordinator), and whole models saved and loaded
(``model.save``, ``dt.keras.models.load_model``). Re-exports only."""
from __future__ import annotations

from distrib.keras import (
    activations,
    backend,
    callbacks,
    initializers,
    layers,
    losses,
    metrics,
    models,
    optimizers,
    regularizers,
    utils,
)
from distrib.keras.functional import Functional  # noqa: F401 - Model(inputs, outputs) finds it
from distrib.keras.input_layer import Input
from distrib.keras.models import Sequential
from distrib.keras.training import Model

__all__ = ["Sequential", "Model", "Input", "regularizers", "activations", "backend", "callbacks", "initializers",
           "layers", "losses", "metrics", "models", "optimizers", "utils"]
