"""``dt.train``: optimizers, the global step, device setters, checkpoints and the Supervisor.

The names a TF1 script reaches for as ``tf.train.X``; each lives in a module
of one of ``dt.train``'s wings, this module only re-exports them. A wing
imports only the wings before it, in this order (``WINGS`` in
tests/test_layout.py):

- ``checkpoints/``: the trackable protocol, the checkpoint format and state
  file, ``Saver``, ``Checkpoint``, ``CheckpointManager``, the reader;
- ``optimizers/``: ``Optimizer`` and its update rules, decays, the global step,
  ``ExponentialMovingAverage``;
- ``chief/``: the chief role, its checkpoints and summaries, ``Supervisor``;
- ``sessions/``: session creators, ``MonitoredTrainingSession``, hooks, ``Coordinator``;
- ``replicas/``: ``replica_device_setter``, ``SyncReplicasOptimizer``;
- ``input/``: TF1's queue runners, input producers and batchers.

``ClusterSpec`` and
``Server`` are TF1's ``tf.train.ClusterSpec``/``tf.train.Server``: the very
objects ``dt.ClusterSpec``/``dt.Server`` (of ``cluster`` and ``server``).
"""
from __future__ import annotations

from distrib.cluster import ClusterSpec
from distrib.server import Server
from distrib.train.checkpoints.checkpoints_iterator import checkpoints_iterator, wait_for_new_checkpoint
from distrib.train.checkpoints.manager import CheckpointManager
from distrib.train.checkpoints.object_checkpoint import Checkpoint
from distrib.train.checkpoints.reader import CheckpointReader, list_variables, load_checkpoint
from distrib.train.checkpoints.saver import Saver
from distrib.train.checkpoints.state_file import (
    CheckpointState,
    get_checkpoint_state,
    latest_checkpoint,
    update_checkpoint_state,
)
from distrib.train.chief.supervisor import Supervisor
from distrib.train.input.input import (
    batch,
    input_producer,
    limit_epochs,
    shuffle_batch,
    string_input_producer,
)
from distrib.train.input.queue_runner import QueueRunner, add_queue_runner, start_queue_runners
from distrib.train.optimizers.adadelta import AdadeltaOptimizer
from distrib.train.optimizers.adagrad import AdagradOptimizer
from distrib.train.optimizers.adam import AdamOptimizer
from distrib.train.optimizers.ftrl import FtrlOptimizer
from distrib.train.optimizers.global_step import (
    create_global_step,
    get_global_step,
    get_or_create_global_step,
)
from distrib.train.optimizers.gradient_descent import GradientDescentOptimizer
from distrib.train.optimizers.learning_rate_decay import (
    exponential_decay,
    inverse_time_decay,
    natural_exp_decay,
    piecewise_constant,
    polynomial_decay,
)
from distrib.train.optimizers.momentum import MomentumOptimizer
from distrib.train.optimizers.moving_averages import ExponentialMovingAverage, moving_average_variables
from distrib.train.optimizers.optimizer import Optimizer
from distrib.train.optimizers.proximal import (
    AdagradDAOptimizer,
    ProximalAdagradOptimizer,
    ProximalGradientDescentOptimizer,
)
from distrib.train.optimizers.rmsprop import RMSPropOptimizer
from distrib.train.replicas.device_setter import replica_device_setter
from distrib.train.replicas.sync_replicas import SyncReplicasOptimizer
from distrib.train.sessions.coordinator import Coordinator
from distrib.train.sessions.monitored_session import MonitoredSession, MonitoredTrainingSession
from distrib.train.sessions.nan_hook import NanLossDuringTrainingError, NanTensorHook
from distrib.train.sessions.session_manager import (
    ChiefSessionCreator,
    Scaffold,
    SessionCreator,
    WorkerSessionCreator,
)
from distrib.train.sessions.session_run_hooks import (
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
from distrib.train.sessions.summary_hooks import SummarySaverHook

__all__ = [
    "ClusterSpec", "Server",   # tf.train.ClusterSpec / tf.train.Server: dt.ClusterSpec / dt.Server themselves
    "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer", "AdamOptimizer",
    "Optimizer", "get_or_create_global_step", "get_global_step", "create_global_step",
    "RMSPropOptimizer", "exponential_decay", "piecewise_constant", "polynomial_decay",
    "natural_exp_decay", "inverse_time_decay", "ExponentialMovingAverage", "moving_average_variables",
    "replica_device_setter", "Saver", "latest_checkpoint", "Supervisor",
    "CheckpointState", "get_checkpoint_state", "update_checkpoint_state",
    "Checkpoint", "CheckpointManager", "CheckpointReader", "load_checkpoint", "list_variables",
    "SyncReplicasOptimizer",
    "MonitoredTrainingSession", "MonitoredSession", "Scaffold", "SessionCreator",
    "ChiefSessionCreator", "WorkerSessionCreator", "Coordinator",
    "SessionRunHook", "SessionRunArgs", "SessionRunContext", "SessionRunValues",
    "SecondOrStepTimer", "StopAtStepHook", "CheckpointSaverHook", "CheckpointSaverListener",
    "LoggingTensorHook", "StepCounterHook", "SummarySaverHook", "NanTensorHook",
    "NanLossDuringTrainingError",
    # TF1's queue-based input (the input/ wing)
    "QueueRunner", "add_queue_runner", "start_queue_runners", "string_input_producer",
    "input_producer", "limit_epochs", "batch", "shuffle_batch",
    # issue 39: TF1's remaining optimizers, an evaluator's checkpoint loop
    "AdadeltaOptimizer", "FtrlOptimizer", "ProximalAdagradOptimizer",
    "ProximalGradientDescentOptimizer", "AdagradDAOptimizer", "checkpoints_iterator",
    "wait_for_new_checkpoint",
]

# tf.train.Example and its parts (distrib/io/example_pb.py): protobuf classes made on first use
_EXAMPLE_NAMES = ("Example", "Features", "Feature", "BytesList", "FloatList", "Int64List",
                  "FeatureList", "FeatureLists", "SequenceExample")
__all__ += list(_EXAMPLE_NAMES)


def __getattr__(name: str):
    if name in _EXAMPLE_NAMES:
        from distrib.io import example_pb
        return getattr(example_pb.messages(), name)
    raise AttributeError(f"module 'distrib.train' has no attribute {name!r}")
