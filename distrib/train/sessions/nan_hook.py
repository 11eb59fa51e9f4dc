"""``dt.train.NanTensorHook``: stop training when the loss becomes NaN (TF1's).

The loss rides in the step's own ``sess.run`` (``before_run``), so watching
it costs no extra step. A NaN fails the step's ``run`` with
``NanLossDuringTrainingError`` (TF's text, "NaN loss during training."), or,
with ``fail_on_nan_loss=False``, logs a warning and asks the monitored
session to stop. The CIFAR-10 tutorial's single-tower trainer passes its loss.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from distrib.train.sessions.session_run_hooks import (
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)

logger = logging.getLogger(__name__)

__all__ = ["NanLossDuringTrainingError", "NanTensorHook"]


class NanLossDuringTrainingError(RuntimeError):
    """The watched loss was NaN after a step (TF's ``tf.train.NanLossDuringTrainingError``)."""

    def __str__(self) -> str:
        return "NaN loss during training."


class NanTensorHook(SessionRunHook):
    """``NanTensorHook(loss_tensor, fail_on_nan_loss=True)``: fail (or stop) on a NaN loss."""

    def __init__(self, loss_tensor: Any, fail_on_nan_loss: bool = True) -> None:
        self._loss_tensor = loss_tensor
        self._fail_on_nan_loss = bool(fail_on_nan_loss)

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        return SessionRunArgs(self._loss_tensor)

    def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        if not np.any(np.isnan(run_values.results)):
            return
        if self._fail_on_nan_loss:
            logger.error("Model diverged with loss = NaN.")
            raise NanLossDuringTrainingError
        logger.warning("Model diverged with loss = NaN.")
        run_context.request_stop()
