"""Recovery from faults mid-training, and what failure detection costs: the
fault tests' four faults timed, and ps1-w2 throughput with heartbeats on and
off, measured in the same run.

Every run is ``python -m distrib.launch --ps 1 --workers W -- python
examples/trainer.py ...`` on loopback (the launcher picks free ports), its
output (the launcher's own lines on stderr, each task's lines prefixed
``[job:index]``) read line by line as it comes.

Fault rows (1 ps, 3 workers, ``DISTRIB_HEARTBEAT_S=1`` (the default),
``--save_model_secs 1``, ``--log_every 25``, batch 64): the cluster trains for
``LEAD_S`` seconds after its first progress line, then one fault, as in
tests/test_fault_launch.py:

- ``kill-nonchief``: SIGKILL to worker 2 (the launcher restarts it after 1 s);
- ``kill-chief``: SIGKILL to worker 0, the chief (restarted after 1 s; the
  role passes to another worker when the lease runs out);
- ``kill-ps``: SIGKILL to ps 0 (restarted after 1 s; the chief restores its
  variables from the newest checkpoint);
- ``stop-chief``: SIGSTOP to worker 0, SIGCONT ``STOP_HOLD_S`` (12 s, four
  leases, as the test) later.

The run is stopped (SIGTERM to the launcher) ``AFTER_S`` after the fault's
recovery point (below). Times come from the log lines: a trainer line's own
timestamp (``YYYY-MM-DD HH:MM:SS,mmm``, the same clock as this process's
``time.time()``, taken just before the signal is sent); a launcher line (no
timestamp) is stamped when it reaches this process.

Columns:

- ``detect_s``: the signal to the first line showing that someone noticed
  the failure, whichever comes first of: a worker's ``step failed ...
  waiting for the cluster to recover`` warning, a ``declared dead`` line of
  the failure detector, the launcher's ``J:I killed by SIGKILL`` line for its
  own child; ``by`` names which. Which one it is differs by fault, for a
  reason: a SIGKILLed task's sockets are reset by the kernel at once, so a
  peer that needed it fails its step at once (the ps: every worker's next
  step fails), while asynchronous training needs no worker but itself, so a
  killed worker's death shows first (and only) as the launcher's waitpid; a
  SIGSTOPped task's sockets stay open, the launcher sees nothing, and only
  the heartbeats find it: ``declared dead`` after three silent heartbeats.
- ``chief_s`` (chief faults): the signal to the ``became chief (term 2)``
  line of another worker. Target <= 7 s.
- ``restore_s`` (ps): the launcher's ``ps:0 started`` line of the restart to
  the chief's ``restored /job:ps/task:0 from ...model.ckpt-S`` line. Target
  <= 2 s. The JSON splits it: restart -> ``serving`` (process start-up),
  -> ``restarted (incarnation ...)`` (the chief's watch, every heartbeat),
  -> ``restored``; and gives ``kill_to_restart_s`` (the launcher's backoff).
- ``lost`` (ps): the highest global step logged (progress or checkpoint
  line) at or before the kill, minus S of the checkpoint restored: a lower
  bound, short by at most one ``--log_every`` (25 steps). Target: at most
  one checkpoint interval's steps, ``steps/s before`` x 1 s (``<=`` column).
- ``before``, ``during``, ``after``: global steps/s (x 64 = examples/s) over
  ``[fault - BEFORE_S, fault]``, ``[fault, recovered]``,
  ``[recovered, recovered + AFTER_S]`` (cut at the last line logged).
  ``recovered``: kill-nonchief: the restarted worker's first progress line;
  kill-chief: the later of that and ``became chief (term 2)``; kill-ps: the
  ``restored`` line; stop-chief: the stopped worker's first progress line
  after SIGCONT. ``rec_s``: fault -> recovered.
- ``dip``: the lowest rate over 1-second windows from the fault to
  ``recovered + AFTER_S``, divided by ``before``. Losing one of three
  workers costs a third by itself; 0 means a whole second without a step.

Global steps over time come from every worker's progress lines and the
chief's ``saved checkpoint ...model.ckpt-S`` lines (a running maximum: lines
of different workers interleave), restarted at S from the ``restored``
line's time (the global step goes back there, and no worker logs again until
it passes the step at which it logged last); a rate over a window
interpolates linearly between lines.

Preemption row (``preempt-mwms``): ``python -m distrib.launch --workers 2
-- python examples/preemption.py --epochs 8 --log_every 1`` (two workers of
MultiWorkerMirroredStrategy, each step through a
``PreemptionCheckpointHandler``); once worker 1 logged run
``PREEMPT_AT_RUN`` (mid-epoch), SIGTERM to it. Every worker saves at the
run they agree on and exits 42; the launcher restarts both (not counted as
failures); they restore and train on. Figures: ``run_at_sigterm`` (the
highest run logged by then), ``saved_at_run``, ``steps_after_notice`` (the
runs between: trained, then saved), ``steps_lost`` (runs logged before the
exit beyond the saved one: trained and thrown away; target 0-1, one step of
the slowest worker), ``notice_to_save_s`` (SIGTERM to the handler's saved
line), ``save_s`` (the save itself, its assign and read steps, the chief's
write and the barrier), ``sigterm_to_exit_s`` (to the launcher's ``exit code
42`` lines), ``exit_to_restart_s`` (the launcher's ``--restart_backoff``, 1
s), ``restart_to_resumed_s`` (process start, the cluster, the restore),
``sigterm_to_first_step_s`` (SIGTERM to the first ``run S+1 done``: what a
preemption costs in time), the agreement's mean time, how many runs apart
the agreements were and their share of the training time (``agree_share``:
each worker's agreements' time over its training time, after the restart;
an upper bound, as an agreement also waits for the slower worker), and
``exact``: both workers end with the global step of the last run and the
same sum of the examples' ids (nothing lost, nothing trained twice).

Elastic row (``scale-2-3-2``): ``python -m distrib.launch --ps 1 --workers
2:3 --logdir DIR`` running the trainer (as the fault rows, heartbeat 1 s);
``LEAD_S`` after the first progress line, ``python -m distrib.launch scale
--logdir DIR --workers 3`` (timed from just before the command starts, its
own Python start-up included); ``AFTER_S`` after the new worker's first step,
``scale ... --workers 2`` (worker 2 leaves after its current step). Figures:
``scale_cmd_s`` (the scale command's run, start-up included),
``scale_to_started_s`` (to the launcher's ``worker:2 started``),
``scale_to_first_step_s`` (to worker 2's first progress line: the trainer
logs its first step), ``shrink_to_left_s`` (the second command to the
launcher's ``worker:2 left the cluster``), and examples/s (global steps/s x
batch) ``ex_before`` (``BEFORE_S`` before the scale command), ``ex_during``
(the command to the new worker's first step), ``ex_after`` (``AFTER_S`` from
there, three workers) and ``ex_after_shrink`` (``AFTER_S`` after the leave).

Shrink row (``kill-9-shrink``): ``python -m distrib.launch --ps 1 --workers
1:3 --logdir DIR`` running the trainer (heartbeat 1 s, ``--log_every 1``: the
first step after an event is logged as it happens); worker 0 starts alone
(elected chief: an elastic launch's lone worker campaigns), ``scale ...
--workers 2`` once it logged its first step, and ``LEAD_S`` after worker 1's
first step SIGKILL to worker 0, the chief: with 2 live > MIN 1 the launcher
removes it (a new membership version, not a restart). Figures:
``kill_to_removed_s`` (to the launcher's ``worker:0 killed by SIGKILL;
removed from the cluster`` line: the new version is published by then),
``kill_to_learned_s`` (to worker 1's ``cluster membership version 3`` line),
``kill_to_first_step_s`` (to worker 1's first progress line at or after
that one: the shrunk group's first step), ``chief_s`` (to worker 1's
``became chief (term 2)``: the lease ran out, three heartbeats), and
examples/s ``ex_before`` (``BEFORE_S`` before the kill, two workers) and
``ex_after`` (``AFTER_S`` from the first step of the shrunk group, one).

Heartbeat row: ps1-w2 (1 ps, 2 workers, no fault, ``--train_steps N``, N =
12000, or 4000 with ``--quick``, ``--log_every 500``, the default
checkpoint interval) with ``DISTRIB_HEARTBEAT_S=1`` and with ``0`` (no
heartbeats; the Supervisor's election still runs, its lease then 3 s), in
alternating order, once each per round. A run's rate: global steps/s from its
first progress line at or past N/10 (start-up excluded) to its last one. The
ratio is the median of each round's on/off ratio. Target >= 0.98.

Each figure is the median over rounds (``--rounds``, default 3; ``--quick``:
1). Timings are never asserted: this only reports. ``--json PATH`` writes
the rows and every run's figures; ``--logs DIR`` keeps each run's output.
Every process started is stopped: the launcher by SIGTERM (it stops the
workers, then the ps), then SIGKILL to its process group; any task of it
still alive by SIGKILL to its own group (each task leads one); a stopped
task gets SIGCONT first. Each run's checkpoint folder is removed; /dev/shm is
compared before and after (distrib's shared memory is memfd, not /dev/shm).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BATCH = 64               # examples/trainer.py's default --batch_size
SAVE_SECS = 1.0          # --save_model_secs of the fault runs
LOG_EVERY = 25           # --log_every of the fault runs
HB_LOG_EVERY = 500       # --log_every of the heartbeat runs
LEAD_S = 7.0             # training after the first progress line, before the fault
BEFORE_S = 5.0           # the window before the fault
AFTER_S = 5.0            # the window after the recovery point
BIN_S = 1.0              # windows for the dip
STOP_HOLD_S = 12.0       # SIGSTOP to SIGCONT: four leases of 3 s (three heartbeats)
EVENT_LIMIT_S = 90.0     # the longest wait for a recovery event
RUN_LIMIT_S = 300.0      # the longest heartbeat run
STOP_WAIT_S = 45.0       # after SIGTERM to the launcher, before SIGKILL
PREEMPT = "preempt-mwms"
ELASTIC = "scale-2-3-2"
SHRINK = "kill-9-shrink"
FAULTS = ("kill-nonchief", "kill-chief", "kill-ps", "stop-chief", PREEMPT, ELASTIC, SHRINK)
PREEMPT_EPOCHS = 8       # examples/preemption.py's --epochs in the preempt-mwms row
PREEMPT_AT_RUN = 40      # SIGTERM once worker 1 logged this run (epoch 2 of 22-run epochs)
TARGETS = {"chief_s": "<= 7 s", "restore_s": "<= 2 s", "lost": "<= 1 s of steps",
           "hb_ratio": ">= 0.98", "steps_lost": "0-1"}

PREFIX = re.compile(r"^\[(launch|\w+:\d+)\] ?(.*)$")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
PROGRESS = re.compile(r"global step (\d+),")
SAVED = re.compile(r"saved checkpoint .*model\.ckpt-(\d+)$")
RESTORED = re.compile(r"restored /job:ps/task:0 from .*model\.ckpt-(\d+)")
CHIEF = re.compile(r"became chief \(term (\d+)\)")
STARTED = re.compile(r"^(\w+:\d+) started \(pid (\d+)\)")
KILLED = re.compile(r"^(\w+:\d+) killed by (SIG\w+)")
DONE = re.compile(r"^done global_step=(\d+)")
RUN_DONE = re.compile(r" run (\d+) done")
HANDLER_SAVED = re.compile(r"checkpoint of run (\d+) saved.* in ([0-9.]+) s$")
RESUMED = re.compile(r"^start total_run_calls=(\d+) restored=(\S+)")
EXAMPLE_DONE = re.compile(r"^done global_step=(\d+) accuracy=([0-9.]+) seen=(\d+)")
AGREEMENT = re.compile(r"^agreement calls=(\d+) mean_ms=([0-9.]+) runs_here=(\d+) "
                       r"train_s=([0-9.]+)")
EXIT_42 = re.compile(r"^(\w+:\d+) exit code 42 \(preempted")


# -- one launch, its output ---------------------------------------------------------

@dataclass
class Line:
    arrival: float      # time.time() when the line reached this process
    t: float            # the trainer's timestamp where the line has one, else arrival
    src: str            # "launch", "ps:0", "worker:1" ...
    text: str           # without the [src] prefix
    stamped: bool


def parse_line(raw: str, arrival: float) -> Line:
    m = PREFIX.match(raw)
    src, text = (m.group(1), m.group(2)) if m else ("?", raw)
    t, stamped = arrival, False
    s = STAMP.match(text)
    if s:
        try:
            ts = datetime.datetime.strptime(s.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            ts = None
        if ts is not None and abs(ts - arrival) < 5.0:   # same clock (a local-time mismatch: no)
            t, stamped = ts, True
    return Line(arrival, t, src, text, stamped)


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Launch:
    """``python -m distrib.launch`` running examples/trainer.py; its lines
    collected by a thread; ``close`` always stops every process it made."""

    def __init__(self, name: str, workers: int | str, trainer_args: list[str],
                 env: dict[str, str], log_dir: str | None, program: str = "trainer.py",
                 launch_args: tuple[str, ...] = ()) -> None:
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix="distrib-recovery-")
        self.lines: list[Line] = []
        self.cond = threading.Condition()
        self.stopped_pid: int | None = None     # a SIGSTOPped task, to SIGCONT on close
        self.leftover: list[int] = []
        self.marks: list[str] = []              # what this bench did, for the log
        self.log_path = os.path.join(log_dir, name + ".log") if log_dir else None
        self.program = program
        ckpt = os.path.join(self.tmp, "ckpt")
        if program == "trainer.py":
            cmd = [sys.executable, "-m", "distrib.launch", "--ps", "1", "--workers", str(workers),
                   "--max_restarts", "3", *launch_args, "--", sys.executable, "examples/trainer.py",
                   f"--logdir={ckpt}", *trainer_args]
        else:   # a program of the synchronous strategies: no ps
            cmd = [sys.executable, "-m", "distrib.launch", "--workers", str(workers),
                   "--max_restarts", "3", "--", sys.executable, f"examples/{program}",
                   f"--checkpoint_dir={ckpt}", *trainer_args]
        self.started = time.time()
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace",
                                  cwd=ROOT, env=child_env(env), start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for raw in self.p.stdout:
            line = parse_line(raw.rstrip("\n"), time.time())
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def snapshot(self) -> list[Line]:
        with self.cond:
            return list(self.lines)

    def wait_for(self, pred: Callable[[Line], bool], timeout: float, start: int = 0,
                 what: str = "an event") -> Line:
        """The first line from index ``start`` on that satisfies ``pred``."""
        deadline = time.monotonic() + timeout
        i = start
        with self.cond:
            while True:
                while i < len(self.lines):
                    if pred(self.lines[i]):
                        return self.lines[i]
                    i += 1
                if self.p.poll() is not None and not self.reader.is_alive():
                    raise RuntimeError(f"{self.name}: the launcher exited "
                                       f"({self.p.returncode}) before {what}\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{self.name}: no {what} within {timeout:g} s\n"
                                       f"{self.tail()}")
                self.cond.wait(min(left, 0.5))

    def tail(self, n: int = 30) -> str:
        return "\n".join(f"[{x.src}] {x.text}" for x in self.lines[-n:])

    def pid(self, task: str) -> int:
        pids = [int(m.group(2)) for x in self.snapshot() if x.src == "launch"
                and (m := STARTED.match(x.text)) and m.group(1) == task]
        if not pids:
            raise RuntimeError(f"{self.name}: no pid for {task}")
        return pids[-1]

    def task_pids(self) -> list[int]:
        return [int(m.group(2)) for x in self.snapshot() if x.src == "launch"
                and (m := STARTED.match(x.text))]

    def wait_exit(self, timeout: float) -> int:
        return self.p.wait(timeout)

    def close(self) -> None:
        """Stop everything this launch started, whatever state it is in."""
        try:
            if self.stopped_pid is not None:
                try:
                    os.kill(self.stopped_pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                self.stopped_pid = None
            if self.p.poll() is None:
                try:
                    os.kill(self.p.pid, signal.SIGTERM)   # workers first, then the ps
                    self.p.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass
            if self.p.poll() is None:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)   # its own group (new session)
                except ProcessLookupError:
                    pass
                self.p.wait(10)
            self.reader.join(10)
            # each task leads a group of its own; the launcher's death kills them
            # (PDEATHSIG) but make sure, by pid, of those that are still ours
            deadline = time.monotonic() + 5
            for pid in self.task_pids():
                while alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if alive(pid) and self.program in cmdline(pid):
                    try:
                        if os.getpgid(pid) == pid:
                            os.killpg(pid, signal.SIGKILL)
                        else:
                            os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
            self.leftover = [pid for pid in self.task_pids() if alive(pid)]
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if self.log_path:
                with open(self.log_path, "w") as f:
                    for mark in self.marks:
                        f.write(f"### {mark}\n")
                    for x in self.snapshot():
                        f.write(f"{x.arrival:.3f} [{x.src}] {x.text}\n")


# -- global steps over time --------------------------------------------------------

def step_points(lines: list[Line]) -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
    """(time, global step) from progress and checkpoint lines; (time, step) of
    each ps restore."""
    points, resets = [], []
    for x in lines:
        if x.src.startswith("worker:"):
            if (m := PROGRESS.search(x.text)) or (m := SAVED.search(x.text)):
                points.append((x.t, int(m.group(1))))
            elif m := RESTORED.search(x.text):
                resets.append((x.t, int(m.group(1))))
    return points, resets


def progress_curve(lines: list[Line]) -> list[tuple[float, float]]:
    """Cumulative global steps done, over time: a running maximum of the logged
    global step, restarted from the checkpoint's step at each restore."""
    points, resets = step_points(lines)
    events = sorted([(t, 1, s) for t, s in points] + [(t, 0, s) for t, s in resets])
    curve: list[tuple[float, float]] = []
    done, cur = 0.0, None
    for t, kind, s in events:
        if kind == 0:          # restore: the global step is back at s
            cur = s
        elif cur is None:
            cur = s
        elif s > cur:
            done += s - cur
            cur = s
        curve.append((t, done))
    return curve


def at(curve: list[tuple[float, float]], t: float) -> float:
    if not curve:
        return 0.0
    if t <= curve[0][0]:
        return curve[0][1]
    if t >= curve[-1][0]:
        return curve[-1][1]
    lo, hi = 0, len(curve) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if curve[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (t0, p0), (t1, p1) = curve[lo], curve[hi]
    return p0 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)


def rate(curve: list[tuple[float, float]], a: float, b: float) -> float | None:
    if b - a < 0.05:
        return None
    return (at(curve, b) - at(curve, a)) / (b - a)


# -- the fault runs ----------------------------------------------------------------

def after(lines: list[Line], t: float, pred: Callable[[Line], bool]) -> Line | None:
    return next((x for x in lines if x.t > t and pred(x)), None)


def is_progress(src: str) -> Callable[[Line], bool]:
    return lambda x: x.src == src and PROGRESS.search(x.text) is not None


def is_new_chief(x: Line) -> bool:
    m = CHIEF.search(x.text)
    return m is not None and int(m.group(1)) >= 2 and x.src.startswith("worker:")


def is_detection(x: Line) -> bool:
    if x.src == "launch":
        return KILLED.match(x.text) is not None
    return "waiting for the cluster to recover" in x.text and "step failed" in x.text \
        or "declared dead" in x.text


def detection_name(x: Line) -> str:
    if x.src == "launch":
        return "launcher: " + " ".join(x.text.split()[:4]).rstrip(";")
    if "declared dead" in x.text:
        return f"{x.src}: declared dead"
    return f"{x.src}: step failed"


def fault_run(fault: str, name: str, log_dir: str | None) -> dict[str, Any]:
    run = Launch(name, 3, ["--train_steps=100000000", f"--save_model_secs={SAVE_SECS:g}",
                           f"--log_every={LOG_EVERY}"], {"DISTRIB_HEARTBEAT_S": "1"}, log_dir)
    t_cont = None
    try:
        first = run.wait_for(lambda x: x.src.startswith("worker:") and
                             PROGRESS.search(x.text) is not None, EVENT_LIMIT_S,
                             what="a progress line")
        time.sleep(max(0.0, first.t + LEAD_S - time.time()))
        victim = {"kill-nonchief": "worker:2", "kill-ps": "ps:0"}.get(fault, "worker:0")
        pid = run.pid(victim)
        start = len(run.snapshot())
        t_fault = time.time()
        run.marks.append(f"fault {fault} {victim} pid {pid} at {t_fault:.3f}")
        if fault == "stop-chief":
            run.stopped_pid = pid
            os.kill(pid, signal.SIGSTOP)
            time.sleep(STOP_HOLD_S)
            t_cont = time.time()
            os.kill(pid, signal.SIGCONT)
            run.stopped_pid = None
            run.marks.append(f"SIGCONT at {t_cont:.3f}")
            rec = run.wait_for(lambda x: x.t > t_cont and is_progress(victim)(x),
                               EVENT_LIMIT_S, start, "progress of the stopped worker")
        else:
            os.kill(pid, signal.SIGKILL)
            if fault == "kill-ps":
                rec = run.wait_for(lambda x: x.t > t_fault and RESTORED.search(x.text)
                                   is not None, EVENT_LIMIT_S, start, "a ps restore")
            else:
                rec = run.wait_for(lambda x: x.t > t_fault and is_progress(victim)(x),
                                   EVENT_LIMIT_S, start, f"progress of the restarted {victim}")
                if fault == "kill-chief":   # recovered: the later of rejoin and new chief
                    chief = run.wait_for(lambda x: x.t > t_fault and is_new_chief(x),
                                         EVENT_LIMIT_S, start, "a new chief")
                    rec = max(rec, chief, key=lambda x: x.t)
        time.sleep(max(0.0, rec.t + AFTER_S + 0.5 - time.time()))
    finally:
        run.close()
    out = analyse_fault(fault, victim, run.snapshot(), t_fault, t_cont)
    out["leftover_pids"] = run.leftover
    return out


def analyse_fault(fault: str, victim: str, lines: list[Line], t_fault: float,
                  t_cont: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"fault": fault, "victim": victim}
    curve = progress_curve(lines)
    det = after(lines, t_fault, is_detection)
    out["detect_s"] = det.t - t_fault if det else None
    out["by"] = detection_name(det) if det else None
    dead = after(lines, t_fault, lambda x: "declared dead" in x.text)
    out["declared_dead_s"] = dead.t - t_fault if dead else None
    killed = after(lines, t_fault, lambda x: x.src == "launch" and KILLED.match(x.text)
                   is not None)
    out["launcher_saw_s"] = killed.t - t_fault if killed else None
    chief = after(lines, t_fault, is_new_chief)
    if fault in ("kill-chief", "stop-chief"):
        out["chief_s"] = chief.t - t_fault if chief and chief.src != victim else None
        out["new_chief"] = chief.src if chief else None
    elif fault == "kill-ps" and chief:   # the restarted arbiter grants the role anew
        out["lease_regranted_s"] = chief.t - t_fault
    restart = after(lines, t_fault, lambda x: x.src == "launch" and
                    (m := STARTED.match(x.text)) is not None and m.group(1) == victim)
    if restart:
        out["kill_to_restart_s"] = restart.t - t_fault
    if fault == "kill-ps":
        serving = after(lines, t_fault, lambda x: x.src == victim and "serving at" in x.text)
        noticed = after(lines, t_fault, lambda x: "restarted (incarnation" in x.text)
        restored = after(lines, t_fault, lambda x: RESTORED.search(x.text) is not None)
        if restart and restored:
            out["restore_s"] = restored.t - restart.t
        for key, a, b in (("restart_to_serving_s", restart, serving),
                          ("serving_to_noticed_s", serving, noticed),
                          ("noticed_to_restored_s", noticed, restored)):
            if a and b:
                out[key] = b.t - a.t
        points, _ = step_points(lines)
        before = [s for t, s in points if t <= t_fault]
        if before and restored:
            out["step_at_kill"] = max(before)
            out["step_restored"] = int(RESTORED.search(restored.text).group(1))
            out["lost"] = out["step_at_kill"] - out["step_restored"]
            saves = [(x.t, int(m.group(1))) for x in lines
                     if x.src.startswith("worker:") and (m := SAVED.search(x.text))]
            made = [t for t, s in saves if s == out["step_restored"] and t <= t_fault]
            if made:   # how old the restored checkpoint was when the ps died
                out["ckpt_age_s"] = t_fault - made[-1]
            gaps = [b - a for (a, _), (b, _) in zip(saves, saves[1:]) if b <= t_fault]
            if gaps:   # save_model_secs after the end of the previous save
                out["ckpt_period_s"] = statistics.median(gaps)
    elif restart:
        back = after(lines, restart.t, is_progress(victim))
        if back:
            out["rejoin_s"] = back.t - restart.t   # restarted worker: start to first step
    # the recovery point
    if fault == "kill-ps":
        rec = after(lines, t_fault, lambda x: RESTORED.search(x.text) is not None)
        t_rec = rec.t if rec else None
    elif fault == "stop-chief":
        rec = after(lines, t_cont or t_fault, is_progress(victim))
        t_rec = rec.t if rec else None
        out["stop_hold_s"] = (t_cont - t_fault) if t_cont else None
        if t_cont is not None:
            if t_rec is not None:
                out["cont_to_progress_s"] = t_rec - t_cont
            gone = after(lines, t_cont, lambda x: x.src == victim and "no longer chief"
                         in x.text)
            if gone:
                out["cont_to_no_longer_chief_s"] = gone.t - t_cont
    else:
        rec = after(lines, t_fault, is_progress(victim))
        t_rec = rec.t if rec else None
        if fault == "kill-chief" and t_rec is not None:
            t_rec = max(t_rec, chief.t) if chief else None
    out["rec_s"] = t_rec - t_fault if t_rec else None
    data_end = curve[-1][0] if curve else t_fault
    before = rate(curve, t_fault - BEFORE_S, t_fault)
    out["before"] = before
    out["lost_bound"] = before * SAVE_SECS if before is not None else None
    if t_rec is not None:
        out["during"] = rate(curve, t_fault, t_rec)
        end = min(t_rec + AFTER_S, data_end)   # never past the last line logged
        out["after"] = rate(curve, t_rec, end)
        out["after_window_s"] = end - t_rec
        bins = [rate(curve, t_fault + k * BIN_S, min(end, t_fault + (k + 1) * BIN_S))
                for k in range(math.ceil((end - t_fault) / BIN_S))
                if end - (t_fault + k * BIN_S) >= BIN_S / 2]
        bins = [b for b in bins if b is not None]
        out["bins"] = bins
        out["dip"] = min(bins) / before if bins and before else None
    return out


# -- heartbeats on and off -----------------------------------------------------------

def heartbeat_run(heartbeat: str, steps: int, name: str, log_dir: str | None) -> dict[str, Any]:
    run = Launch(name, 2, [f"--train_steps={steps}", f"--log_every={HB_LOG_EVERY}"],
                 {"DISTRIB_HEARTBEAT_S": heartbeat}, log_dir)
    try:
        code = run.wait_exit(RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        run.close()
    lines = run.snapshot()
    if code != 0:
        raise RuntimeError(f"{name}: the launcher ended with {code}\n{run.tail()}")
    points = sorted(p for p in step_points(lines)[0])
    progress = [(x.t, int(m.group(1))) for x in lines
                if x.src.startswith("worker:") and (m := PROGRESS.search(x.text))]
    progress.sort()
    curve = progress_curve([x for x in lines if not SAVED.search(x.text)])
    start = next((t for t, s in progress if s >= steps // 10), None)
    end = progress[-1][0] if progress else None
    done = [x for x in lines if DONE.match(x.text)]
    out: dict[str, Any] = {"heartbeat_s": heartbeat, "steps": steps,
                           "leftover_pids": run.leftover,
                           "wall_s": (max(x.t for x in done) - run.started) if done else None,
                           "final_step": max((s for _, s in points), default=None)}
    if start is not None and end is not None and end > start:
        out["steps_per_s"] = rate(curve, start, end)
        out["window_s"] = end - start
    return out


# -- an elastic launch: 2 -> 3 -> 2 workers ----------------------------------------------

def elastic_run(name: str, log_dir: str | None) -> dict[str, Any]:
    ctl = tempfile.mkdtemp(prefix="el-", dir="/tmp")   # short: the control socket's path
    run = Launch(name, "2:3", ["--train_steps=100000000", f"--save_model_secs={SAVE_SECS:g}",
                               f"--log_every={LOG_EVERY}"], {"DISTRIB_HEARTBEAT_S": "1"}, log_dir,
                 launch_args=("--logdir", ctl))

    def scale(n: int) -> float:
        t = time.time()
        done = subprocess.run([sys.executable, "-m", "distrib.launch", "scale", "--logdir", ctl,
                               "--workers", str(n)], capture_output=True, text=True, cwd=ROOT,
                              env=child_env({}), timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{name}: scale --workers {n} exited {done.returncode}: "
                               f"{done.stderr.strip()}")
        run.marks.append(f"scale --workers {n} at {t:.3f}: {done.stdout.strip()}")
        return t
    try:
        first = run.wait_for(lambda x: x.src.startswith("worker:") and
                             PROGRESS.search(x.text) is not None, EVENT_LIMIT_S,
                             what="a progress line")
        time.sleep(max(0.0, first.t + LEAD_S - time.time()))
        start = len(run.snapshot())
        t_scale = scale(3)
        t_cmd = time.time() - t_scale
        started = run.wait_for(lambda x: x.src == "launch" and x.text.startswith("worker:2 started"),
                               EVENT_LIMIT_S, start, "worker 2 started")
        new = run.wait_for(is_progress("worker:2"), EVENT_LIMIT_S, start, "worker 2's first step")
        time.sleep(max(0.0, new.t + AFTER_S - time.time()))
        t_shrink = scale(2)
        left = run.wait_for(lambda x: x.src == "launch" and "worker:2 left the cluster" in x.text,
                            EVENT_LIMIT_S, start, "worker 2 leaving")
        time.sleep(max(0.0, left.t + AFTER_S + 0.5 - time.time()))
    finally:
        run.close()
        shutil.rmtree(ctl, ignore_errors=True)
    examples = examples_rate(progress_curve(run.snapshot()))
    return {"fault": ELASTIC, "scale_cmd_s": t_cmd, "scale_to_started_s": started.t - t_scale,
            "scale_to_first_step_s": new.t - t_scale, "shrink_to_left_s": left.t - t_shrink,
            "ex_before": examples(t_scale - BEFORE_S, t_scale),
            "ex_during": examples(t_scale, new.t), "ex_after": examples(new.t, new.t + AFTER_S),
            "ex_after_shrink": examples(left.t, left.t + AFTER_S), "leftover_pids": run.leftover}


def examples_rate(curve: Any) -> Callable[[float, float], float | None]:
    """Examples/s of the progress ``curve`` between two times (None: too few steps)."""
    def examples(a: float, b: float) -> float | None:
        r = rate(curve, a, b)
        return None if r is None else r * BATCH
    return examples


def shrink_run(name: str, log_dir: str | None) -> dict[str, Any]:
    """The kill-9-shrink row: 1 -> 2 workers, then SIGKILL to worker 0 (the chief)."""
    ctl = tempfile.mkdtemp(prefix="el-", dir="/tmp")   # short: the control socket's path
    run = Launch(name, "1:3", ["--train_steps=100000000", f"--save_model_secs={SAVE_SECS:g}",
                               "--log_every=1"], {"DISTRIB_HEARTBEAT_S": "1"}, log_dir,
                 launch_args=("--logdir", ctl))
    try:
        run.wait_for(is_progress("worker:0"), EVENT_LIMIT_S, what="worker 0's first step")
        grown = subprocess.run([sys.executable, "-m", "distrib.launch", "scale", "--logdir", ctl,
                                "--workers", "2"], capture_output=True, text=True, cwd=ROOT,
                               env=child_env({}), timeout=60)
        if grown.returncode != 0:
            raise RuntimeError(f"{name}: scale --workers 2 exited {grown.returncode}: "
                               f"{grown.stderr.strip()}")
        first = run.wait_for(is_progress("worker:1"), EVENT_LIMIT_S, what="worker 1's first step")
        time.sleep(max(0.0, first.t + LEAD_S - time.time()))
        start = len(run.snapshot())
        pid = run.pid("worker:0")
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        run.marks.append(f"SIGKILL to worker:0 pid {pid} at {t_kill:.3f}")
        removed = run.wait_for(lambda x: x.src == "launch" and x.text.startswith(
            "worker:0 killed by SIGKILL; removed from the cluster"), EVENT_LIMIT_S, start,
            "worker 0 removed")
        learned = run.wait_for(lambda x: x.src == "worker:1" and
                               "cluster membership version 3 " in x.text, EVENT_LIMIT_S, start,
                               "worker 1 holding version 3")
        chief = run.wait_for(lambda x: x.src == "worker:1" and is_new_chief(x), EVENT_LIMIT_S,
                             start, "worker 1 elected chief")
        step = run.wait_for(lambda x: x.t >= learned.t and is_progress("worker:1")(x),
                            EVENT_LIMIT_S, start, "the shrunk group's first step")
        time.sleep(max(0.0, max(step.t, chief.t) + AFTER_S + 0.5 - time.time()))
    finally:
        run.close()
        shutil.rmtree(ctl, ignore_errors=True)
    examples = examples_rate(progress_curve(run.snapshot()))
    return {"fault": SHRINK, "kill_to_removed_s": removed.t - t_kill,
            "kill_to_learned_s": learned.t - t_kill, "kill_to_first_step_s": step.t - t_kill,
            "chief_s": chief.t - t_kill, "ex_before": examples(t_kill - BEFORE_S, t_kill),
            "ex_after": examples(step.t, step.t + AFTER_S), "leftover_pids": run.leftover}


# -- a preempted MultiWorkerMirroredStrategy worker --------------------------------------

def preempt_run(name: str, log_dir: str | None) -> dict[str, Any]:
    run = Launch(name, 2, [f"--epochs={PREEMPT_EPOCHS}", "--log_every=1"], {}, log_dir,
                 program="preemption.py")
    try:
        run.wait_for(lambda x: x.src == "worker:1" and (m := RUN_DONE.search(x.text))
                     is not None and int(m.group(1)) >= PREEMPT_AT_RUN, EVENT_LIMIT_S,
                     what=f"worker 1's run {PREEMPT_AT_RUN}")
        pid = run.pid("worker:1")
        t_fault = time.time()
        os.kill(pid, signal.SIGTERM)
        run.marks.append(f"SIGTERM to worker:1 pid {pid} at {t_fault:.3f}")
        try:
            code = run.wait_exit(RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        run.close()
    if code != 0:
        raise RuntimeError(f"{name}: the launcher ended with {code}\n{run.tail()}")
    out = analyse_preempt(run.snapshot(), t_fault)
    out["leftover_pids"] = run.leftover
    return out


def analyse_preempt(lines: list[Line], t_fault: float) -> dict[str, Any]:
    """The preempt-mwms row's figures (see main's legend) from one run's lines."""
    out: dict[str, Any] = {"fault": PREEMPT, "victim": "worker:1"}
    runs = [(x.t, int(m.group(1))) for x in lines if (m := RUN_DONE.search(x.text))]
    exits = [x for x in lines if x.src == "launch" and x.t >= t_fault and EXIT_42.match(x.text)]
    saved = [(x, HANDLER_SAVED.search(x.text)) for x in lines if x.t >= t_fault
             and HANDLER_SAVED.search(x.text)]
    if not exits or not saved:
        return out
    s = int(saved[0][1].group(1))
    out["saved_at_run"] = s
    out["run_at_sigterm"] = max((n for t, n in runs if t <= t_fault), default=0)
    out["steps_after_notice"] = s - out["run_at_sigterm"]   # trained, then saved
    last_exit = max(x.t for x in exits)
    # trained before the exit but not in the checkpoint: lost (the target is 0-1)
    out["steps_lost"] = max((n for t, n in runs if t <= last_exit), default=s) - s
    out["notice_to_save_s"] = saved[0][0].t - t_fault
    out["save_s"] = max(float(m.group(2)) for _, m in saved)
    out["sigterm_to_exit_s"] = last_exit - t_fault
    restarts = [x for x in lines if x.src == "launch" and x.t >= last_exit
                and STARTED.match(x.text)]
    resumed = [x for x in lines if x.t >= t_fault and (m := RESUMED.match(x.text))
               and int(m.group(1)) > 0]
    first = next((t for t, n in runs if t > last_exit and n == s + 1), None)
    if restarts:
        out["exit_to_restart_s"] = max(x.t for x in restarts) - last_exit
    if restarts and resumed:
        out["restart_to_resumed_s"] = max(x.t for x in resumed) - max(x.t for x in restarts)
        out["resumed_at_run"] = sorted({int(RESUMED.match(x.text).group(1)) for x in resumed})
    if first is not None:
        out["sigterm_to_first_step_s"] = first - t_fault
    done = [EXAMPLE_DONE.match(x.text) for x in lines if EXAMPLE_DONE.match(x.text)]
    last_run = max((n for _, n in runs), default=None)
    out["exact"] = (len(done) == 2 and len({m.groups()[::2] for m in done}) == 1
                    and int(done[0].group(1)) == last_run)
    agree = [AGREEMENT.match(x.text) for x in lines if x.t > last_exit
             and AGREEMENT.match(x.text)]
    if agree:
        calls = sum(int(m.group(1)) for m in agree)
        ms = sum(int(m.group(1)) * float(m.group(2)) for m in agree) / max(calls, 1)
        out["agree_ms"] = ms
        out["runs_per_agreement"] = sum(int(m.group(3)) for m in agree) / max(calls, 1)
        out["agree_share"] = sum(int(m.group(1)) * float(m.group(2)) / 1000.0
                                 / float(m.group(4)) for m in agree) / len(agree)
    return out


# -- the run -------------------------------------------------------------------------

def median(values: list[Any]) -> Any:
    vals = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(vals) if vals else None


def summarize(faults: dict[str, list[dict[str, Any]]],
              hb: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    keys = ("detect_s", "declared_dead_s", "launcher_saw_s", "chief_s", "lease_regranted_s",
            "kill_to_restart_s", "restore_s", "restart_to_serving_s", "serving_to_noticed_s",
            "noticed_to_restored_s", "rejoin_s", "step_at_kill", "step_restored", "lost",
            "lost_bound", "ckpt_age_s", "ckpt_period_s", "cont_to_progress_s",
            "cont_to_no_longer_chief_s", "before", "during", "after", "rec_s", "dip", "stop_hold_s",
            "saved_at_run", "run_at_sigterm", "steps_after_notice", "steps_lost",
            "notice_to_save_s", "save_s", "sigterm_to_exit_s", "exit_to_restart_s",
            "restart_to_resumed_s", "sigterm_to_first_step_s", "agree_ms",
            "runs_per_agreement", "agree_share", "scale_cmd_s", "scale_to_started_s",
            "scale_to_first_step_s", "shrink_to_left_s", "ex_before", "ex_during", "ex_after",
            "ex_after_shrink", "kill_to_removed_s", "kill_to_learned_s", "kill_to_first_step_s")
    for fault in FAULTS:
        runs = faults.get(fault, [])
        if not runs:
            continue
        row: dict[str, Any] = {"name": fault, "rounds": len(runs)}
        for k in keys:
            v = median([r.get(k) for r in runs])
            if v is not None:
                row[k] = v
        bys = [r["by"] for r in runs if r.get("by")]
        row["by"] = max(set(bys), key=bys.count) if bys else None
        chiefs = [r["new_chief"] for r in runs if r.get("new_chief")]
        if chiefs:
            row["new_chief"] = sorted(set(chiefs))
        if fault in ("kill-chief", "stop-chief"):
            row["target_chief_s"] = TARGETS["chief_s"]
        if fault == PREEMPT:
            row["exact"] = [r.get("exact") for r in runs]
            row["target_steps_lost"] = TARGETS["steps_lost"]
        if fault == "kill-ps":
            row["target_restore_s"] = TARGETS["restore_s"]
            row["target_lost"] = TARGETS["lost"]
            row["lost_within_bound"] = [r.get("lost") is not None and r.get("lost_bound")
                                        is not None and r["lost"] <= r["lost_bound"]
                                        for r in runs]
        rows.append(row)
    pairs = [(on, off) for on, off in hb if on.get("steps_per_s") and off.get("steps_per_s")]
    if pairs:
        rows.append({"name": "ps1-w2 heartbeats on/off", "rounds": len(pairs),
                     "on_steps_per_s": median([on["steps_per_s"] for on, _ in pairs]),
                     "off_steps_per_s": median([off["steps_per_s"] for _, off in pairs]),
                     "ratio": median([on["steps_per_s"] / off["steps_per_s"]
                                      for on, off in pairs]),
                     "ratios": [on["steps_per_s"] / off["steps_per_s"] for on, off in pairs],
                     "target": TARGETS["hb_ratio"]})
    return rows


def fmt(v: Any, spec: str, width: int) -> str:
    return (format(v, spec) if isinstance(v, (int, float)) else "-").rjust(width)


def print_table(rows: list[dict[str, Any]]) -> None:
    preempt = [r for r in rows if r["name"] == PREEMPT]
    elastic = [r for r in rows if r["name"] == ELASTIC]
    shrink = [r for r in rows if r["name"] == SHRINK]
    rows = [r for r in rows if r["name"] not in (PREEMPT, ELASTIC, SHRINK)]
    if any("ratio" not in r for r in rows):
        print(f"{'fault':<14} {'detect_s':>8}  {'by':<32} {'chief_s':>7} {'target':>7} "
              f"{'restore_s':>9} {'target':>7} {'lost':>5} {'<=':>5} {'before':>6} "
              f"{'during':>6} {'after':>6} {'dip':>5} {'rec_s':>6}")
    for r in rows:
        if "ratio" in r:
            continue
        print(f"{r['name']:<14} {fmt(r.get('detect_s'), '.3f', 8)}  {str(r.get('by') or '-'):<32} "
              f"{fmt(r.get('chief_s'), '.2f', 7)} {r.get('target_chief_s', ''):>7} "
              f"{fmt(r.get('restore_s'), '.2f', 9)} {r.get('target_restore_s', ''):>7} "
              f"{fmt(r.get('lost'), '.0f', 5)} {fmt(r.get('lost_bound'), '.0f', 5)} "
              f"{fmt(r.get('before'), '.0f', 6)} {fmt(r.get('during'), '.0f', 6)} "
              f"{fmt(r.get('after'), '.0f', 6)} {fmt(r.get('dip'), '.2f', 5)} "
              f"{fmt(r.get('rec_s'), '.2f', 6)}")
    for r in rows:
        if "ratio" in r:
            print(f"{r['name']}: on {r['on_steps_per_s']:.0f} global steps/s, off "
                  f"{r['off_steps_per_s']:.0f} global steps/s, on/off {r['ratio']:.3f} "
                  f"(target {r['target']}; rounds: "
                  f"{', '.join(format(x, '.3f') for x in r['ratios'])})")
    for r in preempt:
        print(f"{PREEMPT}: SIGTERM to worker 1 of 2 (MultiWorkerMirroredStrategy) after run "
              f"{fmt(r.get('run_at_sigterm'), '.0f', 0)}; saved at run "
              f"{fmt(r.get('saved_at_run'), '.0f', 0)} ({fmt(r.get('steps_after_notice'), '.0f', 0)}"
              f" runs after the notice, trained and saved); steps lost "
              f"{fmt(r.get('steps_lost'), '.0f', 0)} (target {r['target_steps_lost']}); "
              f"SIGTERM -> saved {fmt(r.get('notice_to_save_s'), '.3f', 0)} s (save "
              f"{fmt(r.get('save_s'), '.3f', 0)} s), -> exit 42 "
              f"{fmt(r.get('sigterm_to_exit_s'), '.3f', 0)} s; exit -> restarted "
              f"{fmt(r.get('exit_to_restart_s'), '.2f', 0)} s -> restored "
              f"{fmt(r.get('restart_to_resumed_s'), '.2f', 0)} s; SIGTERM -> first step after "
              f"the restart {fmt(r.get('sigterm_to_first_step_s'), '.2f', 0)} s; agreement "
              f"{fmt(r.get('agree_ms'), '.2f', 0)} ms every "
              f"{fmt(r.get('runs_per_agreement'), '.1f', 0)} runs, "
              f"{fmt(100 * r['agree_share'] if r.get('agree_share') else None, '.1f', 0)}% of "
              f"the training; ends as unpreempted: {r.get('exact')}")
    for r in elastic:
        print(f"{ELASTIC}: scale 2 -> 3 workers: the command {fmt(r.get('scale_cmd_s'), '.2f', 0)}"
              f" s, -> worker 2 started {fmt(r.get('scale_to_started_s'), '.2f', 0)} s, -> its "
              f"first step {fmt(r.get('scale_to_first_step_s'), '.2f', 0)} s; 3 -> 2: -> worker 2 "
              f"left {fmt(r.get('shrink_to_left_s'), '.2f', 0)} s; examples/s before "
              f"{fmt(r.get('ex_before'), '.0f', 0)}, during {fmt(r.get('ex_during'), '.0f', 0)}, "
              f"after (3 workers) {fmt(r.get('ex_after'), '.0f', 0)}, after the leave (2) "
              f"{fmt(r.get('ex_after_shrink'), '.0f', 0)}")
    for r in shrink:
        print(f"{SHRINK}: kill -9 of worker 0 (the chief) of 2, MIN 1: -> removed "
              f"{fmt(r.get('kill_to_removed_s'), '.3f', 0)} s, -> worker 1 holds the new "
              f"version {fmt(r.get('kill_to_learned_s'), '.3f', 0)} s, -> the shrunk group's "
              f"first step {fmt(r.get('kill_to_first_step_s'), '.3f', 0)} s, -> worker 1 chief "
              f"{fmt(r.get('chief_s'), '.2f', 0)} s; examples/s before (2 workers) "
              f"{fmt(r.get('ex_before'), '.0f', 0)}, after (1) {fmt(r.get('ex_after'), '.0f', 0)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows (and every run's figures) to this file")
    ap.add_argument("--rounds", type=int, help="rounds of every fault and both heartbeat "
                    "settings (default 3; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="1 round, shorter heartbeat runs")
    ap.add_argument("--hb_steps", type=int, help="--train_steps of each heartbeat run "
                    "(default 12000; --quick: 4000)")
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help=f"comma-separated subset of {','.join(FAULTS)}; 'none' for none")
    ap.add_argument("--no_heartbeat_rows", action="store_true",
                    help="skip the heartbeat on/off runs")
    ap.add_argument("--logs", help="keep each run's output in this folder")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    hb_steps = args.hb_steps or (4000 if args.quick else 12000)
    faults = [] if args.faults == "none" else [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        ap.error(f"unknown fault(s): {', '.join(sorted(unknown))}")
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)
    # a SIGTERM of this process runs the finally blocks that stop the clusters
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    samples: dict[str, list[dict[str, Any]]] = {}
    hb: list[tuple[dict[str, Any], dict[str, Any]]] = []
    errors: list[str] = []
    t0 = time.time()
    for r in range(rounds):
        for fault in faults:
            try:
                res = (preempt_run(f"{fault}-r{r}", args.logs) if fault == PREEMPT
                       else elastic_run(f"{fault}-r{r}", args.logs) if fault == ELASTIC
                       else shrink_run(f"{fault}-r{r}", args.logs) if fault == SHRINK
                       else fault_run(fault, f"{fault}-r{r}", args.logs))
                samples.setdefault(fault, []).append(res)
                print(f"# round {r} {fault}: " + ", ".join(
                    f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in res.items() if k != "bins"), file=sys.stderr, flush=True)
            except RuntimeError as e:
                errors.append(str(e).splitlines()[0])
                print(f"# round {r} {fault} failed: {e}", file=sys.stderr, flush=True)
        if not args.no_heartbeat_rows:
            order = ("1", "0") if r % 2 == 0 else ("0", "1")
            got: dict[str, dict[str, Any]] = {}
            for h in order:
                try:
                    got[h] = heartbeat_run(h, hb_steps, f"hb{h}-r{r}", args.logs)
                    print(f"# round {r} ps1-w2 DISTRIB_HEARTBEAT_S={h}: "
                          f"{got[h].get('steps_per_s') or 0:.1f} global steps/s over "
                          f"{got[h].get('window_s') or 0:.1f} s", file=sys.stderr, flush=True)
                except RuntimeError as e:
                    errors.append(str(e).splitlines()[0])
                    print(f"# round {r} heartbeat {h} failed: {e}", file=sys.stderr, flush=True)
            if "1" in got and "0" in got:
                hb.append((got["1"], got["0"]))
    rows = summarize(samples, hb)
    shm_new = sorted((set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set())
                     - shm_before)
    leftover = sorted({p for runs in samples.values() for x in runs
                       for p in x.get("leftover_pids", [])}
                      | {p for pair in hb for x in pair for p in x.get("leftover_pids", [])})
    print(f"examples/trainer.py through python -m distrib.launch on loopback, {os.cpu_count()} "
          f"cores; faults: 1 ps + 3 workers, DISTRIB_HEARTBEAT_S=1, --save_model_secs "
          f"{SAVE_SECS:g}, batch {BATCH}, fault {LEAD_S:g} s after the first progress line; "
          f"{rounds} round(s), medians; {time.time() - t0:.0f} s in all")
    print_table(rows)
    print(f"detect_s: signal -> first line that shows the failure noticed (by); chief_s: "
          f"signal -> another worker's 'became chief (term 2)'; restore_s: launcher's restart "
          f"of the ps -> 'restored /job:ps/task:0'; lost: global step at the kill - step of "
          f"the checkpoint restored (<=: steps/s before x {SAVE_SECS:g} s, one checkpoint "
          f"interval); before/during/after: global steps/s (x{BATCH} = examples/s) over "
          f"{BEFORE_S:g} s before the fault, fault -> recovered, {AFTER_S:g} s after; "
          f"dip: lowest {BIN_S:g}-s window from the fault to recovered + {AFTER_S:g} s / "
          f"before; rec_s: fault -> recovered (stop-chief: SIGCONT {STOP_HOLD_S:g} s after "
          f"SIGSTOP); ps1-w2: {hb_steps} steps, rate from the first progress line past "
          f"{hb_steps // 10} to the last; {PREEMPT}: examples/preemption.py, 2 workers, "
          f"{PREEMPT_EPOCHS} epochs (the module header names each figure)")
    if errors:
        print(f"{len(errors)} run(s) failed: " + "; ".join(errors))
    if leftover:
        print(f"processes left running: {leftover}")
    if shm_new:
        print(f"new entries in /dev/shm during the run (not necessarily ours): {shm_new}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": {"rounds": rounds, "hb_steps": hb_steps, "save_model_secs":
                                  SAVE_SECS, "log_every": LOG_EVERY, "batch": BATCH,
                                  "lead_s": LEAD_S, "before_s": BEFORE_S, "after_s": AFTER_S,
                                  "stop_hold_s": STOP_HOLD_S, "cores": os.cpu_count()},
                       "rows": rows, "runs": {**samples, "heartbeat": [
                           {"on": on, "off": off} for on, off in hb]},
                       "errors": errors, "leftover_pids": leftover, "dev_shm_new": shm_new},
                      f, indent=1)


if __name__ == "__main__":
    main()
