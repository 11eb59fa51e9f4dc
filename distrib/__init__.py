"""distrib: a distributed tensor runtime in the model of distributed TensorFlow.

    import distrib as dt
    server = dt.Server.create_local_server()
    sess = dt.SyncSession(server.target)
    sess.run(dt.constant("Hello, distributed world!"))

The package namespace only re-exports; each idea lives in its own module
(graph layer: graph/ops/variables/gradients; runtime: actors, master, worker,
session, server; training: ``dt.train``).
"""
from __future__ import annotations

from distrib import errors
from distrib._graph_exports import *  # noqa: F401,F403  (the graph part of the contract)
from distrib._graph_exports import __all__ as _graph_all
from distrib.cluster import ClusterSpec
from distrib.server import Server, serve
from distrib.session import ConfigProto, Session, SyncSession

__version__ = "0.1.0"


def __getattr__(name: str):
    # dt.train loads on first use: it pulls in the optimizers, Saver and Supervisor
    if name == "train":
        import importlib
        mod = importlib.import_module("distrib.train")
        globals()["train"] = mod
        return mod
    raise AttributeError(f"module 'distrib' has no attribute {name!r}")


__all__ = ["errors", "ClusterSpec", "Server", "serve", "ConfigProto", "Session",
           "SyncSession", "train", *_graph_all]
