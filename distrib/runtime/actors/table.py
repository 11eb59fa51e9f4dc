"""The actors one system serves, and the messages each answers.

An actor is spawned with its door (:mod:`.door`); the table keeps, per
actor, the door's name and its messages, and resolves an incoming message
to the actor's bound method. Anything the door does not declare is refused
with ``UnimplementedError`` naming the door, as a gRPC server answers an RPC
its ``.proto`` lacks with UNIMPLEMENTED: an actor's public helpers (the
master's ``add_task``) stay out of the wire's reach. A message's method is
looked up once and kept, so the whitelist costs a message one dict lookup,
not a ``getattr`` (the actor call is on every step's path: bench/transport.py's
``actor-call`` row).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from distrib.errors import NotFoundError, UnimplementedError

__all__ = ["ActorTable"]


class ActorTable:
    """Name -> actor, its door and its resolved messages (one per actor system)."""

    __slots__ = ("owner", "_actors", "_doors", "_handlers")

    def __init__(self, owner: str) -> None:
        self.owner = owner                                         # the system's name
        self._actors: dict[str, Any] = {}
        self._doors: dict[str, tuple[str, frozenset[str]]] = {}    # name -> (door, messages)
        self._handlers: dict[str, dict[str, Callable]] = {}       # name -> message -> bound

    def add(self, name: str, actor: Any, door: Any) -> None:
        """Serve ``actor`` as ``name``, answering the messages of ``door`` alone: a
        :class:`~.door.Door` class (its ``messages()``), or the names themselves (a
        test's or a bench's own actor). Each must be a public method of ``actor``."""
        if name in self._actors:
            raise ValueError(f"an actor named {name!r} already exists in {self.owner}")
        if hasattr(door, "messages"):
            label, messages = door.__name__, door.messages()
        else:
            messages = frozenset(door)
            label = f"[{', '.join(sorted(messages))}]"
        missing = sorted(m for m in messages if m.startswith("_")
                         or not callable(getattr(actor, m, None)))
        if missing:
            raise ValueError(f"{type(actor).__name__} spawned as {name!r} has no public method "
                             f"for the messages {missing} of its door {label}")
        self._actors[name] = actor
        self._doors[name] = (label, messages)
        self._handlers[name] = {}

    def actor(self, name: str) -> Any:
        """The actor spawned as ``name`` (KeyError if none)."""
        return self._actors[name]

    def actors(self) -> Iterable[Any]:
        """Every actor served, in spawn order (a new list)."""
        return list(self._actors.values())

    def method(self, actor_name: str, method: str) -> Callable:
        """The bound method that answers message ``method`` of actor ``actor_name``:
        ``NotFoundError`` for no such actor, ``UnimplementedError`` for a message its
        door does not declare."""
        handlers = self._handlers.get(actor_name)
        if handlers is None:
            raise NotFoundError(f"no actor named {actor_name!r} on {self.owner}", task=self.owner)
        fn = handlers.get(method)
        if fn is None:   # the first use of this message: bound once
            door, messages = self._doors[actor_name]
            if method not in messages:
                raise UnimplementedError(
                    f"actor {actor_name!r} on {self.owner} answers only the messages of its "
                    f"door {door}; {method!r} is not one of them (a caller of another "
                    "version, or a helper that is not a message)", task=self.owner)
            fn = handlers[method] = getattr(self._actors[actor_name], method)
        return fn
