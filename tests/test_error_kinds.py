"""Error kinds as types: the failures the runtime acts on (a fenced chief-only
write, a partition the worker no longer has, a tensor from a restarted peer,
a closed session, a variable with no value) each have a class of their own,
a subclass of TF's class for that kind, so that code decides on the class
and never on a message's text.

Checked here: each class's base and error code; the wire round trip of each,
and a sender's subclass the receiver does not know arriving as its TF class;
the kinds raised where they are born, through real servers (a fenced write,
the master's one re-registration of a partition, a closed session's waiting
take); and a static scan of ``distrib/`` that fails on any decision made on an
error's text (``x in e.message``, ``x in str(e)``, ``re.search(p, e.message)``),
with a test that it catches such a line.

Also the failed peer (``OpError.peer``, the task whose failure caused an
error): its wire round trip, the task a real step names when a task it needs
is killed, the abort and restart paths that pass it on, and the coordinator's
choice of whom to blame made from it alone.
"""
from __future__ import annotations

import ast
import asyncio
import contextlib
import copy
import pathlib
import pickle

import numpy as np
import pytest

import distrib as dt
from distrib import errors
from distrib.demo import free_ports
from distrib.runtime.step.rendezvous import Rendezvous
from distrib.train.chief.checkpoint_fence import fence_directory
from distrib.train.chief.ps_recovery import recoverable

GUARD = 30.0

# each new kind, the TF class it derives from, and that class's code
KINDS = [
    (errors.FencedError, errors.AbortedError, 10),
    (errors.PartitionUnregisteredError, errors.NotFoundError, 5),
    (errors.PeerRestartedError, errors.AbortedError, 10),
    # TF fails a closed session's waiting step with CancelledError (ours was Unavailable)
    (errors.SessionClosedError, errors.CancelledError, 1),
    (errors.UninitializedVariableError, errors.FailedPreconditionError, 9),
]


# -- the classes --------------------------------------------------------------------------

@pytest.mark.parametrize("cls, base, code", KINDS)
def test_each_kind_is_its_tf_class_with_its_code(cls, base, code) -> None:
    assert issubclass(cls, base) and cls.__bases__ == (base,)
    e = cls("what went wrong", task="/job:ps/task:0", op="w")
    assert e.error_code == code == base.code
    with pytest.raises(base):          # users' `except AbortedError:` and so on still catch it
        raise e
    assert cls.__name__ in errors.__all__ and getattr(dt.errors, cls.__name__) is cls
    assert cls.__doc__ and len(cls.__doc__.split()) > 20   # when raised, and what to do
    # TF's positional form works as for the base class
    tf_form = cls(None, None, "msg")
    assert (tf_form.message, tf_form.error_code) == ("msg", code)


# -- the wire -----------------------------------------------------------------------------

@pytest.mark.parametrize("cls, base, code", KINDS)
def test_each_kind_crosses_the_wire_as_itself(cls, base, code) -> None:
    e = cls("refused", task="/job:ps/task:0", op="w")
    wire = errors.to_wire(e)
    assert wire == {"type": cls.__name__, "base": base.__name__, "message": "refused",
                    "task": "/job:ps/task:0", "op": "w"}
    back = errors.from_wire(wire)
    assert type(back) is cls and str(back) == str(e) and back.error_code == code
    # copies and pickles keep the subclass too
    assert type(copy.deepcopy(e)) is cls and type(pickle.loads(pickle.dumps(e))) is cls
    assert str(pickle.loads(pickle.dumps(e))) == str(e)


def test_tf_classes_cross_the_wire_without_a_base_field() -> None:
    # the wire format of the standard classes is unchanged
    assert "base" not in errors.to_wire(errors.AbortedError("x"))
    assert "base" not in errors.to_wire(errors.OpError("x"))


class QuotaError(errors.ResourceExhaustedError):
    """A sender's own kind, unknown to the receiver's errors module."""


class StaleChiefError(errors.FencedError):
    """A sender's refinement of one of distrib's kinds."""


def test_a_senders_subclass_unknown_here_arrives_as_its_tf_class() -> None:
    wire = errors.to_wire(QuotaError("over quota", task="/job:worker/task:1"))
    assert (wire["type"], wire["base"]) == ("QuotaError", "ResourceExhaustedError")
    back = errors.from_wire(wire)
    assert type(back) is errors.ResourceExhaustedError and back.error_code == 8
    assert (back.message, back.task) == ("over quota", "/job:worker/task:1")
    # the nearest TF class in the MRO, not the nearest known one
    back = errors.from_wire(errors.to_wire(StaleChiefError("old")))
    assert type(back) is errors.AbortedError
    # a newer peer's kind, as it would come
    back = errors.from_wire({"type": "FutureKindError", "base": "NotFoundError",
                             "message": "m", "task": None, "op": None})
    assert type(back) is errors.NotFoundError
    # an older peer's record (no base) of an unknown type: UnknownError, as before
    assert type(errors.from_wire({"type": "FutureKindError", "message": "m"})) \
        is errors.UnknownError
    # a name this side knows as another kind: the base the sender names wins
    back = errors.from_wire({"type": "FencedError", "base": "NotFoundError", "message": "m"})
    assert type(back) is errors.NotFoundError
    # a name we know, sent without a base (an older peer): rebuilt as itself
    assert type(errors.from_wire({"type": "FencedError", "message": "m"})) is errors.FencedError


def test_a_local_subclass_copies_as_itself() -> None:
    class LocalError(errors.UnavailableError):
        pass

    e = LocalError("gone", task="/job:ps/task:0")
    back = copy.copy(e)
    assert type(back) is LocalError and str(back) == str(e)


# -- where the kinds are born -------------------------------------------------------------

@contextlib.asynccontextmanager
async def ps_and_worker():
    ports = free_ports(2)
    spec = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    async with dt.serve(spec, job_name="ps", task_index=0), \
            dt.serve(spec, job_name="worker", task_index=0) as worker:
        yield spec, worker


async def test_a_fenced_write_on_a_ps_reaches_the_client_as_fenced_error() -> None:
    # the ps refuses a chief-only write of an older term than it has seen; the
    # error crosses ps -> worker's master -> client by type
    async with ps_and_worker() as (spec, _):
        g = dt.Graph()
        with g.as_default(), dt.device("/job:ps/task:0"):
            v = dt.Variable(np.zeros(3, np.float32), name="fenced_v")
        async with dt.Session(f"distrib://{spec['worker'][0]}", graph=g) as sess:
            await sess.run(v.initializer, options={"fencing_term": 5})
            with pytest.raises(errors.FencedError) as refused:
                await sess.run(v.initializer, options={"fencing_term": 3})
            assert isinstance(refused.value, errors.AbortedError)
            assert refused.value.task == "/job:ps/task:0"
            assert not recoverable(refused.value)     # a fenced write is final
            await sess.run(v.initializer, options={"fencing_term": 5})
            await sess.run(v.initializer)              # no term: not a chief-only write


def test_a_fenced_checkpoint_folder_raises_fenced_error(tmp_path) -> None:
    fence_directory(str(tmp_path), 4)
    with pytest.raises(errors.FencedError):
        fence_directory(str(tmp_path), 2)
    fence_directory(str(tmp_path), 4)


async def test_reading_an_uninitialized_variable_is_uninitialized_variable_error() -> None:
    async with ps_and_worker() as (spec, _):
        g = dt.Graph()
        with g.as_default(), dt.device("/job:ps/task:0"):
            v = dt.Variable(np.zeros(3, np.float32), name="never_set")
        async with dt.Session(f"distrib://{spec['worker'][0]}", graph=g) as sess:
            with pytest.raises(errors.UninitializedVariableError, match="never_set") as e:
                await sess.run(v)
            assert isinstance(e.value, errors.FailedPreconditionError)
            assert recoverable(e.value)   # a restarted ps's variables come back
    assert not recoverable(errors.FailedPreconditionError("not about a variable"))


async def test_a_tensor_from_a_restarted_peer_is_peer_restarted_error() -> None:
    rv = Rendezvous("/job:worker/task:1")
    rv.begin(7, {"/job:worker/task:0": 1})
    rv.put(7, "k", 1.0, "/job:worker/task:0", 2)   # sent by a newer incarnation
    with pytest.raises(errors.PeerRestartedError, match="restarted during the step"):
        await asyncio.wait_for(rv.get(7, "k", "/job:worker/task:0", timeout=5), GUARD)


@contextlib.asynccontextmanager
async def one_task():
    (port,) = free_ports(1)
    spec = {"worker": [f"localhost:{port}"]}
    async with dt.serve(spec, job_name="worker", task_index=0) as core:
        yield f"distrib://{spec['worker'][0]}", core


def _spy_runs(monkeypatch, worker, always_unregistered: bool = False) -> list:
    """Record each run_partition call's outcome on ``worker`` (white-box)."""
    outcomes: list = []
    real = worker.run_partition

    async def spy(key, *args, **kwargs):
        if always_unregistered:
            outcomes.append(errors.PartitionUnregisteredError)
            raise errors.PartitionUnregisteredError(
                f"partition is not registered on this task: {key}", task=worker.task)
        try:
            out = await real(key, *args, **kwargs)
        except errors.OpError as e:
            outcomes.append(type(e))
            raise
        outcomes.append("ok")
        return out

    monkeypatch.setattr(worker, "run_partition", spy)
    return outcomes


async def test_the_master_registers_a_forgotten_partition_again_once(monkeypatch) -> None:
    async with one_task() as (target, core):
        g = dt.Graph()
        with g.as_default():
            y = dt.reduce_sum(dt.constant([1.0, 2.0, 3.0]) * 2.0)
        async with dt.Session(target, graph=g) as sess:
            assert await sess.run(y) == 12.0
            outcomes = _spy_runs(monkeypatch, core.worker)
            # the worker forgets the partition (as a restarted task would): the master's
            # next step meets PartitionUnregisteredError, registers it again, reruns
            core.worker._partitions.clear()
            assert await sess.run(y) == 12.0
            assert outcomes == [errors.PartitionUnregisteredError, "ok"]
            assert await sess.run(y) == 12.0 and outcomes[-1] == "ok"


async def test_a_partition_unregistered_again_after_the_rerun_reaches_the_client(
        monkeypatch) -> None:
    async with one_task() as (target, core):
        g = dt.Graph()
        with g.as_default():
            y = dt.reduce_sum(dt.constant([1.0, 2.0]))
        async with dt.Session(target, graph=g) as sess:
            assert await sess.run(y) == 3.0
            outcomes = _spy_runs(monkeypatch, core.worker, always_unregistered=True)
            with pytest.raises(errors.PartitionUnregisteredError) as e:
                await sess.run(y)
            assert isinstance(e.value, errors.NotFoundError)
            assert len(outcomes) == 2   # one re-registration, one rerun, no more


async def test_closing_a_session_fails_its_waiting_take_with_session_closed_error(server):
    from distrib.train.replicas.sync_replicas import _Accumulator
    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(np.zeros(2, np.float32), name="v")
        take = _Accumulator(v, dt.float32, [2]).take_grad(2)
    sess = dt.Session(server.target, graph=g)
    waiting = asyncio.create_task(sess.run(take))
    await asyncio.sleep(0.3)
    assert not waiting.done(), "the take must wait: no gradient was applied"
    await asyncio.wait_for(sess.close(), GUARD)
    with pytest.raises(errors.SessionClosedError, match="closed while the step waited") as e:
        await asyncio.wait_for(waiting, 10)
    # TF's class for it; and not a failure to ride through (the session is gone)
    assert isinstance(e.value, errors.CancelledError)
    assert not isinstance(e.value, errors.UnavailableError) and not recoverable(e.value)
    assert "closed while the step waited: " not in e.value.message   # said once, not twice


async def test_a_closed_session_is_not_retried_by_what_rides_through_failures(server):
    """RecoveringSession (the Supervisor's) and MonitoredSession retry a step that
    failed with UnavailableError or AbortedError; a step of a session closed under
    it fails at once with SessionClosedError (TF: CancelledError), no waiting out
    ``max_wait_secs`` on a session that will never run again."""
    from distrib.train.chief.ps_recovery import RecoveringSession
    from distrib.train.replicas.sync_replicas import _Accumulator
    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(np.zeros(2, np.float32), name="v")
        take = _Accumulator(v, dt.float32, [2]).take_grad(2)
    recoveries = []

    async def recover(sess) -> bool:
        recoveries.append(sess)
        return False
    sess = dt.Session(server.target, graph=g)
    riding = RecoveringSession(sess, recover, max_wait_secs=60)
    waiting = asyncio.create_task(riding.run(take))
    await asyncio.sleep(0.3)
    await asyncio.wait_for(sess.close(), GUARD)
    with pytest.raises(errors.SessionClosedError):
        await asyncio.wait_for(waiting, 10)
    assert recoveries == []

    with g.as_default():
        mon = dt.train.MonitoredSession(
            session_creator=dt.train.ChiefSessionCreator(master=server.target))
        async with mon:
            waiting = asyncio.create_task(mon.run(take))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await asyncio.wait_for(mon.close(), GUARD)
            with pytest.raises(errors.SessionClosedError):   # was: RuntimeError, recreating
                await asyncio.wait_for(waiting, 10)


async def test_a_step_whose_session_another_steps_recovery_closed_runs_again(server):
    """Two steps of one MonitoredSession: the second fails with UnavailableError
    and the session is recreated; the first, waiting in the old session, rides
    through to the new one (its session was closed by the recovery, not by the
    program), as it did while SessionClosedError was an UnavailableError."""
    from distrib.train.replicas.sync_replicas import _Accumulator

    class FailSecondRun(dt.train.SessionRunHook):
        runs = 0

        def before_run(self, run_context):
            self.runs += 1
            if self.runs == 2:
                raise errors.UnavailableError("the ps is gone", peer="/job:ps/task:0")
    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(np.zeros(2, np.float32), name="v")
        take = _Accumulator(v, dt.float32, [2]).take_grad(2)
        mon = dt.train.MonitoredSession(
            session_creator=dt.train.ChiefSessionCreator(master=server.target),
            hooks=[FailSecondRun()])
        async with mon:
            first = mon._inner
            waiting = asyncio.create_task(mon.run(take))
            await asyncio.sleep(0.3)
            await asyncio.wait_for(mon.run(v), GUARD)   # fails once, recovers, runs
            assert mon._inner is not first
            await asyncio.sleep(0.3)
            assert not waiting.done(), waiting          # waiting again, in the new session
            await asyncio.wait_for(mon.close(), GUARD)
            with pytest.raises(errors.SessionClosedError):
                await asyncio.wait_for(waiting, 10)


# -- no decision on an error's text -------------------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parent.parent / "distrib"


def _reads_text(node: ast.expr) -> bool:
    """``<x>.message``, ``str(<x>)``, or a method called on either (``.lower()``)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value            # e.message.lower() -> e.message
    if isinstance(node, ast.Attribute):
        return node.attr == "message"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "str" and len(node.args) == 1)


_REGEX_READS = {"search", "match", "fullmatch", "findall", "finditer"}


def _reads_message(node: ast.expr) -> bool:
    """``<x>.message``, or a method called on it (``.lower()``)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return isinstance(node, ast.Attribute) and node.attr == "message"


def _regex_on_message(node: ast.AST) -> bool:
    """``re.search(<pattern>, <x>.message)``, ``re.match`` and the like, or a
    compiled pattern's ``.search(<x>.message)``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in _REGEX_READS
            and any(_reads_message(a) for a in [*node.args, *(k.value for k in node.keywords)]))


def text_decisions(source: str, filename: str = "<source>") -> list[str]:
    """Every ``<expr> in <x>.message``, ``<expr> not in <x>.message``,
    ``<expr> in str(<x>)`` and ``re.search(<pattern>, <x>.message)`` (or
    ``re.match`` and the like) in ``source``, as ``file:line: code``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.In, ast.NotIn)) and _reads_text(right)
                for op, right in zip(node.ops, node.comparators)):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        elif _regex_on_message(node):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_catches_a_decision_on_an_errors_text() -> None:
    bad = '''
if FENCED not in exc.message:
    raise
if "restarted" in e.message.lower():
    pass
closed = SESSION_CLOSED in str(cause)
ok = UNREGISTERED in e.message or attempt
'''
    found = text_decisions(bad)
    assert [f.split(":")[1] for f in found] == ["2", "4", "6", "7"], found
    fine = '''
if isinstance(exc, FencedError):
    raise
logger.warning("stops: %s", exc.message)
ok = name in names and key not in table
'''
    assert text_decisions(fine) == []


def test_no_code_in_distrib_decides_on_an_errors_text() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found += text_decisions(path.read_text(), str(path.relative_to(ROOT.parent)))
    assert not found, ("decide on the error's class (distrib.errors), not its message's "
                       "text:\n" + "\n".join(found))


def test_no_module_imports_fencing_for_a_string() -> None:
    # the train modules used to import runtime/chief/fencing.py only for FENCED
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "distrib.runtime.chief.fencing":
                assert [a.name for a in node.names] == ["Fence"], (path, ast.unparse(node))


def test_the_scan_catches_a_regex_on_an_errors_message() -> None:
    bad = '''
if re.search(re.escape(device) + "$", exc.message):
    pass
m = re.match(PATTERN, e.message.lower())
hit = PATTERN.search(string=err.message)
'''
    assert [f.split(":")[1] for f in text_decisions(bad)] == ["2", "4", "5"]
    fine = '''
m = _DEVICE_RE.match(device)
width = len(_ANSI.sub("", line))
logger.warning("stops: %s", exc.message)
'''
    assert text_decisions(fine) == []


# -- the failed peer ----------------------------------------------------------------------

PS0, WORKER0, WORKER1 = "/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"


def test_peer_crosses_the_wire_and_is_absent_when_unset() -> None:
    e = errors.UnavailableError("connection lost", task=WORKER0, peer=PS0)
    assert (e.task, e.peer) == (WORKER0, PS0)
    assert str(e) == f"connection lost [on {WORKER0}]"   # the text does not change
    wire = errors.to_wire(e)
    assert wire == {"type": "UnavailableError", "message": "connection lost",
                    "task": WORKER0, "op": None, "peer": PS0}
    back = errors.from_wire(wire)
    assert type(back) is errors.UnavailableError and (back.task, back.peer) == (WORKER0, PS0)
    kind = errors.PeerRestartedError("restarted", peer=WORKER1)
    assert errors.from_wire(errors.to_wire(kind)).peer == WORKER1
    for copied in (copy.copy(e), copy.deepcopy(e), pickle.loads(pickle.dumps(e)),
                   pickle.loads(pickle.dumps(kind))):
        assert copied.peer in (PS0, WORKER1) and str(copied) in (str(e), str(kind))
    # an error without one keeps its record as it was: no "peer" key at all
    plain = errors.to_wire(errors.NotFoundError("x missing", task=PS0))
    assert "peer" not in plain and errors.from_wire(plain).peer is None
    assert errors.NotFoundError(None, None, "tf form").peer is None


async def test_a_step_that_needs_a_killed_task_names_it_as_peer(tmp_path, monkeypatch) -> None:
    from distrib.train.replicas.sync_replicas import _Accumulator
    from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "2")
    spec = cluster_spec(host=1, ps=1)
    with cli_task(write_cluster(tmp_path, spec), "ps", 0) as ps:
        server = dt.Server(dt.ClusterSpec(spec), job_name="host", task_index=0)
        try:
            g = dt.Graph()
            with g.as_default(), dt.device(PS0):
                v = dt.Variable(np.zeros(2, np.float32), name="v")
                take = _Accumulator(v, dt.float32, [2]).take_grad(2)
                y = dt.reduce_sum(dt.constant([1.0, 2.0]))
            async with dt.Session(server.target, graph=g) as sess:
                assert await asyncio.wait_for(sess.run(y), GUARD) == 3.0
                waiting = asyncio.ensure_future(sess.run(take))   # waits on the ps
                await asyncio.sleep(0.5)
                assert not waiting.done(), "the take must wait: no gradient was applied"
                ps.kill()                                          # kill -9 mid-step
                with pytest.raises(errors.UnavailableError) as lost:
                    await asyncio.wait_for(waiting, GUARD)
                # the next step cannot reach it at all
                with pytest.raises(errors.UnavailableError) as unreachable:
                    await asyncio.wait_for(sess.run(y), GUARD)
        finally:
            server.stop()
    assert lost.value.peer == PS0, lost.value
    assert unreachable.value.peer == PS0, unreachable.value


def test_a_worker_aborted_for_another_tasks_failure_names_that_task() -> None:
    from distrib.runtime.actors.system import ActorSystem
    from distrib.runtime.step.worker import WorkerService
    worker = WorkerService(ActorSystem(WORKER1), WORKER1, [])
    cause = errors.UnavailableError("connection lost", task=WORKER0, peer=PS0)
    worker.abort_step(7, errors.to_wire(cause))
    with pytest.raises(errors.AbortedError) as e:
        worker.rendezvous.expect(7, "k")
    assert (e.value.task, e.value.peer) == (WORKER1, PS0)
    # a cause with no peer failed where it was raised: that task is the peer
    worker.abort_step(8, errors.to_wire(errors.InternalError("kernel failed", task=WORKER0)))
    with pytest.raises(errors.AbortedError) as e:
        worker.rendezvous.expect(8, "k")
    assert e.value.peer == WORKER0
    # a tensor from a restarted sender names the sender
    rv = Rendezvous(WORKER1)
    rv.begin(9, {PS0: 1})
    with pytest.raises(errors.PeerRestartedError) as e:
        rv.check(9, (1.0, PS0, 2))
    assert (e.value.task, e.value.peer) == (WORKER1, PS0)


def test_the_coordinator_blames_the_peer_not_the_text() -> None:
    from distrib.distribute.coordinator.cluster_coordinator import ClusterCoordinator

    class FakeStrategy:
        worker_devices = [WORKER0, WORKER1]
        ps_devices = [PS0, "/job:ps/task:1"]
    coord = ClusterCoordinator.__new__(ClusterCoordinator)
    coord.strategy, coord._devices = FakeStrategy(), FakeStrategy.worker_devices
    blame = coord._failed_task
    # no message below names a task: only peer and task decide
    assert blame(errors.UnavailableError("connection lost", peer=WORKER1)) == WORKER1
    assert blame(errors.UnavailableError("unreachable", task=WORKER0, peer=PS0)) == PS0
    assert blame(errors.UninitializedVariableError("no value", task=PS0)) == PS0
    assert blame(errors.AbortedError("aborted", task=WORKER0, peer=WORKER1)) == WORKER1
    assert blame(errors.AbortedError("aborted", task=PS0, peer=WORKER1)) == PS0   # a ps first
    assert blame(errors.AbortedError("aborted", task=WORKER1, peer="/job:chief/task:0")) \
        == WORKER1   # a peer not among ours: the task
    assert blame(errors.UnavailableError("lost /job:ps/task:0 /job:worker/task:1")) is None
