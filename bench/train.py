"""Training throughput of distrib beside plain numpy loops, measured in the
same run: the seeds' speedup table on this machine.

The model: a 784-512-512-10 MLP (relu, softmax cross-entropy, mean loss),
batch 256 per worker, plain SGD (``GradientDescentOptimizer(0.01)``).
Synthetic data: one fixed random batch (inputs and one-hot labels) made once
per process and fed every step through ``feed_dict``. Every process (this
one and the ones it starts) runs with one BLAS thread: the BLAS variables are
set to 1 in the environment before numpy is imported.

Rows (examples/s; ratio vs ``numpy-plain`` of the same round):
- ``numpy-plain``: the training loop in numpy, fresh temporaries every step,
  alone in a fresh process (see ``numpy_window`` for why);
- ``numpy-prealloc``: the same with every temporary preallocated (``out=``);
- ``numpy-2proc``: two numpy-plain processes at once, examples/s
  summed: what two processes get out of this machine's cores and memory, the
  ceiling for ps1-w2 (which also runs a ps);
- ``local-1proc``: an in-process local server (``dt.serve``), variables and
  model on one task, a Session on the same loop, in a process of its own;
- ``local-summaries``: local-1proc's process and session, each step also
  fetching the loss's summary op (``dt.summary.scalar``, TF1's form) and
  writing it with a ``dt.summary.FileWriter``: summaries every step. Target:
  >= 0.97x local-1proc of the same round (``vs row``; summaries cost <= 3%);
- ``ps1-w1``: a ps task (``python -m distrib.server``) and a worker process
  (this file with ``--replica``: it serves its task and runs its own client
  session, between-graph, variables on the ps via ``replica_device_setter``);
  the second worker of the cluster idles meanwhile;
- ``ps1-w2``: both workers train at once (asynchronous), examples/s summed;
- ``ps1-w2-traced``: ps1-w2 with every step traced
  (``RunOptions(trace_level=FULL_TRACE)`` and a ``RunMetadata``: each op's
  times on the three tasks, gathered by each worker's master). Target: a
  traced step costs <= 2x an untraced one, >= 0.5x ps1-w2 of the same round
  (``vs row``);
- ``mwms-w2``: two workers (this file with ``--mwms``), each a
  ``MultiWorkerMirroredStrategy()`` from TF_CONFIG, written as a TF2 custom
  loop: variables and optimizer in ``strategy.scope()``, a ``@dt.function``
  step whose replica function (``strategy.run``) takes the batch as a numpy
  argument, divides the summed loss by the global batch
  (``compute_average_loss``, 512) and calls ``apply_gradients``, which
  all-reduces the six gradients (2.6 MB) between the workers. Synchronous:
  a window is a number of steps both run (from the last window's ms per
  step), examples/s summed; each worker checks first that its first step
  equals numpy's one step on the 512 rows. The collective engine counts no
  messages or bytes, so msgs/step and tensor MB stay blank;
- ``psstrategy-w2``: TF2's parameter-server training on the ps1 cluster's
  shape: 1 ps and 2 workers (bare ``python -m distrib.server`` processes) and
  a chief, the coordinator (this file with ``--pss``): a
  ``ParameterServerStrategy`` from TF_CONFIG (task chief:0; the strategy
  starts the chief's server in that process) and a ``ClusterCoordinator``
  that schedules a ``@dt.function`` step (``strategy.run`` of a replica
  function doing GradientTape + ``apply_gradients`` with the mean loss) on
  whichever worker is free: asynchronous, as ps1-w2. Each worker's batch
  comes from its per-worker dataset (``Dataset.from_tensors(batch).repeat()``,
  ``next(iterator)`` in the step; the coordinator reads it and feeds it).
  The coordinator keeps ``PSS_INFLIGHT`` closures per worker scheduled
  (awaiting the oldest RemoteValue before scheduling the next), so a worker
  that finishes a step finds the next one queued; the coordinator runs one
  closure per worker at a time (``closures_per_worker=1``, the default, TF's),
  so a worker idles a round trip between two steps; a window ends with
  ``join`` and counts every closure scheduled in it over its whole time.
  Target: >= 0.9x ps1-w2 of the same round (``vs row``). Its cpu ms adds
  the coordinator's process; the JSON also gives ``coordinator_cpu_ms_per_step``
  and ``chief_kernel_ms_per_step`` (kernels that ran in the chief's own
  server: 0 when the step's ops are on the workers and the ps, as they
  should be);
- ``psstrategy-w2-overlap``: psstrategy-w2 with ``closures_per_worker=2``
  (the opt-in): each worker is sent its next closure while the current one
  runs, so it never idles between steps, at the price of staler gradients
  (a step's reads race up to three other steps' updates, not one);
- ``keras-local``: the same model as a ``dt.keras`` Sequential (Dense 512
  relu, Dense 512 relu, Dense 10; ``SparseCategoricalCrossentropy(from_logits
  =True)``, ``SGD(0.01)``, the same initial weights via ``set_weights``)
  trained by ``model.fit(verbose=0)`` with no strategy (the process's local
  server) on ``Dataset.from_tensors((x, labels)).repeat()`` with
  ``steps_per_epoch``, in a process of its own (``--keras``); its first step
  is checked against numpy's. A window is one ``fit`` of about ``seconds`` of
  steps (from the last window's ms per step) after a few untimed steps (the
  trace happens before the first window), timed around the ``fit`` call.
  Target: >= 0.95x local-1proc of the same round (``vs row``).

The configurations take turns in rounds and each row reports the median over
rounds, so load from other processes on the machine hits all of them alike.
What a step costs comes from the runtime's own counters (``stats`` of the
worker and master services): messages (tensor batches between tasks, plus
one request and one reply per remote partition call) and bytes per step, the
time in which kernels ran beside the step's wall time, and the CPU time of
all the configuration's processes.

How distrib uses the cores (no BLAS threads, no splitting of one kernel):
kernels run inline on the event loop's thread; a heavy kernel goes to a pool
thread only beside another heavy kernel of the same step (the two matmuls of
a layer's backward pass: dW goes to the pool, dX, which the next layer's
gradients wait for, stays on the loop) and only while the machine has an
idle core, which it has for local-1proc and ps1-w1 and mostly not for ps1-w2
(``DISTRIB_INTER_OP_THREADS``, default the number of cores; 1 turns this
off). A worker waiting a short while for the ps (its variables, the ps's
answer) keeps its event loop polling while a core would idle anyway, so
its core does not halt (on a VM a halted core's wake-up costs 0.1-0.3 ms a
message); that polling shows in ps1-w1's cpu ms. A weight's gradient is
computed into shared memory and reaches the ps without a copy. Timings are
never asserted: this only reports. ``--json PATH`` writes the rows.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"   # before numpy loads BLAS, here and in every child

import argparse  # noqa: E402
import asyncio  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import distrib as dt  # noqa: E402
from distrib.demo import free_ports  # noqa: E402
from distrib.distribute.functions import def_function  # noqa: E402
from distrib.runtime.actors.system import ActorSystem, client_name  # noqa: E402

BATCH = 256
SIZES = [784, 512, 512, 10]
LR = 0.01
WARMUP_STEPS = 5
TARGETS = {"local-1proc": ">= 1.0x", "ps1-w1": ">= 0.9x", "ps1-w2": ">= 1.5x",
           "mwms-w2": ">= 1.5x", "psstrategy-w2": ">= 0.9x", "keras-local": ">= 0.95x",
           "local-summaries": ">= 0.97x", "ps1-w2-traced": ">= 0.5x"}
# rows whose target is against another row of the same round, not numpy-plain
VERSUS = {"psstrategy-w2": "ps1-w2", "psstrategy-w2-overlap": "ps1-w2", "keras-local": "local-1proc", "local-summaries": "local-1proc",
          "ps1-w2-traced": "ps1-w2"}


def synthetic_batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
    return x, y


def initial_params(seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(SIZES, SIZES[1:]):
        out += [(rng.standard_normal((a, b)) * 0.05).astype(np.float32), np.zeros(b, np.float32)]
    return out


# -- numpy baselines -------------------------------------------------------------

class NumpyPlain:
    """The training step written directly in numpy, new arrays every step."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y
        self.n = np.float32(len(x))
        self.p = initial_params()

    def step(self) -> None:
        w0, b0, w1, b1, w2, b2 = self.p
        x, y = self.x, self.y
        z1 = x @ w0 + b0
        h1 = np.maximum(z1, 0)
        z2 = h1 @ w1 + b1
        h2 = np.maximum(z2, 0)
        z3 = h2 @ w2 + b2
        e = np.exp(z3 - z3.max(axis=1, keepdims=True))
        prob = e / e.sum(axis=1, keepdims=True)
        d3 = (prob - y) / self.n
        d2 = (d3 @ w2.T) * (z2 > 0)
        d1 = (d2 @ w1.T) * (z1 > 0)
        grads = [x.T @ d1, d1.sum(0), h1.T @ d2, d2.sum(0), h2.T @ d3, d3.sum(0)]
        lr = np.float32(LR)
        for p, g in zip(self.p, grads):
            p -= lr * g


class NumpyPrealloc:
    """The same step with every temporary allocated once (``out=``)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y
        self.p = initial_params()
        e = lambda *s: np.empty(s, np.float32)  # noqa: E731
        n, (a, b, c, d) = BATCH, SIZES
        self.z1, self.z2, self.z3 = e(n, b), e(n, c), e(n, d)
        self.h1, self.h2 = e(n, b), e(n, c)
        self.m1, self.m2 = np.empty((n, b), bool), np.empty((n, c), bool)
        self.row = e(n, 1)
        self.d1, self.d2 = e(n, b), e(n, c)
        self.g = [e(a, b), e(b), e(b, c), e(c), e(c, d), e(d)]
        self.scratch = [np.empty_like(g) for g in self.g]

    def step(self) -> None:
        w0, b0, w1, b1, w2, b2 = self.p
        z1, z2, z3, h1, h2, d1, d2, row = (self.z1, self.z2, self.z3, self.h1, self.h2,
                                          self.d1, self.d2, self.row)
        np.add(np.matmul(self.x, w0, out=z1), b0, out=z1)
        np.maximum(z1, 0, out=h1)
        np.add(np.matmul(h1, w1, out=z2), b1, out=z2)
        np.maximum(z2, 0, out=h2)
        np.add(np.matmul(h2, w2, out=z3), b2, out=z3)
        np.subtract(z3, np.max(z3, axis=1, keepdims=True, out=row), out=z3)
        np.exp(z3, out=z3)
        np.divide(z3, np.sum(z3, axis=1, keepdims=True, out=row), out=z3)
        np.subtract(z3, self.y, out=z3)
        np.multiply(z3, np.float32(1.0 / BATCH), out=z3)           # d3
        np.multiply(np.matmul(z3, w2.T, out=d2), np.greater(z2, 0, out=self.m2), out=d2)
        np.multiply(np.matmul(d2, w1.T, out=d1), np.greater(z1, 0, out=self.m1), out=d1)
        g = self.g
        np.matmul(self.x.T, d1, out=g[0]); np.sum(d1, axis=0, out=g[1])  # noqa: E702
        np.matmul(h1.T, d2, out=g[2]); np.sum(d2, axis=0, out=g[3])  # noqa: E702
        np.matmul(h2.T, z3, out=g[4]); np.sum(z3, axis=0, out=g[5])  # noqa: E702
        lr = np.float32(LR)
        for p, gr, s in zip(self.p, g, self.scratch):
            np.subtract(p, np.multiply(gr, lr, out=s), out=p)


def timed_window(step: Any, seconds: float) -> tuple[int, float]:
    """Steps of ``step()`` for about ``seconds``; returns (steps, elapsed)."""
    t0 = time.perf_counter()
    steps = 0
    while True:
        step()
        steps += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return steps, elapsed


# -- the model on distrib ----------------------------------------------------------

def build_model() -> tuple[Any, Any, Any, Any]:
    """x, y placeholders, the train op and the initializer, in the default graph."""
    x = dt.placeholder(dt.float32, [None, SIZES[0]], name="x")
    y = dt.placeholder(dt.float32, [None, SIZES[-1]], name="y")
    h = x
    init = iter(initial_params())
    for i in range(len(SIZES) - 1):
        w = dt.Variable(next(init), name=f"w{i}")
        b = dt.Variable(next(init), name=f"b{i}")
        h = dt.matmul(h, w) + b
        if i < len(SIZES) - 2:
            h = dt.nn.relu(h)
    loss = dt.reduce_mean(dt.nn.softmax_cross_entropy_with_logits(labels=y, logits=h))
    dt.add_to_collection(dt.GraphKeys.LOSSES, loss)   # local-summaries writes it
    train = dt.train.GradientDescentOptimizer(LR).minimize(loss)
    return x, y, train, dt.global_variables_initializer()


class LocalTrainer:
    """``local-1proc``: one in-process server holds the variables and runs the model."""

    async def __aenter__(self) -> LocalTrainer:
        self._serve = dt.serve({"local": ["localhost:0"]})
        self.server = await self._serve.__aenter__()
        graph = dt.Graph()
        with graph.as_default():
            x, y, self.train, init = build_model()
            # local-summaries: the loss as a TF1 summary op, written by a FileWriter
            self.summary = dt.summary.scalar("loss", graph.get_collection(dt.GraphKeys.LOSSES)[0])
        self.logdir = tempfile.mkdtemp(prefix="bench-summaries-")
        self.writer = dt.summary.FileWriter(self.logdir)
        self.sess = dt.Session(self.server.target, graph=graph)
        await self.sess.__aenter__()
        await self.sess.run(init)
        bx, by = synthetic_batch(0)
        self.feed = {x: bx, y: by}
        for _ in range(WARMUP_STEPS):
            await self.sess.run(self.train, self.feed)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.sess.__aexit__(*exc)
        finally:
            self.writer.close()
            shutil.rmtree(self.logdir, ignore_errors=True)
            await self._serve.__aexit__(*exc)

    async def window(self, seconds: float, mode: str = "") -> dict[str, Any]:
        """``mode`` "summaries" (``local-summaries``): each step also fetches the
        loss's summary op and writes it with the FileWriter (a buffered append)."""
        await _warm_up(self.sess, self.train, self.feed)
        summaries = mode == "summaries"
        if summaries:   # the step with the summary fetched: planned before the window
            for _ in range(WARMUP_STEPS):
                await self.sess.run([self.train, self.summary], self.feed)
        self.server.worker.reset_stats()
        self.server.master.reset_stats()
        t0 = time.perf_counter()
        steps = 0
        while time.perf_counter() - t0 < seconds:
            if summaries:
                _, summary = await self.sess.run([self.train, self.summary], self.feed)
                self.writer.add_summary(summary, steps)
            else:
                await self.sess.run(self.train, self.feed)
            steps += 1
        elapsed = time.perf_counter() - t0
        return step_costs(steps, elapsed, self.server.master.stats(),
                          [self.server.worker.stats()])


def step_costs(steps: int, elapsed: float, master: dict, workers: list[dict]) -> dict[str, Any]:
    """Examples/s and per-step costs from the runtime's counters."""
    tensors = sum(w["tensors_sent"] for w in workers)
    messages = sum(w["messages_sent"] for w in workers)
    busy = sum(w["kernel_busy_s"] for w in workers)
    return {
        "steps": steps, "seconds": elapsed, "examples_per_s": steps * BATCH / elapsed,
        "ms_per_step": elapsed / steps * 1e3,
        "kernel_ms_per_step": busy / steps * 1e3,
        "outside_ms_per_step": (elapsed - busy) / steps * 1e3,
        "cpu_ms_per_step": sum(w["process_cpu_s"] for w in workers) / steps * 1e3,
        "pool_kernels_per_step": sum(w["pool_kernels"] for w in workers) / steps,
        "in_place_kernels_per_step": sum(w["in_place_kernels"] for w in workers) / steps,
        "messages_per_step": (messages + 2 * master["remote_calls"]) / steps,
        "tensors_per_step": tensors / steps,
        "tensor_MB_per_step": sum(w["bytes_sent"] for w in workers) / steps / 1e6,
        "feed_MB_per_step": master["feed_bytes"] / steps / 1e6,
    }


# -- the ps cluster ------------------------------------------------------------------

async def replica_main(spec: dict[str, list[str]], task: int) -> None:
    """A worker task: serves itself, trains its own graph, obeys stdin.

    Commands: ``go SECONDS`` trains for that long and prints one JSON line;
    ``quit`` ends the process."""
    async with dt.serve(spec, job_name="worker", task_index=task) as server:
        graph = dt.Graph()
        with graph.as_default(), dt.device(dt.train.replica_device_setter(
                cluster=dt.ClusterSpec(spec), worker_device=f"/job:worker/task:{task}")):
            x, y, train, init = build_model()
        bx, by = synthetic_batch(task)
        feed = {x: bx, y: by}
        async with dt.Session(server.target, graph=graph) as sess:
            if task == 0:
                await sess.run(init)
            await _until_initialized(sess, train, feed)
            for _ in range(WARMUP_STEPS):
                await sess.run(train, feed)
            ps = server.system.ref(spec["ps"][0], "worker")

            async def window(seconds: float, mode: str = "") -> dict[str, Any]:
                # mode "traced" (ps1-w2-traced): every step records its run metadata
                traced = {"options": dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE),
                          "run_metadata": dt.RunMetadata()} if mode == "traced" else {}
                await _warm_up(sess, train, feed)
                for svc in (server.worker, server.master):
                    svc.reset_stats()
                if task == 0:   # one reset: the ps counts both replicas' steps
                    await ps.call("reset_stats")
                t0 = time.perf_counter()
                steps = 0
                while time.perf_counter() - t0 < seconds:
                    await sess.run(train, feed, **traced)
                    steps += 1
                elapsed = time.perf_counter() - t0
                return {"steps": steps, "seconds": elapsed, "master": server.master.stats(),
                        "worker": server.worker.stats(), "ps": await ps.call("stats")}

            await _serve_commands(window)


async def _warm_up(sess: Any, train: Any, feed: dict) -> None:
    """A few untimed steps before each window, as each numpy loop gets in its
    fresh process: a task that idled through the other rows' windows runs
    its first steps up to a third slower (cold caches, idle cores waking)."""
    for _ in range(WARMUP_STEPS):
        await sess.run(train, feed)


async def _serve_commands(window: Any, greet: bool = True) -> None:
    """Say ``ready``, then obey stdin: ``go SECONDS`` runs ``window(SECONDS)``
    and prints its result as one JSON line; ``quit`` (or end of input) returns."""
    if greet:
        print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line or line[0] == "quit":
            return
        print(json.dumps(await window(float(line[1]), *line[2:])), flush=True)


async def _until_initialized(sess: Any, train: Any, feed: dict) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            await sess.run(train, feed)
            return
        except dt.errors.FailedPreconditionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


class Child:
    """A process of a cluster that answers on stdout; always stopped. ``wait=False``:
    the caller calls ``expect_ready`` after starting its peers (MWMS workers)."""

    def __init__(self, args: list[str], ready: str, wait: bool = True) -> None:
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.args, self.ready, self.hello = args, ready, ""
        self.proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        if wait:
            self.expect_ready(60)

    def expect_ready(self, timeout: float) -> None:
        try:
            line = self.readline(timeout)
            if not line.startswith(self.ready):
                raise SystemExit(f"{' '.join(self.args[:3])} did not start: {line!r}")
        except BaseException:
            self.stop()
            raise
        self.hello = line

    def readline(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise SystemExit(f"no answer from pid {self.proc.pid} within {timeout:g}s")
        return self.proc.stdout.readline()

    def command(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.command("quit")
            except (BrokenPipeError, OSError):
                pass
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class PsCluster:
    """One ps (the CLI) and two worker replicas (this file, ``--replica``)."""

    def __init__(self) -> None:
        ports = free_ports(3)
        self.spec = {"ps": [f"localhost:{ports[0]}"],
                     "worker": [f"localhost:{ports[1]}", f"localhost:{ports[2]}"]}
        self.children: list[Child] = []

    def __enter__(self) -> PsCluster:
        try:
            self.children.append(Child(
                ["-m", "distrib.server", "--ps_hosts", self.spec["ps"][0],
                 "--worker_hosts", ",".join(self.spec["worker"]), "--job_name", "ps",
                 "--task_index", "0", "--log_level", "WARNING"], ready="serving"))
            for task in (0, 1):   # the chief first: it initializes the variables
                self.children.append(Child(
                    [os.path.abspath(__file__), "--replica", str(task),
                     "--spec", json.dumps(self.spec)], ready="ready"))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        for child in reversed(self.children):
            child.stop()

    def window(self, workers: int, seconds: float, mode: str = "") -> dict[str, Any]:
        replicas = self.children[1:1 + workers]
        for r in replicas:
            r.command(f"go {seconds} {mode}".rstrip())
        results = [json.loads(r.readline(seconds + 60)) for r in replicas]
        # per step of any replica: every replica's traffic and the ps's (which
        # counts all replicas' steps) over all replicas' steps
        master = {k: sum(r["master"][k] for r in results) for k in results[0]["master"]}
        out = step_costs(sum(r["steps"] for r in results),
                         statistics.mean(r["seconds"] for r in results) / len(results),
                         master, [r["worker"] for r in results] + [results[0]["ps"]])
        out["examples_per_s"] = sum(r["steps"] * BATCH / r["seconds"] for r in results)
        # the ps's share of cpu ms (JSON only): what serving one worker step costs it
        out["ps_cpu_ms_per_step"] = (results[0]["ps"]["process_cpu_s"]
                                     / sum(r["steps"] for r in results) * 1e3)
        out["ms_per_step"] = statistics.mean(r["seconds"] / r["steps"] for r in results) * 1e3
        out["outside_ms_per_step"] = out["ms_per_step"] - out["kernel_ms_per_step"]
        return out


# -- the MWMS workers ----------------------------------------------------------------

async def mwms_main(spec: dict[str, list[str]], task: int) -> None:
    """An MWMS worker (``--mwms TASK``), a TF2 custom loop; the strategy starts
    this task's server in the process. Says ``ready MS`` (ms per step) once its
    first step matched numpy's on the global batch; ``go STEPS`` runs that many
    steps, as the other worker does (a synchronous step needs both)."""
    os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "worker",
                                                                     "index": task}})
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    start = initial_params()
    with strategy.scope():
        params = [dt.Variable(v, name=f"{'wb'[i % 2]}{i // 2}") for i, v in enumerate(start)]
        optimizer = dt.train.GradientDescentOptimizer(LR)

    def replica_step(x: Any, y: Any) -> Any:
        with dt.GradientTape() as tape:
            h = x
            for i in range(0, len(params), 2):
                h = dt.matmul(h, params[i]) + params[i + 1]
                if i + 2 < len(params):
                    h = dt.nn.relu(h)
            loss = dt.nn.compute_average_loss(
                dt.nn.softmax_cross_entropy_with_logits(labels=y, logits=h),
                global_batch_size=2 * BATCH)
        optimizer.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    @dt.function
    def train_step(x: Any, y: Any) -> Any:
        return strategy.run(replica_step, args=(x, y))

    bx, by = synthetic_batch(task)
    await train_step(bx, by)
    # the first step must be numpy's one step on both workers' batches (512 rows)
    ref = NumpyPlain(*(np.concatenate(z) for z in zip(synthetic_batch(0), synthetic_batch(1))))
    ref.step()
    def read_params() -> Any:
        return [p.value() for p in params]
    got = await dt.function(read_params)()
    err = max(float(np.abs((g - s) - (r - s)).max() / np.abs(r - s).max())
              for g, r, s in zip(got, ref.p, start))
    if not err < 1e-3:
        print(f"error: the first step differs from numpy's by {err:.2g} (relative)", flush=True)
        return
    t0 = time.perf_counter()
    for _ in range(10):
        await train_step(bx, by)
    print(f"ready {(time.perf_counter() - t0) / 10 * 1e3:.3f}", flush=True)   # ms per step
    core = strategy._server._core   # this task's server (TF gives no handle on it)

    async def window(steps: float) -> dict[str, Any]:
        for _ in range(WARMUP_STEPS):
            await train_step(bx, by)
        core.worker.reset_stats()
        core.master.reset_stats()
        t0 = time.perf_counter()
        for _ in range(int(steps)):
            await train_step(bx, by)
        elapsed = time.perf_counter() - t0
        return {"steps": int(steps), "seconds": elapsed, "master": core.master.stats(),
                "worker": core.worker.stats()}

    await _serve_commands(window, greet=False)


class MwmsCluster:
    """Two MWMS workers (this file, ``--mwms``); a window is a number of steps
    that both run (from the last window's ms per step), about ``seconds`` long."""

    def __init__(self) -> None:
        self.spec = {"worker": [f"localhost:{p}" for p in free_ports(2)]}
        self.children: list[Child] = []

    def __enter__(self) -> MwmsCluster:
        try:
            for task in (0, 1):
                self.children.append(Child(
                    [os.path.abspath(__file__), "--mwms", str(task),
                     "--spec", json.dumps(self.spec)], ready="ready", wait=False))
            for child in self.children:
                child.expect_ready(120)
        except BaseException:
            self.__exit__()
            raise
        self.ms_per_step = max(float(c.hello.split()[1]) for c in self.children)
        return self

    def __exit__(self, *exc: Any) -> None:
        for child in reversed(self.children):
            child.stop()

    def window(self, seconds: float) -> dict[str, Any]:
        steps = max(WARMUP_STEPS, round(seconds * 1e3 / self.ms_per_step))
        for c in self.children:
            c.command(f"go {steps}")
        results = [json.loads(c.readline(3 * seconds + 60)) for c in self.children]
        master = {k: sum(r["master"][k] for r in results) for k in results[0]["master"]}
        out = step_costs(2 * steps, statistics.mean(r["seconds"] for r in results), master,
                         [r["worker"] for r in results])
        out["examples_per_s"] = sum(r["steps"] * BATCH / r["seconds"] for r in results)
        out["ms_per_step"] = self.ms_per_step = statistics.mean(
            r["seconds"] / r["steps"] for r in results) * 1e3
        out["outside_ms_per_step"] = out["ms_per_step"] - out["kernel_ms_per_step"]
        for key in ("messages_per_step", "tensors_per_step", "tensor_MB_per_step"):
            del out[key]
        return out


# -- the ParameterServerStrategy coordinator -----------------------------------------

PSS_INFLIGHT = 3   # closures per worker kept scheduled (one running, the rest queued)


async def pss_main(spec: dict[str, list[str]], closures_per_worker: int = 1) -> None:
    """The coordinator (``--pss``), the chief of a cluster of 1 ps and 2 bare
    worker servers: a ``ParameterServerStrategy`` from TF_CONFIG (task
    chief:0, whose server the strategy starts in this process) and a
    ``ClusterCoordinator`` that schedules a ``@dt.function`` step on whichever
    worker is free. Each worker's batch comes from its own per-worker dataset
    (``synthetic_batch(worker)``, as ps1-w2's replica ``worker`` feeds). Says
    ``ready`` once one step matched numpy's on one worker's batch; ``go
    SECONDS`` keeps ``PSS_INFLIGHT`` closures per worker scheduled for that
    long, then joins, and prints one JSON line."""
    os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "chief",
                                                                     "index": 0}})
    resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = dt.distribute.ParameterServerStrategy(resolver)
    coordinator = dt.distribute.coordinator.ClusterCoordinator(
        strategy, closures_per_worker=closures_per_worker)
    start = initial_params()
    with strategy.scope():
        params = [dt.Variable(v, name=f"{'wb'[i % 2]}{i // 2}") for i, v in enumerate(start)]
        optimizer = dt.train.GradientDescentOptimizer(LR)

    def dataset_fn(context: Any) -> Any:
        return dt.data.Dataset.from_tensors(synthetic_batch(context.input_pipeline_id)).repeat()

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @dt.function
    def train_step(iterator: Any) -> Any:
        def replica_fn(inputs: Any) -> Any:
            x, y = inputs
            with dt.GradientTape() as tape:
                h = x
                for i in range(0, len(params), 2):
                    h = dt.matmul(h, params[i]) + params[i + 1]
                    if i + 2 < len(params):
                        h = dt.nn.relu(h)
                loss = dt.reduce_mean(dt.nn.softmax_cross_entropy_with_logits(labels=y,
                                                                              logits=h))
            optimizer.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss
        return strategy.run(replica_fn, args=(next(iterator),))

    @dt.function
    def read_params() -> Any:
        return [p.read_value() for p in params]

    core = strategy._server._core   # the chief's server (TF gives no handle on it)
    system = await ActorSystem(client_name(), listen=False).start()
    remote = [system.ref(spec[job][0 if job == "ps" else i], "worker")
              for job, i in (("ps", 0), ("worker", 0), ("worker", 1))]
    try:
        # one step (on whichever worker takes it) must be numpy's one step on that
        # worker's batch
        await coordinator.schedule(train_step, args=(iterator,)).fetch()
        with strategy.scope():
            got = await read_params()
        errs = []
        for task in (0, 1):
            ref = NumpyPlain(*synthetic_batch(task))
            ref.step()
            errs.append(max(float(np.abs((g - s) - (r - s)).max() / np.abs(r - s).max())
                            for g, r, s in zip(got, ref.p, start)))
        if not min(errs) < 1e-3:
            print(f"error: the first step differs from numpy's by {min(errs):.2g} (relative)",
                  flush=True)
            return
        for _ in range(WARMUP_STEPS * 2):   # both workers trace their step
            coordinator.schedule(train_step, args=(iterator,))
        await coordinator.join()
        print("ready", flush=True)

        async def window(seconds: float) -> dict[str, Any]:
            workers = coordinator.num_workers
            for _ in range(WARMUP_STEPS * workers):
                coordinator.schedule(train_step, args=(iterator,))
            await coordinator.join()
            core.worker.reset_stats()
            core.master.reset_stats()
            for r in remote:
                await r.call("reset_stats")
            t0 = time.perf_counter()
            pending: collections.deque = collections.deque()
            steps = 0
            while time.perf_counter() - t0 < seconds:
                while len(pending) < PSS_INFLIGHT * workers:
                    pending.append(coordinator.schedule(train_step, args=(iterator,)))
                    steps += 1
                await pending.popleft().fetch()
            await coordinator.join()
            elapsed = time.perf_counter() - t0
            return {"steps": steps, "seconds": elapsed, "master": core.master.stats(),
                    "chief": core.worker.stats(),
                    "remote": [await r.call("stats") for r in remote]}

        await _serve_commands(window, greet=False)
    finally:
        await coordinator.shutdown()
        await system.shutdown()
        await def_function.close_sessions()
        strategy._server.stop()


class PssCluster:
    """``psstrategy-w2`` (``-overlap``: ``closures_per_worker=2``): one ps and two
    workers (bare ``python -m distrib.server`` processes) and the coordinator
    (this file, ``--pss N``, N closures per worker), the cluster's chief."""

    def __init__(self, closures_per_worker: int = 1) -> None:
        self.closures_per_worker = closures_per_worker
        ports = free_ports(4)
        self.spec = {"chief": [f"localhost:{ports[0]}"], "ps": [f"localhost:{ports[1]}"],
                     "worker": [f"localhost:{ports[2]}", f"localhost:{ports[3]}"]}
        self.children: list[Child] = []
        self.tmp = tempfile.TemporaryDirectory(prefix="distrib-bench-")

    def __enter__(self) -> PssCluster:
        try:
            cfg = os.path.join(self.tmp.name, "cluster.json")
            with open(cfg, "w") as f:
                json.dump(self.spec, f)
            for job, task in (("ps", 0), ("worker", 0), ("worker", 1)):
                self.children.append(Child(
                    ["-m", "distrib.server", "--cluster", cfg, "--job_name", job,
                     "--task_index", str(task), "--log_level", "WARNING"], ready="serving"))
            self.children.append(Child([os.path.abspath(__file__), "--pss",
                                        str(self.closures_per_worker),
                                        "--spec", json.dumps(self.spec)], ready="ready",
                                       wait=False))
            self.children[-1].expect_ready(120)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            for child in reversed(self.children):   # the coordinator first
                child.stop()
        finally:
            self.tmp.cleanup()

    def window(self, seconds: float) -> dict[str, Any]:
        chief = self.children[-1]
        chief.command(f"go {seconds}")
        r = json.loads(chief.readline(seconds + 120))
        steps, elapsed = r["steps"], r["seconds"]
        workers = len(self.spec["worker"])
        ps, *remote_workers = r["remote"]
        # as ps1-w2: per step of one worker, every process's counters over all steps
        out = step_costs(steps, elapsed / workers, r["master"],
                         [r["chief"], *remote_workers, ps])
        out["examples_per_s"] = steps * BATCH / elapsed
        out["ms_per_step"] = elapsed / (steps / workers) * 1e3
        out["outside_ms_per_step"] = out["ms_per_step"] - out["kernel_ms_per_step"]
        out["ps_cpu_ms_per_step"] = ps["process_cpu_s"] / steps * 1e3
        out["coordinator_cpu_ms_per_step"] = r["chief"]["process_cpu_s"] / steps * 1e3
        # kernels that ran in the chief's own server, not on a worker (the step's
        # ops should all be on its worker and the ps)
        out["chief_kernel_ms_per_step"] = r["chief"]["kernel_busy_s"] / steps * 1e3
        return out


# -- Keras fit in one process --------------------------------------------------------

async def keras_main() -> None:
    """``keras-local`` (``--keras``): the bench model as a ``dt.keras`` Sequential
    trained by ``model.fit`` (no strategy: this process's local server), on
    ``synthetic_batch(0)`` with integer labels repeated. Starts from the same
    weights as the other rows (``set_weights``) and checks its first step
    against numpy's; ``go SECONDS`` runs one ``fit`` of about that many seconds
    of steps (from the last window's ms per step) after a few untimed steps."""
    from distrib.distribute.functions.local_target import local_server
    keras = dt.keras
    model = keras.Sequential([keras.layers.Dense(SIZES[1], activation="relu",
                                                 input_shape=(SIZES[0],)),
                              keras.layers.Dense(SIZES[2], activation="relu"),
                              keras.layers.Dense(SIZES[3])])
    model.compile(optimizer=keras.optimizers.SGD(LR),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = synthetic_batch(0)
    dataset = dt.data.Dataset.from_tensors((x, y.argmax(1).astype(np.int64))).repeat()
    start = initial_params()
    await model.set_weights(start)
    await model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0)   # traces the step
    ref = NumpyPlain(x, y)
    ref.step()
    got = await model.get_weights()
    err = max(float(np.abs((g - s) - (r - s)).max() / np.abs(r - s).max())
              for g, r, s in zip(got, ref.p, start))
    if not err < 1e-3:
        print(f"error: the first step differs from numpy's by {err:.2g} (relative)", flush=True)
        return
    t0 = time.perf_counter()
    await model.fit(dataset, epochs=1, steps_per_epoch=10, verbose=0)
    ms_per_step = (time.perf_counter() - t0) / 10 * 1e3
    core = local_server()._core
    print("ready", flush=True)

    async def window(seconds: float) -> dict[str, Any]:
        nonlocal ms_per_step
        await model.fit(dataset, epochs=1, steps_per_epoch=WARMUP_STEPS, verbose=0)
        steps = max(WARMUP_STEPS, round(seconds * 1e3 / ms_per_step))
        core.worker.reset_stats()
        core.master.reset_stats()
        t0 = time.perf_counter()
        await model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
        elapsed = time.perf_counter() - t0
        ms_per_step = elapsed / steps * 1e3
        return step_costs(steps, elapsed, core.master.stats(), [core.worker.stats()])

    await _serve_commands(window, greet=False)


# -- the run -------------------------------------------------------------------------

def numpy_main(kind: str, seconds: float) -> None:
    """A numpy loop alone in its process (``--numpy KIND``): prints one JSON line."""
    runner = (NumpyPlain if kind == "plain" else NumpyPrealloc)(*synthetic_batch(0))
    for _ in range(WARMUP_STEPS):
        runner.step()
    steps, elapsed = timed_window(runner.step, seconds)
    print(json.dumps({"examples_per_s": steps * BATCH / elapsed,
                      "ms_per_step": elapsed / steps * 1e3}), flush=True)


def numpy_window(kind: str, seconds: float) -> dict[str, Any]:
    """Each numpy loop runs in a fresh process of its own, as a user's script
    would. Measured in this process instead, the plain loop ran ~35% slower
    whenever other big arrays were alive (glibc's heap then returns and
    re-faults the temporaries' pages every step), which flattered every
    ratio against it."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--numpy", kind,
                          "--seconds", str(seconds)], capture_output=True, text=True,
                         timeout=seconds + 120, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def numpy_pair_window(seconds: float) -> dict[str, Any]:
    """Two numpy-plain processes at once; examples/s summed."""
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--numpy", "plain",
                               "--seconds", str(seconds)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT) for _ in range(2)]
    try:
        results = [json.loads(p.communicate(timeout=seconds + 120)[0].strip().splitlines()[-1])
                   for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    return {"examples_per_s": sum(r["examples_per_s"] for r in results),
            "ms_per_step": statistics.mean(r["ms_per_step"] for r in results)}


async def local_main() -> None:
    """``local-1proc`` in a process of its own (``--local``), as a user's script
    would run it, and as the numpy loops and the cluster's tasks run: measured
    inside this bench's process it paid for the bench's own heap. Commands on
    stdin: ``go SECONDS`` (one JSON line back) and ``quit``."""
    async with LocalTrainer() as local:
        await _serve_commands(local.window)


def measure(rounds: int, seconds: float) -> dict[str, list[dict[str, Any]]]:
    samples: dict[str, list[dict[str, Any]]] = {}

    def add(name: str, result: dict[str, Any]) -> None:
        samples.setdefault(name, []).append(result)

    with PsCluster() as cluster, MwmsCluster() as mwms, PssCluster() as pss, \
            PssCluster(closures_per_worker=2) as pss_overlap:
        local = Child([os.path.abspath(__file__), "--local"], ready="ready")
        keras = None
        try:
            keras = Child([os.path.abspath(__file__), "--keras"], ready="ready", wait=False)
            keras.expect_ready(120)
            for _ in range(rounds):
                add("numpy-plain", numpy_window("plain", seconds))
                add("numpy-prealloc", numpy_window("prealloc", seconds))
                add("numpy-2proc", numpy_pair_window(seconds))
                local.command(f"go {seconds}")
                add("local-1proc", json.loads(local.readline(seconds + 60)))
                local.command(f"go {seconds} summaries")
                add("local-summaries", json.loads(local.readline(seconds + 60)))
                add("ps1-w1", cluster.window(1, seconds))
                add("ps1-w2", cluster.window(2, seconds))
                add("ps1-w2-traced", cluster.window(2, seconds, "traced"))
                add("mwms-w2", mwms.window(seconds))
                add("psstrategy-w2", pss.window(seconds))
                add("psstrategy-w2-overlap", pss_overlap.window(seconds))
                keras.command(f"go {seconds}")
                add("keras-local", json.loads(keras.readline(3 * seconds + 60)))
        finally:
            if keras is not None:
                keras.stop()
            local.stop()
    return samples


def summarize(samples: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Median of each measure over rounds; the ratio is the median of each
    round's ratio to that round's numpy-plain."""
    base = [s["examples_per_s"] for s in samples["numpy-plain"]]
    rows = []
    for name, runs in samples.items():
        row: dict[str, Any] = {"name": name}
        for key in runs[0]:
            row[key] = statistics.median(r[key] for r in runs)
        row["ratio"] = statistics.median(r["examples_per_s"] / b for r, b in zip(runs, base))
        row["rounds"] = len(runs)
        if name in TARGETS:
            row["target"] = TARGETS[name]
        if name in VERSUS:   # the target's baseline: another row of the same round
            other = [s["examples_per_s"] for s in samples[VERSUS[name]]]
            row["versus"] = VERSUS[name]
            row["ratio_versus"] = statistics.median(r["examples_per_s"] / o
                                                    for r, o in zip(runs, other))
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'config':<15} {'examples/s':>10} {'vs plain':>9} {'target':>8} {'ms/step':>8} "
          f"{'kernel ms':>9} {'outside':>8} {'cpu ms':>7} {'msgs/step':>9} {'tensor MB':>9} "
          f"{'feed MB':>8}  vs row")
    for r in rows:
        def col(key: str, fmt: str, width: int) -> str:
            return format(r[key], fmt).rjust(width) if key in r else "".rjust(width)
        print(f"{r['name']:<15} {r['examples_per_s']:>10.0f} {r['ratio']:>8.2f}x "
              f"{r.get('target', ''):>8} {col('ms_per_step', '.2f', 8)} "
              f"{col('kernel_ms_per_step', '.2f', 9)} {col('outside_ms_per_step', '.2f', 8)} "
              f"{col('cpu_ms_per_step', '.2f', 7)} "
              f"{col('messages_per_step', '.1f', 9)} "
              f"{col('tensor_MB_per_step', '.2f', 9)} {col('feed_MB_per_step', '.2f', 8)}"
              + (f"  {r['ratio_versus']:.2f}x {r['versus']}" if "versus" in r else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--quick", action="store_true", help="2 short rounds (under a minute)")
    ap.add_argument("--rounds", type=int, help="rounds of all configurations (default 5)")
    ap.add_argument("--seconds", type=float, help="seconds per configuration and round")
    ap.add_argument("--replica", type=int, help=argparse.SUPPRESS)   # internal: a worker task
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--numpy", choices=["plain", "prealloc"], help=argparse.SUPPRESS)
    ap.add_argument("--local", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mwms", type=int, help=argparse.SUPPRESS)     # internal: an MWMS worker
    ap.add_argument("--pss", type=int, help=argparse.SUPPRESS)   # the coordinator: closures
    # per worker
    ap.add_argument("--keras", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.numpy:
        numpy_main(args.numpy, args.seconds or 3.0)
        return
    import uvloop
    if args.replica is not None:
        uvloop.run(replica_main(json.loads(args.spec), args.replica))
        return
    if args.local:
        uvloop.run(local_main())
        return
    if args.mwms is not None:
        uvloop.run(mwms_main(json.loads(args.spec), args.mwms))
        return
    if args.pss is not None:
        uvloop.run(pss_main(json.loads(args.spec), args.pss))
        return
    if args.keras:
        uvloop.run(keras_main())
        return
    rounds = args.rounds or (2 if args.quick else 5)
    seconds = args.seconds or (1.0 if args.quick else 2.0)
    rows = summarize(measure(rounds, seconds))
    print(f"784-512-512-10 MLP, batch {BATCH} per worker, SGD lr {LR}; one fixed synthetic "
          "batch fed each step (feed_dict)")
    print("every process: OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1 (one BLAS "
          "thread); distrib runs two independent heavy kernels of a step at once only while a "
          "core is idle (DISTRIB_INTER_OP_THREADS="
          f"{os.environ.get('DISTRIB_INTER_OP_THREADS') or os.cpu_count()}), and polls "
          "instead of sleeping on a short wait for another task while a core is idle; "
          f"{os.cpu_count()} cores; {rounds} rounds x {seconds:g} s, medians")
    print_table(rows)
    print("kernel ms: time per step in which some kernel ran (worker, plus the ps's share); "
          "outside: ms/step minus kernel ms (scheduling, messages, waiting for the other task); "
          "cpu ms: CPU time of every process of the configuration per step (a step of "
          "ps1-w2 is one worker's step, so both workers' CPU over both workers' steps); "
          "vs row: ratio to the row a target names, median over rounds of the same "
          "round's ratio; "
          "msgs: messages between tasks (tensors for one task travel together when they are "
          "ready together) + 2 per remote partition call; "
          "tensor MB: bytes of those tensors; per step of one worker (ps1-w2, mwms-w2: each "
          "worker's; mwms-w2's all-reduce is not counted: blank); "
          "--json rows of the ps configurations also give ps_cpu_ms_per_step, the ps's share "
          "of cpu ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
