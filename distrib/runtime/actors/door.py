"""Doors: each actor service's messages, declared once as a small typed class.

An actor's public methods are its messages (:mod:`.system`), and a message
on the wire is a method name and a list of arguments. Called as
``ref.call("register_partition", ...)``, neither the name nor the arguments
are checked anywhere before the remote task reads them, and a reader cannot
jump from the call to its handler. A door is the service's declaration, as
TensorFlow's ``worker_service.proto`` is for its worker: one method per
message, with the handler's own parameter names and types and a one-line
docstring, so a call names a method an editor can follow and a wrong
argument fails at the caller with ``TypeError`` before anything is sent.
The method name appears as a string only inside the door (tests/test_doors.py
checks every door against its handler, and that no other module of distrib
sends a message by its literal name).

A door is also the receiver's whitelist: an actor is spawned with its door
(``ActorSystem.spawn(name, actor, door)``) and answers only the messages
the door declares (:meth:`Door.messages`), as a gRPC service answers only
the RPCs of its ``.proto``; any other name is ``UnimplementedError`` naming
the door, so an actor's public helpers (the master's ``add_task``) are not
reachable from the wire.

The rules a door keeps, each for a measured reason:
- A door method is one plain call in front of ``ActorRef.call`` / ``tell`` /
  ``request``; nothing else runs per message. A step sends its tensors and
  starts its partitions through doors (``recv_tensors``, ``run_partition``):
  those must cost no more than today's string call plus one Python call.
- A request of more than three arguments is a frozen dataclass the caller
  builds with named fields (``RegisterPartition(key=..., nodes=...)``); the
  door sends its fields positionally, in order, without a copy, so the wire
  stays the msgpack list of the same fields and the handler keeps its
  signature. The per-step messages are the exception: building a frozen
  dataclass costs 2-3 us (measured), more than the rule above allows, so
  ``run``, ``run_partition``, ``recv_tensor(s)`` and the collective ring's
  ``deliver`` keep flat typed parameters.
- ``timeout=`` (keyword only, on calls) passes through to the actor system:
  how long the caller waits for the reply. A tell takes none: nothing is
  awaited but the send.
- A door is made for one actor name (``actor``); a door built on a handle
  to another actor is refused at once.
"""
from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any, ClassVar, Self

from distrib.runtime.actors.system import ActorRef, ActorSystem

__all__ = ["Door", "request_args"]


class Door:
    """A typed handle on one actor; subclasses declare its messages."""

    __slots__ = ("ref",)
    actor: ClassVar[str] = ""   # the name the service is spawned under ("worker")

    def __init__(self, ref: ActorRef) -> None:
        if ref.name != self.actor:
            raise ValueError(f"{type(self).__name__} is the door of actor {self.actor!r}, "
                             f"not of {ref.name!r}: build it on a ref to {self.actor!r}")
        self.ref = ref

    @classmethod
    def at(cls, system: ActorSystem, address: str,
           peer: tuple[str, int] | None = None) -> Self:
        """The door of this actor at ``address`` (``peer``: the (name,
        incarnation) of the system there, when known; see ``ActorSystem.ref``)."""
        return cls(system.ref(address, cls.actor, peer))

    @classmethod
    def messages(cls) -> frozenset[str]:
        """The messages this door declares: its public methods and its bases'
        (each sends the message of its own name); what its actor answers."""
        found = _MESSAGES.get(cls)
        if found is None:
            names: set[str] = set()
            for klass in cls.__mro__:
                if issubclass(klass, Door) and klass is not Door:
                    names.update(n for n, v in vars(klass).items()
                                 if not n.startswith("_") and inspect.isfunction(v))
            found = _MESSAGES[cls] = frozenset(names)
        return found

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ref.address})"


_MESSAGES: dict[type, frozenset[str]] = {}


_FIELDS: dict[type, tuple[str, ...]] = {}


def request_args(req: Any, kind: type) -> list[Any]:
    """The fields of request ``req`` (a dataclass of type ``kind``) in order,
    as the handler's positional arguments; TypeError for anything else."""
    if type(req) is not kind:
        raise TypeError(f"expected a {kind.__name__} request, not {type(req).__name__}: "
                        f"build it with {kind.__name__}(...)")
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in fields(kind))
    return [getattr(req, n) for n in names]
