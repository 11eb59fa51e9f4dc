"""The doors (distrib/runtime/actors/door.py): every actor message is declared
once, matches its handler, fails at the caller when called wrongly, and is
sent by its literal name nowhere else in distrib.

- Each door's messages against the real service classes, the ones a server
  spawns under the door's actor name (read off a live ``ServerCore``): the
  handler exists and is public, the door's parameters (or its request
  dataclass's fields) equal the handler's in name, order and default, and
  the door sends the message under its own method name. Every public
  method of a service is a message of its door, or named here as not one.
- Doors whitelist: a server spawns each service with its door, and over a
  real connection the service refuses every public method its door does not
  declare (``UnimplementedError`` naming the door) and answers the rest.
- The client's ``MasterChannel`` declares the master's messages a session
  sends, the same as ``MasterDoor`` and the master's handlers.
- A wrong argument is a ``TypeError`` at the caller, before anything is sent
  (a recording stand-in for the ActorRef shows nothing went out).
- An AST scan: no module of distrib calls ``.call("...")`` / ``.tell("...")``
  / ``.request("...")`` with a literal method name outside the doors; its own
  test shows it catches one.
"""
from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import textwrap
from pathlib import Path
from typing import Any

import pytest

from distrib.client.channel import MasterChannel
from distrib.client.session import parse_target
from distrib.errors import UnimplementedError
from distrib.runtime.actors.door import Door
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.doors import Campaign, ChiefLeaseDoor, FenceDoor, MembershipDoor
from distrib.runtime.chief.lease import ChiefLease
from distrib.runtime.collective.doors import CollectiveDoor
from distrib.runtime.collective.engine import CollectiveEngine
from distrib.runtime.step.doors import MasterDoor, RegisterPartition, WorkerDoor
from distrib.runtime.step.master import MasterService
from distrib.runtime.step.master_channel import ActorMasterChannel
from distrib.runtime.step.worker import WorkerService
from distrib.server.doors import ServerDoor
from distrib.server.server_lib import Server, ServerCore

ROOT = Path(__file__).resolve().parent.parent
DOORS = [WorkerDoor, FenceDoor, MasterDoor, CollectiveDoor, ChiefLeaseDoor, ServerDoor,
         MembershipDoor]
# the public methods of a service that are not messages (helpers its own task calls)
NOT_MESSAGES = {
    "worker": {"detached", "peer", "on_stop"},
    "master": {"address_of", "worker", "add_task"},   # add_task: in process, on its loop
    "collective": {"start", "expect_tasks"},   # expect_tasks: in process (the strategy)
    "chief_lease": set(),
    "server": set(),
    "membership": {"at"},   # at: in process (the strategy on its own server)
}
SENDS = {"call", "tell", "request"}
# receivers whose .call("name") is not an actor message: keras' CallbackList
NOT_ACTORS = {"cbs", "callbacks"}


@pytest.fixture(scope="module")
def spawned() -> dict[str, type]:
    """Actor name -> the class of the actor a real server spawns under it."""
    found: dict[str, type] = {}
    spawn = ActorSystem.spawn

    def spy(self: ActorSystem, name: str, actor: Any, door: Any) -> Any:
        found[name] = type(actor)
        found[name + "/door"] = door
        return spawn(self, name, actor, door)

    async def start_and_stop() -> None:
        core = ServerCore({"local": ["127.0.0.1:0"]}, "local", 0)
        await core.start()
        await core.stop()

    ActorSystem.spawn = spy   # type: ignore[method-assign]
    try:
        asyncio.run(start_and_stop())
    finally:
        ActorSystem.spawn = spawn   # type: ignore[method-assign]
    return found


def messages(door: type) -> dict[str, Any]:
    """The messages a door declares (its own and its door bases')."""
    out: dict[str, Any] = {}
    for klass in reversed(door.__mro__):
        if isinstance(klass, type) and issubclass(klass, Door) and klass is not Door:
            out.update({n: f for n, f in vars(klass).items()
                        if inspect.isfunction(f) and not n.startswith("_")})
    return out


def message_params(fn: Any) -> list[tuple[str, Any]]:
    """(name, default) of what a door method sends: its parameters before the
    keyword-only ones, or the fields of the request dataclass it takes."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for p in list(sig.parameters.values())[1:] if p.kind is not p.KEYWORD_ONLY]
    if len(params) == 1 and dataclasses.is_dataclass(params[0].annotation):
        req = params[0].annotation
        assert req.__dataclass_params__.frozen and hasattr(req, "__slots__"), \
            f"{req.__name__} must be a frozen dataclass with slots"
        return [(f.name, inspect.Parameter.empty if f.default is dataclasses.MISSING
                 else f.default) for f in dataclasses.fields(req)]
    return [(p.name, p.default) for p in params]


def handler_params(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in list(inspect.signature(fn).parameters.values())[1:]]


def sent_name(fn: Any) -> tuple[str, str]:
    """(send kind, method name) of the one ActorRef send in a door method."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    sends = [(n.func.attr, n.args[0].value) for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in SENDS and n.args and isinstance(n.args[0], ast.Constant)]
    assert len(sends) == 1, f"{fn.__qualname__} must send exactly one message: {sends}"
    return sends[0]


def test_services_are_spawned_under_their_doors_names(spawned):
    assert spawned["worker"] is WorkerService
    assert spawned["master"] is MasterService
    assert spawned["collective"] is CollectiveEngine
    assert spawned["chief_lease"] is ChiefLease
    assert {d.actor for d in DOORS} <= set(spawned)
    for door in DOORS:
        if door is not FenceDoor:   # the worker's door is WorkerDoor, which extends it
            assert spawned[door.actor + "/door"] is door, door.actor
            assert door.messages() == frozenset(messages(door)), door.__name__


async def test_a_service_answers_only_its_doors_messages_over_a_real_connection():
    """A server on its own loop thread, called from this loop over TCP: every public
    method that is not a message is refused with the door's name; the connection and
    the server go on answering declared messages."""
    server = Server.create_local_server()
    system = await ActorSystem("/job:probe/task:0", listen=False).start()
    try:
        address = parse_target(server.target)
        refused = 0
        for door in DOORS:
            if door is FenceDoor:
                continue
            for name in sorted(NOT_MESSAGES[door.actor] - {"on_stop"}):
                with pytest.raises(UnimplementedError, match=rf"door {door.__name__}; "
                                                             rf"'{name}' is not one of them"):
                    await system.ref(address, door.actor).call(name, timeout=30)
                refused += 1
        assert refused >= 7   # the worker's detached and peer, the master's add_task, ...
        assert await WorkerDoor.at(system, address).ping(timeout=30) == "/job:local/task:0"
        assert (await ServerDoor.at(system, address).task(timeout=30)) == "/job:local/task:0"
        assert [c.kind for c in system.connections()] != []   # a real connection, kept
    finally:
        await system.shutdown()
        server.stop()


@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.__name__)
def test_each_message_matches_its_handler(door, spawned):
    service = spawned[door.actor]
    for name, fn in messages(door).items():
        handler = getattr(service, name, None)
        assert inspect.isfunction(handler), f"{door.__name__}.{name}: {service.__name__} has no " \
                                            f"method {name}"
        assert message_params(fn) == handler_params(handler), \
            f"{door.__name__}.{name} does not send what {service.__name__}.{name} takes"
        kind, sent = sent_name(fn)
        assert sent == name, f"{door.__name__}.{name} sends {sent!r}"
        keywords = [p.name for p in inspect.signature(fn).parameters.values()
                    if p.kind is p.KEYWORD_ONLY]
        if kind == "tell":
            assert keywords == [] and inspect.signature(fn).return_annotation == "None", \
                f"{door.__name__}.{name} is a tell: no timeout, returns None"
        else:
            assert keywords == ["timeout"], f"{door.__name__}.{name}: timeout= passes through"
        assert fn.__doc__ and "\n" not in fn.__doc__.strip(), \
            f"{door.__name__}.{name} needs a one-line docstring"


@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.__name__)
def test_every_message_of_a_service_has_a_door(door, spawned):
    if door is FenceDoor:
        return   # the chief wing's part of the worker's door
    service = spawned[door.actor]
    public = {n for n, f in inspect.getmembers(service, inspect.isfunction)
              if not n.startswith("_")}
    missing = public - set(messages(door)) - NOT_MESSAGES[door.actor]
    assert not missing, f"{service.__name__}'s messages {sorted(missing)} are not in " \
                        f"{door.__name__} (declare them, or list them in NOT_MESSAGES)"


def test_master_channel_is_the_masters_messages_a_session_sends():
    assert issubclass(ActorMasterChannel, MasterDoor)
    door = messages(MasterDoor)
    declared = {n for n, f in vars(MasterChannel).items()
                if inspect.isfunction(f) and not n.startswith("_")} - {"close"}
    assert declared == {"create_session", "extend_session", "run", "list_devices",
                        "close_session"}
    for name in declared:
        proto = getattr(MasterChannel, name)
        assert message_params(proto) == handler_params(getattr(MasterService, name)), name
        assert [(p.name, p.kind) for p in inspect.signature(proto).parameters.values()] == \
            [(p.name, p.kind) for p in inspect.signature(door[name]).parameters.values()], name


class _Recorder:
    """An ActorRef stand-in: what a door would have sent."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.address = "127.0.0.1:1"
        self.sent: list[tuple] = []

    async def call(self, method: str, *args: Any, timeout: float | None = 60.0) -> Any:
        self.sent.append(("call", method, list(args), timeout))

    async def tell(self, method: str, *args: Any) -> None:
        self.sent.append(("tell", method, list(args)))

    def request(self, method: str, *args: Any, timeout: float | None = 60.0) -> Any:
        self.sent.append(("request", method, list(args), timeout))
        return None


async def test_a_wrong_argument_fails_at_the_caller_before_anything_is_sent():
    worker = _Recorder("worker")
    door = WorkerDoor(worker)   # type: ignore[arg-type]
    with pytest.raises(TypeError):
        door.recv_tensors(1, [["k", 1.0]], "/job:ps/task:0")          # a missing argument
    with pytest.raises(TypeError):
        door.get_status(5.0)                                           # timeout is a keyword
    with pytest.raises(TypeError):
        door.run_partition("k", 1, {}, {}, {}, None, None, True, 7)    # one too many
    with pytest.raises(TypeError):
        door.abort_step(1, {}, timeout=1.0)                            # a tell has no timeout
    with pytest.raises(TypeError):
        RegisterPartition(key="s/1", nodes=[], fetchs=[])              # a misspelt field
    with pytest.raises(TypeError):
        await door.register_partition({"key": "s/1", "nodes": [], "fetches": []})
    with pytest.raises(TypeError):
        await ChiefLeaseDoor(_Recorder("chief_lease")).campaign(   # type: ignore[arg-type]
            RegisterPartition(key="s/1", nodes=[], fetches=[]))
    assert worker.sent == []


async def test_a_door_sends_the_handlers_arguments_in_order():
    worker = _Recorder("worker")
    door = WorkerDoor(worker)   # type: ignore[arg-type]
    node = {"name": "x", "op": "Const", "inputs": [], "attrs": {}}
    await door.register_partition(RegisterPartition(key="s/1", nodes=[node], fetches=["x:0"]),
                                  timeout=3.0)
    door.run_partition("s/1", 9, {}, {"/job:ps/task:0": 5}, {}, 2.0, 4, timeout=7.0)
    await door.recv_tensors(9, [["k", 1.0]], "/job:ps/task:0", 5)
    await door.fence(3)
    lease = _Recorder("chief_lease")
    await ChiefLeaseDoor(lease).campaign(   # type: ignore[arg-type]
        Campaign(candidate="/job:worker/task:1", incarnation=7, preferred=True))
    assert worker.sent == [
        ("call", "register_partition", ["s/1", [node], ["x:0"], False, None, False], 3.0),
        ("request", "run_partition", ["s/1", 9, {}, {"/job:ps/task:0": 5}, {}, 2.0, 4], 7.0),
        ("tell", "recv_tensors", [9, [["k", 1.0]], "/job:ps/task:0", 5]),
        ("call", "fence", [3], 60.0)]
    assert lease.sent == [("call", "campaign", ["/job:worker/task:1", 7, 0, False, True], 60.0)]


def test_a_door_refuses_a_ref_to_another_actor():
    with pytest.raises(ValueError, match="'worker'"):
        WorkerDoor(_Recorder("master"))   # type: ignore[arg-type]


async def test_a_door_reaches_a_live_service():
    async with _local_server() as core:
        system = await ActorSystem("/job:client/task:0", listen=False).start()
        try:
            address = core.system.address
            assert await WorkerDoor.at(system, address).ping() == core.task
            assert await ServerDoor.at(system, address).task() == core.task
            info = await MasterDoor.at(system, address).cluster_info()
            assert info["task"] == core.task
            state = await ChiefLeaseDoor.at(system, address).campaign(
                Campaign(candidate="/job:worker/task:1", incarnation=7, preferred=True))
            assert state["granted"] and state["term"] == 1
        finally:
            await system.shutdown()


def _local_server() -> Any:
    from distrib.server.server_lib import serve
    return serve({"local": ["127.0.0.1:0"]}, "local", 0)


# -- no message by its literal name outside the doors ------------------------------------------

def literal_sends(root: Path) -> list[str]:
    """'path:line: receiver.call("name")' for every send of a message by its
    literal name in a module of ``root/distrib`` other than the doors."""
    found = []
    for path in sorted((root / "distrib").rglob("*.py")):
        if path.name in ("doors.py", "door.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in SENDS and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                continue
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and receiver.id in NOT_ACTORS:
                continue
            found.append(f"{path.relative_to(root)}:{node.lineno}: "
                         f"{ast.unparse(node.func)}({node.args[0].value!r})")
    return found


def test_no_message_is_sent_by_its_literal_name_outside_the_doors():
    assert literal_sends(ROOT) == [], "send these through the service's door"


def test_the_literal_send_scan_catches_one(tmp_path):
    pkg = tmp_path / "distrib" / "train"
    pkg.mkdir(parents=True)
    (pkg / "loop.py").write_text(textwrap.dedent("""\
        async def f(system, ref, cbs):
            await ref.call("get_status", timeout=5.0)
            await system.ref("h:1", "worker").tell("recv_tensor", 1)
            await cbs.call("on_epoch_end", 1, {})
            ref.call(method)
        """))
    (pkg / "doors.py").write_text('async def g(ref):\n    await ref.request("run_partition")\n')
    assert literal_sends(tmp_path) == [
        "distrib/train/loop.py:2: ref.call('get_status')",
        "distrib/train/loop.py:3: system.ref('h:1', 'worker').tell('recv_tensor')"]
