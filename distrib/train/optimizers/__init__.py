"""Optimizers: ``Optimizer`` (what every TF1 optimizer shares: gradients, slots,
updates colocated with their variables, the cross-replica apply), one module
per update rule as in TF (``gradient_descent``, ``momentum``, ``adagrad``,
``adam``, ``rmsprop``), the learning-rate decays and the global step. Imports
``checkpoints`` only (an optimizer's slots are trackable).

Import the modules themselves; ``distrib.train`` re-exports the public names.
"""
