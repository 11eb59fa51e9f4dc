"""The launcher's agent: one process per task, watched, restarted on a budget,
stopped in order.

torchrun's shape (a small agent object under a thin CLI), with one departure:
only the task that failed is restarted. A distrib cluster rides through the
loss of one task (a restarted worker rejoins, a restarted ps is restored from
the last checkpoint by the chief), so restarting the others would only throw
away their work.

The rules it keeps, and why:

- **Stop by pid, never leave one behind.** A task's process group, signals
  and death with the launcher: :mod:`distrib.launch.process`.
- **Workers first.** A terminal's Ctrl-C reaches only the launcher (the tasks
  are in other process groups), which sends SIGTERM to the ``chief``/``worker``
  tasks, waits for them (bounded by ``stop_timeout_s``), and only then stops
  the rest: the chief's final checkpoint save still finds its ps.
- **Training over means the ps are told, not killed.** When every launched
  ``chief``/``worker`` task exited 0, each ps still running gets
  ``request_stop`` (its server's ``join()`` returns and it exits 0); what is
  left after ``ps_grace_s`` is terminated. A launch with no ``chief``/
  ``worker`` task (one ps per launcher under a scheduler) runs until its
  tasks exit 0 by themselves: its chief, elsewhere, tells them.
- **A preemption is not a failure.** A task that exits 42
  (``RESTART_EXIT_CODE``, TF's: a ``PreemptionCheckpointHandler`` saved at
  the step every worker agreed on, then exited to be restarted) is restarted
  after ``restart_backoff_s``, never doubled and never counted against
  ``max_restarts``: the platform's doing, not the program's (Borg and
  Kubernetes' pod-failure policy do not count a disruption either). The
  wait lets every worker of the save exit before one comes back. Past
  ``MAX_PREEMPTIONS`` such restarts of one task, an exit 42 counts as a
  failure: a task that always exits 42 is crash-looping, not preempted.
- **An elastic launch shrinks instead.** With ``--workers MIN:MAX``, a
  worker that dies any other way while more than MIN workers are live is
  not restarted: ``Elastic.lost`` takes it out of the membership at once
  (the job goes on smaller) and its state is ``left``. At MIN, a task of
  another job, or the worker that serves the membership (no ps job), it is
  restarted in place as above; the launcher's line says which and why.
  Every restart in place of a chief/worker task there (a preemption's too)
  first publishes a membership version counting it a new generation
  (``Elastic.restarted``): a fresh process under an old name. Every task
  of an elastic launch gets ``DISTRIB_ELASTIC=1``.
- **Output as it comes.** Every line a task writes (stdout to stdout, stderr
  to stderr) is printed at once, prefixed ``[job:index] ``; children get
  ``PYTHONUNBUFFERED=1`` so a Python task's lines are not held in its buffer
  (each task keeps its last lines: :class:`~distrib.launch.process.TaskProcess`).
"""
from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from distrib.cluster import ClusterSpec
from distrib.cluster.exit_codes import RESTART_EXIT_CODE
from distrib.launch.elastic import Elastic
from distrib.launch.process import (
    BACKOFF,
    DONE,
    FAILED,
    LEFT,
    PENDING,
    RUNNING,
    STOPPED,
    TaskProcess,
    describe_exit,
    pdeathsig_setup,
    write_line,
)
from distrib.launch.tasks import TRAINING_JOBS, gpu_slice, task_argv, tf_config
from distrib.server import request_stop
from distrib.settings import ELASTIC

__all__ = ["LaunchConfig", "LaunchResult", "Launcher", "TaskProcess"]

# the folder that holds the distrib package: a bare server task needs it on its path
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])
_READ_CHUNK = 64 * 1024
_PUMP_DRAIN_S = 2.0      # after a task exits, how long its pipes may still deliver
_KILL_WAIT_S = 5.0       # after SIGKILL: the kernel needs no longer
# Uncounted restarts after exit 42 a task may have: past that, a task that keeps
# exiting 42 (a program using the code for something else, a termination
# signal that outlives the restart) is crash-looping, and each further exit
# 42 counts against --max_restarts like any failure.
MAX_PREEMPTIONS = 100


@dataclass(frozen=True)
class LaunchConfig:
    """The launcher's knobs; each is a CLI flag with a DISTRIB_LAUNCH_* twin."""

    max_restarts: int = 3            # per task
    restart_backoff_s: float = 1.0   # before restart n (from 0): backoff * 2**n
    max_backoff_s: float = 60.0      # the longest wait before a restart
    ps_grace_s: float = 5.0          # after request_stop, before SIGTERM
    stop_timeout_s: float = 30.0     # after SIGTERM, before SIGKILL
    tail_lines: int = 20
    threads_per_task: int = 0        # BLAS/OpenMP threads; 0: the cores shared out
    gpus_per_task: int = 0           # each task's CUDA_VISIBLE_DEVICES slice; 0: as it is
    logdir: str | None = None        # also write each task's output to DIR/J-I.log


@dataclass(frozen=True)
class LaunchResult:
    """How a launch ended: the exit code, and for a failure the message to show."""

    exit_code: int
    message: str | None = None


class Launcher:
    """Start the given tasks of ``cluster`` on this host, watch them, restart a
    failed one up to ``max_restarts`` times, and stop them all in order.

    ``command`` is the program each task runs with its ``TF_CONFIG``; without
    one, each task runs ``python -m distrib.server``. ``await run()`` returns a
    :class:`LaunchResult`: 0 when training is over, 1 when a task failed past
    its restarts, 128 + the signal when SIGINT or SIGTERM stopped the launch.
    """

    def __init__(self, cluster: ClusterSpec, tasks: Sequence[tuple[str, int]],
                 command: Sequence[str] | None = None, config: LaunchConfig = LaunchConfig(),
                 *, env: dict[str, str] | None = None, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None,
                 elastic_workers: tuple[int, int] | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self._out = stdout or sys.stdout
        self._err = stderr or sys.stderr
        self._argv = list(command) if command else [sys.executable, "-m", "distrib.server"]
        self._base_env = dict(os.environ if env is None else env)
        self._bare = not command
        self._threads = config.threads_per_task or max(1, (os.cpu_count() or 1) // max(1, len(tasks)))
        for job, i in tasks if config.gpus_per_task else ():   # too few GPUs: refused now
            gpu_slice(cluster, job, i, config.gpus_per_task, self._base_env.get("CUDA_VISIBLE_DEVICES"))
        if elastic_workers is not None:   # every task knows: a lone worker still campaigns
            self._base_env[ELASTIC.name] = "1"
        self.tasks = [self._new_task(job, i) for job, i in tasks]
        self._watchers: list[asyncio.Task[None]] = []
        # --workers MIN:MAX: the membership, the control socket, scale (launch/elastic.py)
        self.elastic: Elastic | None = None
        if elastic_workers is not None:
            if not config.logdir:
                raise ValueError("--workers MIN:MAX needs --logdir (its control socket lives there)")
            self.elastic = Elastic(self, *elastic_workers, config.logdir)
        self._wake = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._stopping = False
        self._signal: int | None = None
        self._preexec = pdeathsig_setup()

    def _new_task(self, job: str, i: int) -> TaskProcess:
        logdir = self.config.logdir
        return TaskProcess(job, i, task_argv(self._argv, self.cluster, job, i),
                           self._task_env(self._base_env, job, i, self._bare, self._threads),
                           self.config.tail_lines,
                           os.path.join(logdir, f"{job}-{i}.log") if logdir else None)

    def new_task(self, job: str, index: int) -> TaskProcess:
        """Task ``index`` of ``job`` of ``self.cluster``, not started (a
        ValueError where its environment cannot be made, e.g. too few GPUs)."""
        return self._new_task(job, index)

    def add_task(self, t: TaskProcess) -> None:
        """Start ``t`` (from :meth:`new_task`) now, while the launch runs (an
        elastic scale-up), watched like the others."""
        self.tasks.append(t)
        self._watchers.append(asyncio.create_task(self._watch(t)))

    def leave_task(self, job: str, index: int) -> None:
        """Task ``index`` of ``job`` leaves (an elastic scale-down): it stops by
        itself after its current step; its exit is not a failure and is not
        restarted; still running after ``stop_timeout_s``, it is terminated as
        a stop terminates a task (SIGTERM, then SIGKILL ``stop_timeout_s`` later)."""
        for t in self.tasks:
            if (t.job, t.index) == (job, index) and not t.leaving:
                t.leaving = True
                t.leave_deadline = asyncio.create_task(self._end_leave(t))
                if not t.running:   # in backoff, or not started yet: it just goes
                    self._wake.set()

    async def _end_leave(self, t: TaskProcess) -> None:
        """A leaving task still running ``stop_timeout_s`` after its leave:
        SIGTERM, and SIGKILL if it outlasts another ``stop_timeout_s`` (a
        task that handles SIGTERM and hangs). Cancelled once it exits."""
        await asyncio.sleep(self.config.stop_timeout_s)
        if not t.running:
            return
        self.say(f"{t.name} did not leave within {self.config.stop_timeout_s:g} s: "
                 "terminating it", t)
        t.send(signal.SIGTERM)
        await self._wait_exit([t], self.config.stop_timeout_s)
        if t.running:
            self.say(f"{t.name} did not stop within {self.config.stop_timeout_s:g} s: "
                     "killing it", t)
            t.send(signal.SIGKILL)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _task_env(self, base: dict[str, str], job: str, index: int, bare: bool,
                  threads: int) -> dict[str, str]:
        env = dict(base, TF_CONFIG=tf_config(self.cluster, job, index))
        env.setdefault("PYTHONUNBUFFERED", "1")
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(name, str(threads))
        if self.config.gpus_per_task:
            env["CUDA_VISIBLE_DEVICES"] = gpu_slice(self.cluster, job, index,
                                                    self.config.gpus_per_task,
                                                    base.get("CUDA_VISIBLE_DEVICES"))
        if bare:
            path = env.get("PYTHONPATH")
            env["PYTHONPATH"] = _SOURCE_ROOT + (os.pathsep + path if path else "")
        return env

    # -- the run ------------------------------------------------------------

    async def run(self) -> LaunchResult:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        watchers = self._watchers
        try:
            if self.elastic is not None:
                try:
                    await self.elastic.open()
                except OSError as e:
                    return LaunchResult(2, str(e))
                self.say(f"elastic: {self.elastic.min} to {self.elastic.max} workers; "
                         f"scale with: python -m distrib.launch scale --logdir "
                         f"{self.config.logdir} --workers N")
            self.say(f"cluster {self.cluster.to_json()}; starting "
                     + ", ".join(t.name for t in self.tasks))
            watchers.extend(asyncio.create_task(self._watch(t)) for t in self.tasks)
            outcome = await self._until_outcome()
            if isinstance(outcome, TaskProcess):
                self.say(f"{outcome.name} failed past its restarts: stopping the cluster")
                await self._stop_all()
                result = LaunchResult(1, self._failure_message(outcome))
            elif outcome == "signal":
                await self._stop_all()
                result = LaunchResult(128 + (self._signal or signal.SIGTERM))
            else:
                await self._release_rest()
                result = LaunchResult(0)
            await asyncio.wait(list(watchers), timeout=_PUMP_DRAIN_S + 1)
            if self._signal is not None:
                result = LaunchResult(128 + self._signal, result.message)
            return result
        finally:
            self._begin_stop()
            for t in self.tasks:        # an error or cancellation above: leave nothing behind
                t.send(signal.SIGKILL)
                if t.leave_deadline is not None:
                    t.leave_deadline.cancel()
            for w in watchers:
                w.cancel()
            if self.elastic is not None:
                await self.elastic.close()
            for t in self.tasks:
                t.close()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    async def _until_outcome(self) -> TaskProcess | str:
        # No chief/worker task here (a launcher of one ps task, under srun):
        # not "training is over" at once, but over when these tasks end by
        # themselves (a ps when its chief tells it to stop), or at a signal.
        while True:
            # tasks an elastic scale-up added count from then on, those that left no more
            training = [t for t in self.tasks if t.job in TRAINING_JOBS and t.state != LEFT] \
                or [t for t in self.tasks if t.state != LEFT]
            if self._signal is not None:
                return "signal"
            failed = next((t for t in self.tasks if t.state == FAILED), None)
            if failed is not None:
                return failed
            if all(t.state == DONE for t in training):
                return "done"
            await self._wake.wait()
            self._wake.clear()

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self._signal is None and not self._stopping:
            self._signal = sig
            self.say(f"{name}: stopping the workers, then the rest (again to kill at once)")
            self._wake.set()
            return
        self._signal = self._signal or sig
        self.say(f"{name} while stopping: killing every task now")
        for t in self.tasks:
            t.send(signal.SIGKILL)

    # -- one task -----------------------------------------------------------

    async def _watch(self, t: TaskProcess) -> None:
        while not self._stopping and not t.leaving:
            returncode = await self._run_once(t)
            t.returncode = returncode
            if self._stopping:
                t.state = DONE if returncode == 0 else STOPPED
                self.say(f"{t.name} stopped ({describe_exit(returncode)})", t)
                break
            if t.leaving:   # an elastic scale-down: neither a failure nor restarted
                t.state = LEFT
                self.say(f"{t.name} left the cluster ({describe_exit(returncode)})", t)
                break
            if returncode == 0:
                t.state = DONE
                self.say(f"{t.name} finished (exit code 0)", t)
                break
            if returncode == RESTART_EXIT_CODE and t.preemptions < MAX_PREEMPTIONS:
                # preempted, its progress saved: not a failure
                t.preemptions += 1
                t.state = BACKOFF
                delay = min(self.config.restart_backoff_s, self.config.max_backoff_s)
                t.tail.append(f"[launch] {t.name} exit code {returncode}: preempted, restarted")
                generation = await self._new_generation(t)
                self.say(f"{t.name} exit code {returncode} (preempted, its checkpoint saved); "
                         f"restarting it in {delay:g} s, not counted against --max_restarts "
                         f"(preemption {t.preemptions}){generation}", t)
                await self._backoff(delay)
                continue
            in_place = ""
            if self.elastic is not None:   # a lost worker may shrink the job instead
                why = await self.elastic.lost(t.job, t.index)
                if why is None:
                    t.state = LEFT
                    t.tail.append(f"[launch] {t.name} {describe_exit(returncode)}: removed")
                    self.say(f"{t.name} {describe_exit(returncode)}; removed from the cluster, "
                             f"not restarted: more than MIN {self.elastic.min} workers were live "
                             f"(membership version {self.elastic.version}, "
                             f"{len(self.elastic.workers())} workers)", t)
                    break
                in_place = f" (in place, not removed: {why})"
            if t.restarts >= self.config.max_restarts:
                t.state = FAILED
                self.say(f"{t.name} {describe_exit(returncode)}; no restarts left "
                         f"({self.config.max_restarts} allowed){in_place}", t)
                break
            delay = min(self.config.restart_backoff_s * 2 ** t.restarts, self.config.max_backoff_s)
            t.restarts += 1
            t.state = BACKOFF
            t.tail.append(f"[launch] {t.name} {describe_exit(returncode)}: restart {t.restarts}")
            generation = await self._new_generation(t)
            self.say(f"{t.name} {describe_exit(returncode)}; restart {t.restarts} of "
                     f"{self.config.max_restarts} in {delay:g} s{in_place}{generation}", t)
            await self._backoff(delay)
        if t.state in (PENDING, BACKOFF):
            t.state = LEFT if t.leaving else STOPPED
        if t.leave_deadline is not None:   # it is gone: nothing left to terminate
            t.leave_deadline.cancel()
        self._wake.set()

    async def _new_generation(self, t: TaskProcess) -> str:
        """An elastic launch's restart in place of a training task: a new
        membership version counting ``t`` a new generation, published before
        its new process starts (``Elastic.restarted``); the words the
        launcher's line adds ("" when nothing was published, or not elastic)."""
        if self.elastic is None:
            return ""
        version = await self.elastic.restarted(t.job, t.index)
        if version is None:
            return ""
        return (f"; membership version {version}, {t.name} generation "
                f"{self.elastic.generations.get(t.task, 0)}")

    async def _backoff(self, delay: float) -> None:
        """Wait ``delay`` seconds before a restart, or until the stop begins."""
        try:
            await asyncio.wait_for(self._stop_event.wait(), delay)
        except TimeoutError:
            pass

    async def _run_once(self, t: TaskProcess) -> int:
        try:
            t.proc = await asyncio.create_subprocess_exec(
                *t.argv, env=t.env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True, preexec_fn=self._preexec)
        except OSError as e:
            self._emit(t, f"cannot start {t.argv[0]!r}: {e}", err=True)
            return 127
        t.state = RUNNING
        self.say(f"{t.name} started (pid {t.proc.pid})", t)
        if self._stopping:   # the stop began while it was starting: no one else will
            t.send(signal.SIGTERM)
        assert t.proc.stdout is not None and t.proc.stderr is not None
        pumps = [asyncio.create_task(self._pump(t, t.proc.stdout, err=False)),
                 asyncio.create_task(self._pump(t, t.proc.stderr, err=True))]
        try:
            returncode = await t.proc.wait()
            # what the task left behind in its group (a shell's background job)
            t.signal_group(signal.SIGKILL)
            await asyncio.wait(pumps, timeout=_PUMP_DRAIN_S)
        finally:
            for p in pumps:
                p.cancel()
        return returncode

    async def _pump(self, t: TaskProcess, stream: asyncio.StreamReader, err: bool) -> None:
        pending = b""
        while chunk := await stream.read(_READ_CHUNK):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._emit(t, line.rstrip(b"\r").decode("utf-8", "replace"), err)
            if len(pending) >= _READ_CHUNK:   # a very long line: show it in pieces
                self._emit(t, pending.decode("utf-8", "replace"), err)
                pending = b""
        if pending:
            self._emit(t, pending.rstrip(b"\r").decode("utf-8", "replace"), err)

    def _emit(self, t: TaskProcess, text: str, err: bool) -> None:
        line = f"[{t.name}] {text}"
        t.tail.append(line)
        t.write_log(text)
        write_line(self._err if err else self._out, line)

    def say(self, message: str, task: TaskProcess | None = None) -> None:
        """A line of the launcher's own, on stderr (and in the task's log)."""
        write_line(self._err, f"[launch] {message}")
        if task is not None:
            task.write_log(f"[launch] {message}")

    # -- stopping -----------------------------------------------------------

    def _begin_stop(self) -> None:
        self._stopping = True
        self._stop_event.set()   # ends the backoff waits: no task starts again

    async def _stop_all(self) -> None:
        """Workers first (their SIGTERM lets the chief save to its ps), then the rest."""
        self._begin_stop()
        training = [t for t in self.tasks if t.job in TRAINING_JOBS]
        await self._terminate(training)
        await self._terminate([t for t in self.tasks if t not in training])

    async def _release_rest(self) -> None:
        """Training is over: ask each ps still running to stop, then terminate the rest."""
        self._begin_stop()
        rest = [t for t in self.tasks if t.running]
        if not rest:
            return
        ps = [t for t in rest if t.job == "ps"]
        if ps:
            self.say("training is over: telling " + ", ".join(t.name for t in ps) + " to stop")
        tells = [asyncio.create_task(self._tell_stop(t)) for t in ps]
        await self._wait_exit(rest, self.config.ps_grace_s)
        for tell in tells:
            tell.cancel()
        await asyncio.gather(*tells, return_exceptions=True)
        await self._terminate(rest)

    async def _tell_stop(self, t: TaskProcess) -> None:
        try:
            await request_stop(self.cluster.task_address(t.job, t.index),
                               timeout=self.config.ps_grace_s)
        except asyncio.CancelledError:
            raise
        except Exception as e:   # noqa: BLE001 - not a server, or gone: SIGTERM follows
            self.say(f"could not tell {t.name} to stop ({type(e).__name__}: {e})", t)

    async def _terminate(self, tasks: Sequence[TaskProcess]) -> None:
        running = [t for t in tasks if t.running]
        if not running:
            return
        self.say("stopping " + ", ".join(t.name for t in running))
        for t in running:
            t.send(signal.SIGTERM)
        await self._wait_exit(running, self.config.stop_timeout_s)
        left = [t for t in running if t.running]
        for t in left:
            self.say(f"{t.name} did not stop within {self.config.stop_timeout_s:g} s: "
                     "killing it", t)
            t.send(signal.SIGKILL)
        await self._wait_exit(left, _KILL_WAIT_S)

    async def _wait_exit(self, tasks: Sequence[TaskProcess], timeout: float) -> None:
        waits = [asyncio.ensure_future(t.proc.wait()) for t in tasks if t.running and t.proc]
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=timeout)
        for w in pending:
            w.cancel()

    def _failure_message(self, t: TaskProcess) -> str:
        ended = describe_exit(t.returncode) if t.returncode is not None else "did not run"
        lines = "\n".join("  " + line for line in t.tail) or "  (no output)"
        return (f"{t.task} ({t.name}) failed: {ended} after {t.restarts} restart(s); "
                f"the cluster was stopped. Its last lines:\n{lines}")
