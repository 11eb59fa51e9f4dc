"""``dt.train``: optimizers, the global step, device setters, checkpoints and the Supervisor.

The names a TF1 script reaches for as ``tf.train.X``; each lives in a module
of :mod:`distrib.train`, this module only re-exports them. ``ClusterSpec`` and
``Server`` are TF1's ``tf.train.ClusterSpec``/``tf.train.Server``: the very
objects ``dt.ClusterSpec``/``dt.Server`` (of ``cluster`` and ``server``).
"""
from __future__ import annotations

from distrib.cluster import ClusterSpec
from distrib.server import Server
from distrib.train.checkpoint import (
    CheckpointState,
    get_checkpoint_state,
    latest_checkpoint,
    update_checkpoint_state,
)
from distrib.train.checkpoint_manager import CheckpointManager
from distrib.train.checkpoint_reader import CheckpointReader, list_variables, load_checkpoint
from distrib.train.coordinator import Coordinator
from distrib.train.device_setter import replica_device_setter
from distrib.train.global_step import create_global_step, get_global_step, get_or_create_global_step
from distrib.train.learning_rate_decay import (
    exponential_decay,
    inverse_time_decay,
    natural_exp_decay,
    piecewise_constant,
    polynomial_decay,
)
from distrib.train.monitored_session import MonitoredSession, MonitoredTrainingSession
from distrib.train.object_checkpoint import Checkpoint
from distrib.train.optimizers import (
    AdagradOptimizer,
    AdamOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
)
from distrib.train.rmsprop import RMSPropOptimizer
from distrib.train.saver import Saver
from distrib.train.session_manager import ChiefSessionCreator, Scaffold, SessionCreator, WorkerSessionCreator
from distrib.train.session_run_hooks import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    LoggingTensorHook,
    SecondOrStepTimer,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    StepCounterHook,
    StopAtStepHook,
)
from distrib.train.summary_hooks import SummarySaverHook
from distrib.train.supervisor import Supervisor
from distrib.train.sync_replicas import SyncReplicasOptimizer

__all__ = [
    "ClusterSpec", "Server",   # tf.train.ClusterSpec / tf.train.Server: dt.ClusterSpec / dt.Server themselves
    "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer", "AdamOptimizer",
    "Optimizer", "get_or_create_global_step", "get_global_step", "create_global_step",
    "RMSPropOptimizer", "exponential_decay", "piecewise_constant", "polynomial_decay",
    "natural_exp_decay", "inverse_time_decay",
    "replica_device_setter", "Saver", "latest_checkpoint", "Supervisor",
    "CheckpointState", "get_checkpoint_state", "update_checkpoint_state",
    "Checkpoint", "CheckpointManager", "CheckpointReader", "load_checkpoint", "list_variables",
    "SyncReplicasOptimizer",
    "MonitoredTrainingSession", "MonitoredSession", "Scaffold", "SessionCreator",
    "ChiefSessionCreator", "WorkerSessionCreator", "Coordinator",
    "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues",
    "SecondOrStepTimer", "StopAtStepHook", "CheckpointSaverHook", "CheckpointSaverListener",
    "LoggingTensorHook", "StepCounterHook", "SummarySaverHook",
]
