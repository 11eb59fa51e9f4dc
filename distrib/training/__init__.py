"""Training: device setters, checkpoints, optimizers, Saver, Supervisor (the ``dt.train`` layer)."""
