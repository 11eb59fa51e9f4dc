"""Process helpers for tests: start a peer, read its address, always stop it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Sequence

from tests import background

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def worker_tf_config(ports: Sequence[int], index: int) -> str:
    """TF_CONFIG of worker ``index`` of a cluster of workers on loopback ``ports``."""
    return json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def run_workers(argv: Sequence[str], n: int = 2, bound_s: float = 90,
                args_of: Any = None, **env: str) -> list[str]:
    """``python *argv`` (from the repository root) as worker 0 .. n-1 of one cluster
    on free loopback ports (TF_CONFIG), ``args_of(i)`` appended for worker i; each
    one's merged output once all exited 0. One still running after ``bound_s`` s is
    killed by its pid, and a failed one fails the caller with its output's tail."""
    from distrib.launch.tasks import free_ports
    ports = free_ports(n)
    procs = [subprocess.Popen([sys.executable, *argv, *(args_of(i) if args_of else [])],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=child_env(TF_CONFIG=worker_tf_config(ports, i),
                                                       **env))
             for i in range(n)]
    try:
        outs = [p.communicate(timeout=bound_s)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    return outs


def simulated_spec(args: Sequence[str], timeout: float = 300) -> background.Spec:
    """``python *args`` from the repository root under numba's CUDA simulator (set
    before numba is imported: a fresh process), as a child :mod:`tests.background`
    can start early."""
    return background.Spec([sys.executable, *args], child_env(NUMBA_ENABLE_CUDASIM="1"),
                           timeout)


def simulated_json(args: Sequence[str], timeout: float = 300, key: str | None = None) -> Any:
    """Run ``python *args`` under the simulator (:func:`simulated_spec`; the one
    started in the background under ``key`` when given) and return the JSON
    object its stdout holds; the child's failure fails the caller."""
    spec = simulated_spec(args, timeout)
    out = background.run(key, spec) if key else subprocess.run(
        spec.argv, cwd=ROOT, env=spec.env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


class Proc:
    """A child process whose first stdout line we wait for; stopped on exit."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None,
                 ready_prefix: str = "", timeout: float = 30.0) -> None:
        self.p = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env or child_env(), cwd=ROOT)
        self.line = self._wait_line(ready_prefix, timeout)

    def _wait_line(self, prefix: str, timeout: float) -> str:
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sel.select(timeout=0.1):
                line = self.p.stdout.readline()
                if not line:
                    break
                if line.startswith(prefix):
                    return line.strip()
            if self.p.poll() is not None:
                break
        err = self.stop()
        raise RuntimeError(f"child {self.p.args} did not become ready: {err[-2000:]}")

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)

    def stop(self, timeout: float = 10.0) -> str:
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
            except Exception:
                pass
            try:
                self.p.terminate()
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout)
        try:
            return self.p.stderr.read() or ""
        except Exception:
            return ""

    def __enter__(self) -> "Proc":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def linear_data(n: int = 64, seed: int = 0) -> tuple:
    """``n`` examples of y = x . [1, 2, -1] + 0.5 (float32, x of 3 features):
    the Keras tests' small regression problem."""
    import numpy as np
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [2.0], [-1.0]], np.float32) + 0.5).astype(np.float32)
    return x, y


async def shut_down_strategy(strategy: Any, *then_stop: Any) -> None:
    """Close this loop's ``dt.function`` sessions, then stop the server that
    ``strategy`` (a ParameterServerStrategy, or None) started in this process,
    by its public ``shutdown()``; then, whatever happened, ``stop()`` each of
    ``then_stop`` (the cluster's servers or task processes)."""
    from distrib.distribute.functions import def_function
    try:
        await def_function.close_sessions()
        if strategy is not None:
            strategy.shutdown()
    finally:
        for each in then_stop:
            each.stop()


def reset_device_config() -> None:
    """``dt.config`` back to one CPU, every device visible, no memory growth set,
    unfrozen (the GPUs a process's CUDA driver started with stay): the state a
    test that configures logical devices found, for the next test."""
    from distrib.framework import config
    with config._lock:
        config._logical_cpus, config._frozen, config._visible, config._gpus_frozen = \
            None, False, None, False
        config._growth.clear()
