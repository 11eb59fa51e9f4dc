"""The process runtime: the one object that owns what a process of distrib
shares, and makes, in sight and in one place, every registration that joins
a layer to one above it.

A module of distrib defines and does nothing else when it is imported
(tests/test_process.py imports every one of them without this and finds
nothing registered). Some layers need something built above them: a
session (``client``) reaches its master through the runtime's actor
channel; checkpoints (``train``) move values with ``dt.function`` steps
(``distribute``); every task runs the summary ops' kernels (``summary``)
through the kernel registry, which cannot import distrib; the graph's
tensors build ``ops``' ops for ``a + b``; the op catalogue holds ``ops``'
gradients. :class:`ProcessRuntime` makes those joins as explicit calls when
it is made, and owns the process's client actor system (one per event loop
that calls, leased by sessions, ``request_stop``, the chief role, membership
readers, the coordinator, the launcher and ``distrib status``: see
:mod:`distrib.runtime.actors.clients`) and the process's exit hook (summary
writers flushed, then servers stopped, then loop threads stopped, in that
order).

``import distrib`` makes it (``distrib/__init__`` calls :func:`runtime`,
the package's one statement that is not a definition); :func:`runtime`
returns it after that.
"""
from __future__ import annotations

import atexit
import importlib
import os
import threading
from typing import Any

from distrib.client.channel import register_channel_factory
from distrib.client.loop_thread import stop_loops_at_exit
from distrib.client.step_runner import register_step_runner, step_runner
from distrib.eager.remote import register_remote_reader
from distrib.framework.operation import bind_extra_operators
from distrib.ops.eager_variables import EagerVariable
from distrib.ops.gradients import install_builtin_gradients
from distrib.ops.math_ops import bind_tensor_operators
from distrib.ops.tensor_indexing import OPERATORS as INDEXING_OPERATORS
from distrib.ops.variables import register_eager_variable
from distrib.runtime.actors import clients
from distrib.runtime.step.master_channel import ActorMasterChannel
from distrib.server.local_session import open_local_channel
from distrib.server.server_lib import stop_servers_at_exit
from distrib.summary.event_writer import close_writers_at_exit
from distrib.summary.summary_ops import register_kernels as register_summary_kernels

__all__ = ["ProcessRuntime", "runtime"]


def _function_steps() -> Any:
    # dt.function's step runner, for checkpoints; distrib.distribute is imported on
    # first use (it is the heaviest subpackage, and most programs never restore)
    return importlib.import_module("distrib.distribute.functions.checkpoint_steps").FunctionSteps()


async def _read_variables(variables: Any) -> list[Any]:
    return await step_runner().read(list(variables))


class ProcessRuntime:
    """What one process of distrib shares: its client actor systems, the
    registrations between layers, its exit hook. Made once (:func:`runtime`)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.clients = clients.ClientSystems()
        # every join of a layer to one above it, here and nowhere else
        clients.install(self.clients)
        register_channel_factory(ActorMasterChannel.open, open_local_channel)
        register_step_runner(_function_steps)
        install_builtin_gradients()
        register_summary_kernels()   # after the gradients: it marks its ops not differentiable
        bind_tensor_operators()
        bind_extra_operators(INDEXING_OPERATORS)   # tensor[...], // and %
        register_eager_variable(EagerVariable)   # what dt.Variable makes with eager values on
        register_remote_reader(_read_variables)  # `await v.read_value()` of a placed variable
        atexit.register(self.at_exit)

    def at_exit(self) -> None:
        """The process's exit: writers' events reach the disk, then servers stop,
        then the loop threads they and the sessions ran on."""
        close_writers_at_exit()
        stop_servers_at_exit()
        stop_loops_at_exit()


_made: ProcessRuntime | None = None
_lock = threading.Lock()


def runtime() -> ProcessRuntime:
    """The process runtime, made on the first call (``import distrib`` makes that call)."""
    global _made
    with _lock:
        if _made is None:
            _made = ProcessRuntime()
        return _made
