"""One run of a collective on one participant: its mailbox, its header, and
the two primitives every algorithm is written in (``send`` and ``recv``).

An instance is keyed by ``(group_key, group signature, instance_key, seq,
device)``: ``seq`` counts the runs of that instance key on that device, so the
nth run on one participant pairs with the nth run on the others, as a graph
that runs the same collective op every step needs. Messages may arrive before
the local op starts (a peer was quicker): they wait in the mailbox, keyed by
(sender rank, tag). An abort (a peer's failure, a mismatch, a deadline, a
step abort) fails every receive at once; an instance aborted before it
started here is remembered (a bounded tombstone), so the late participant
fails at once with the peers' error instead of waiting for messages that
will never come.

The header is what every participant checks against every other: the op,
the merge and final ops, shape, dtype and algorithm. A mismatch names both
devices and the field that differs.

Reductions (``MERGE``, ``finalize``) are numpy ufuncs run in place into the
receiver's own buffer, reading the sender's data where it arrived (a
read-only view of a shared-memory segment between co-located tasks).
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, Awaitable, Callable

import numpy as np

from distrib.errors import InvalidArgumentError, OpError

__all__ = ["InstanceKey", "Instance", "InstanceTable", "Exchange", "check_dtype", "MERGE", "FINAL_OPS", "finalize",
           "header_mismatch", "HEADER_FIELDS", "HEADER_TAG"]

# (group_key, group signature, instance_key, seq, device)
InstanceKey = tuple[int, int, int, int, str]

MERGE: dict[str, Callable] = {"Add": np.add, "Mul": np.multiply, "Min": np.minimum,
                              "Max": np.maximum}
FINAL_OPS = ("Id", "Div")
# the tag of the message every participant sends every other first
HEADER_TAG = -1
HEADER_FIELDS = ("op", "merge_op", "final_op", "shape", "dtype", "algorithm", "role")


def finalize(buf: np.ndarray, final_op: str, n: int) -> None:
    """Apply ``final_op`` in place (Div: by the group size; integers truncate
    toward zero, as TensorFlow's integer Div does)."""
    if final_op != "Div":
        return
    if buf.dtype.kind in "iu":
        q = np.abs(buf) // n
        np.copyto(buf, np.where(buf < 0, -q, q).astype(buf.dtype, copy=False))
    else:
        np.divide(buf, n, out=buf, casting="unsafe")


def header_mismatch(mine: list, theirs: list, me: str, them: str) -> str | None:
    """A sentence naming both participants and what differs, or None."""
    for name, a, b in zip(HEADER_FIELDS, mine, theirs):
        if name == "role":
            continue   # broadcast roles differ by design; checked by the engine
        if a != b:
            return (f"collective mismatch on {name}: {me} issued {name}={a!r} but "
                    f"{them} issued {name}={b!r}")
    return None


class Instance:
    """The state of one run of a collective on one device."""

    __slots__ = ("key", "slots", "error", "waiting", "phase", "started", "notify")

    def __init__(self, key: InstanceKey) -> None:
        self.key = key
        self.slots: dict[tuple[int, int], asyncio.Future] = {}
        self.error: OpError | None = None
        self.waiting: dict[int, int] = {}   # sender rank -> receives pending on it
        self.phase = "starting"
        self.started = False
        # called after every message and on failure, instead of a receiver
        # awaiting (a direct collective without a task: collective.direct)
        self.notify: Callable[[], None] | None = None

    def _slot(self, src: int, tag: int) -> asyncio.Future:
        fut = self.slots.get((src, tag))
        if fut is None:
            fut = self.slots[(src, tag)] = asyncio.get_running_loop().create_future()
        return fut

    def put(self, src: int, tag: int, payload: Any) -> None:
        if self.error is not None:
            return
        fut = self._slot(src, tag)
        if not fut.done():
            fut.set_result(payload)
        if self.notify is not None:
            self.notify()

    async def get(self, src: int, tag: int) -> Any:
        if self.error is not None:
            raise self.error
        fut = self._slot(src, tag)
        if not fut.done():
            self.waiting[src] = self.waiting.get(src, 0) + 1
            try:
                await fut
            finally:
                left = self.waiting[src] - 1
                if left:
                    self.waiting[src] = left
                else:
                    del self.waiting[src]
        self.slots.pop((src, tag), None)
        if self.error is not None:
            # the message came, then the instance failed before this waiter resumed
            # (a peer's header and its abort read from one socket buffer): the
            # instance's error (a mismatch naming both sides), not a KeyError
            raise self.error
        return fut.result()

    def take(self, src: int, tag: int) -> Any:
        """The message that ``ready`` says is here, taken out of the mailbox
        (raises the instance's error if it failed)."""
        if self.error is not None:
            raise self.error
        return self.slots.pop((src, tag)).result()

    def ready(self, src: int, tag: int) -> bool:
        """Whether ``get(src, tag)`` would return (or raise) without waiting."""
        fut = self.slots.get((src, tag))
        return self.error is not None or (fut is not None and fut.done())

    def fail(self, error: OpError) -> None:
        if self.error is not None:
            return
        self.error = error
        for fut in self.slots.values():
            if not fut.done():
                fut.set_exception(error)
                fut.exception()   # retrieved: a slot nobody awaits must not log noise
        self.slots.clear()
        if self.notify is not None:
            self.notify()


class InstanceTable:
    """The instances of one engine, live or waiting for their local start,
    and the tombstones of those aborted (bounded)."""

    MAX_EARLY = 4096

    def __init__(self) -> None:
        self.live: dict[InstanceKey, Instance] = {}
        self.early: OrderedDict[InstanceKey, Instance] = OrderedDict()

    def get(self, key: InstanceKey, start: bool = False) -> Instance:
        inst = self.live.get(key)
        if inst is not None:
            return inst
        inst = self.early.pop(key, None) if start else self.early.get(key)
        if inst is None:
            inst = Instance(key)
            if not start:
                self.early[key] = inst
                while len(self.early) > self.MAX_EARLY:
                    self.early.popitem(last=False)
        if start:
            inst.started = True
            self.live[key] = inst
        return inst

    def end(self, key: InstanceKey) -> None:
        self.live.pop(key, None)

    def groups_of(self, group_key: int) -> list[Instance]:
        return [i for k, i in self.live.items() if k[0] == group_key]


class Exchange:
    """What an algorithm sees: its rank, the group size, send/recv by rank,
    and how each peer is reached (``link``: "local" for a peer in this
    process, "shm" for one that maps our shared memory, else "tcp")."""

    __slots__ = ("rank", "size", "instance", "_send", "_link", "_links", "_send_now")

    def __init__(self, rank: int, size: int, instance: Instance,
                 send: Callable[[int, int, Any], Awaitable[None]],
                 link: Callable[[int], str] | None = None,
                 send_now: Callable[[int, int, Any], bool] | None = None) -> None:
        self.rank = rank
        self.size = size
        self.instance = instance
        self._send = send
        self._link = link
        self._links: dict[int, str] = {}
        self._send_now = send_now

    def send(self, dst: int, tag: int, payload: Any) -> Awaitable[None]:
        """Send ``payload`` to rank ``dst`` (the caller must not write into it
        afterwards: a peer in this process gets it by reference)."""
        return self._send(dst, tag, payload)

    def send_now(self, dst: int, tag: int, payload: Any) -> bool:
        """``send`` done at once, without a task, where the connection is open
        (True); False: nothing sent, use ``send``. For small messages only
        (it skips the connection's flow control)."""
        return self._send_now is not None and self._send_now(dst, tag, payload)

    def recv(self, src: int, tag: int) -> Awaitable[Any]:
        return self.instance.get(src, tag)

    def link(self, rank: int) -> str:
        """How rank ``rank`` is reached (asked once the header round opened it)."""
        kind = self._links.get(rank)
        if kind is None:
            kind = self._links[rank] = "local" if self._link is None else self._link(rank)
        return kind

    def near(self, rank: int) -> bool:
        """Whether ``rank`` maps this process's shared-memory arena arrays."""
        return self.link(rank) == "shm"


def check_dtype(dtype: np.dtype, op: str) -> None:
    if dtype.kind not in "biuf":
        raise InvalidArgumentError(f"{op} does not support dtype {dtype}")
