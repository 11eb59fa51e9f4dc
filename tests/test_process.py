"""The process runtime (distrib/process.py): a module's import defines and
registers nothing; making the runtime makes every join between layers; the
process has one client actor system, however many clients it runs at once.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import child_env
from tests.peers.cli_cluster import cli_flags_task, cluster_spec

ROOT = Path(__file__).resolve().parent.parent

# Imports every module of distrib with the package's own __init__ (which makes the
# runtime) left out, then looks at each join before and after the runtime is made.
PROBE = r'''
import atexit, json, sys, threading, types
from pathlib import Path
root = Path(sys.argv[1])
pkg = types.ModuleType("distrib")
pkg.__path__ = [str(root / "distrib")]
sys.modules["distrib"] = pkg
import logging, multiprocessing.util, numpy, msgpack, uvloop   # what they register at import is theirs
callbacks_before = atexit._ncallbacks()
imported = []
for path in sorted((root / "distrib").rglob("*.py")):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    name = ".".join(parts)
    if name in ("distrib", "distrib.process", "distrib.demo") or parts[-1] == "__main__":
        continue
    __import__(name)
    imported.append(name)

import kernels
from distrib.client import channel, step_runner
from distrib.errors import FailedPreconditionError
from distrib.framework.graph import Graph
from distrib.framework.op_def import op_def
from distrib.ops import math_ops
from distrib.runtime.actors import clients

from kernels import registry
registered_at_import = sum(len(t) for t in registry._registry.values())

def joins():
    out = {}
    out["channel factory"] = bool(channel._FACTORY)
    out["step runner"] = step_runner._runner_factory is not None
    out["summary kernels"] = kernels.has_kernel("ScalarSummary", kernels.CPU)
    out["builtin gradients"] = op_def("MatMul").gradient is not None
    out["summary not differentiable"] = op_def("ScalarSummary").no_gradient
    g = Graph()
    with g.as_default():
        a = math_ops.constant(1.0)
        try:
            a + a
            out["tensor operators"] = True
        except RuntimeError:
            out["tensor operators"] = False
    try:
        clients.client_systems()
        out["client systems"] = True
    except FailedPreconditionError:
        out["client systems"] = False
    out["exit hooks"] = atexit._ncallbacks() - callbacks_before
    out["threads"] = threading.active_count()
    return out

before = joins()
import importlib
process = importlib.import_module("distrib.process")
made = process.runtime()
after = joins()
print(json.dumps({"imported": len(imported), "kernels at import": registered_at_import,
                  "before": before, "after": after,
                  "same": process.runtime() is made}))
'''


def test_importing_a_module_registers_nothing_and_the_runtime_makes_every_join():
    out = subprocess.run([sys.executable, "-c", PROBE, str(ROOT)], capture_output=True, text=True,
                         timeout=120, env=child_env(), cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["imported"] > 150   # every module of the package, not a few
    # the runtime imports kernel modules for their constants: that registers no kernel
    assert found["kernels at import"] == 0
    before, after = found["before"], found["after"]
    assert before == {"channel factory": False, "step runner": False, "summary kernels": False,
                      "builtin gradients": False, "summary not differentiable": False,
                      "tensor operators": False, "client systems": False, "exit hooks": 0,
                      "threads": 1}, before
    assert after == {"channel factory": True, "step runner": True, "summary kernels": True,
                     "builtin gradients": True, "summary not differentiable": True,
                     "tensor operators": True, "client systems": True, "exit hooks": 1,
                     "threads": 1}, after
    assert found["same"]


def test_only_the_client_systems_module_makes_a_client_actor_system():
    """Every client of distrib leases the process's client actor system; none
    makes one of its own (a listening system is a task's own server)."""
    makers = []
    for path in sorted((ROOT / "distrib").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ActorSystem" \
                    and any(k.arg == "listen" for k in node.keywords):
                makers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert makers == ["distrib/runtime/actors/clients.py:" + makers[0].split(":")[-1]], makers


async def test_one_client_actor_system_however_many_clients_run_at_once():
    import distrib as dt
    from distrib.client.channel import open_master_channel
    from distrib.runtime.chief.membership import MembershipReader
    from distrib.server.server_lib import request_stop
    from distrib.status.query import StatusClient

    clients = dt.process.runtime().clients
    assert clients.live() == []
    spec = cluster_spec(ps=1, worker=1)
    address = spec["worker"][0]
    with cli_flags_task(spec, "ps", 0), cli_flags_task(spec, "worker", 0):
        channel = await open_master_channel(address)
        ps_channel = await open_master_channel(spec["ps"][0])
        reader = MembershipReader()
        await reader.read(address)
        assert await ps_channel.list_devices()   # a channel dials on its first call
        try:
            live = clients.live()
            assert len(live) == 1, live
            # every client holds the one system, which dialed each task once
            assert channel._system is live[0] and ps_channel._system is live[0] \
                and reader.system is live[0]
            peers = sorted(c.peer.name for c in live[0].connections())
            assert peers == ["/job:ps/task:0", "/job:worker/task:0"], peers
            # distrib status dials by tcp with its own deadline: a system of that config
            status = StatusClient(dt.ClusterSpec(spec))
            rows = await status.query()
            assert [row.reason for row in rows] == [None, None], rows
            assert len(clients.live()) == 2 and status._system.config.mode == "tcp"
            await status.close()
            assert clients.live() == live
            await request_stop(address)   # one more, for one exchange
            assert clients.live() == live
        finally:
            await channel.close()
            await ps_channel.close()
            assert len(clients.live()) == 1   # the reader still holds it
            await reader.close()
        assert clients.live() == []   # the last lease shut it down
        assert live[0].connections() == []
