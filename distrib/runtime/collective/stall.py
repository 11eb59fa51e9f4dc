"""A stalled collective: late, or a mismatch that will never resolve?

A collective that waits past its stall time (``DISTRIB_COLLECTIVE_STALL_S``)
looks at what the members it waits for have sent it. Every member sends its
header to every other one as soon as it starts an instance (collective.small),
so the mailbox of an instance that has not started here holds the header of
each member that did. When this member waits in the header round of
instance ``k`` for member P, P has not started ``k`` (its header would be
here); when P's header for another instance ``k'`` is here and this member
has not issued ``k'``, P waits for this member in ``k'`` (it cannot end
without our header) while this member waits for P in ``k``: a *cross wait*.
That is what two workers that traced different functions do (different
instance keys, or the same keys in a different order): each waits for ever
for the other, and only what they sent each other shows it.

A cross wait is a mismatch unless something still to run issues ``k`` on P
or ``k'`` here (two independent collectives of one step that a slow kernel
holds back on one worker). So the stall warning names it, and the next stall
check fails the collective if the same cross wait is still there: the
mismatch is an error within two stall times, never a hang, and a slow kernel
shorter than a stall time is never mistaken for one. A collective with a
``timeout`` looks once more at its deadline: it fails there anyway, and a
cross wait then makes the error the mismatch (``InvalidArgumentError`` on
every side), not a ``DeadlineExceededError`` that hides it. The error names both
members and what each issued; it fails this member's instance and P's
(``abort_instance``), so every side of the mismatch fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from distrib import errors
from distrib.errors import InvalidArgumentError
from distrib.runtime.collective.group import Group
from distrib.runtime.collective.instance import HEADER_TAG, Instance, InstanceKey, InstanceTable

__all__ = ["CrossWait", "StallCheck", "find_cross_wait", "describe_header"]


@dataclass(frozen=True)
class CrossWait:
    """Member ``peer`` (a device of ``group``) issued instance ``key`` (as this
    member's mailbox keys it) that this member has not, and sent ``header``."""

    peer: str
    group: Group
    key: InstanceKey
    header: Any

    @property
    def sig(self) -> tuple:
        return (self.peer, self.key)

    def text(self, mine: Instance, me: str, what: str) -> str:
        """A sentence naming both sides: ``what`` is this member's op."""
        _, _, ik, seq, _ = mine.key
        gk, _, pik, pseq, _ = self.key
        return (f"collective mismatch in group {gk}: {me} issued {what} instance_key={ik} "
                f"(run {seq + 1} of that key) and waits for {self.peer}, which issued "
                f"{describe_header(self.header)} instance_key={pik} (run {pseq + 1}) instead, "
                f"and waits for {me} in it: the members run different collectives (different "
                "traced functions, or the same collectives in a different order); every "
                "worker must build the same steps in the same order, as collective keys "
                "follow build order")

    def hint(self) -> str:
        """For a stall warning: what the peer waits for instead."""
        _, _, pik, pseq, _ = self.key
        return (f"; {self.peer} issued {describe_header(self.header)} instance_key={pik} "
                f"(run {pseq + 1}) instead and waits there for this member, which has not "
                "issued it: a mismatch, failed at the next stall check unless it clears")

    def error(self, mine: Instance, me: str, what: str, task: str) -> InvalidArgumentError:
        return InvalidArgumentError(self.text(mine, me, what), task=task,
                                    peer=self.peer.split("/replica:")[0])


def describe_header(header: object) -> str:
    """``CollectiveReduce of shape [4] float32`` from a header (collective.instance)."""
    if not isinstance(header, list) or len(header) < 5:
        return "a collective"
    op, shape, dtype = header[0], header[3], header[4]
    try:
        dtype = np.dtype(dtype).name
    except TypeError:
        pass
    return f"{op} of shape {list(shape) if isinstance(shape, list) else shape} {dtype}"


def find_cross_wait(table: InstanceTable, groups: dict[int, Group], inst: Instance,
                    group: Group, issued: Callable[[InstanceKey], bool]) -> CrossWait | None:
    """The cross wait of ``inst`` (see the module header), else None.
    ``issued(key)``: whether this member started that run already."""
    if inst.phase != "header round" or not inst.waiting:
        return None
    late = {group.members[r].device for r in inst.waiting if r < group.size}
    device = inst.key[4]
    for key, early in list(table.early.items()):
        if early.error is not None or key[4] != device or issued(key):
            continue
        other = groups.get(key[0])
        if key[0] == group.key and key[1] == group.sig:
            other = group
        if other is None or other.sig != key[1]:
            continue
        for (src, tag), fut in list(early.slots.items()):
            if tag != HEADER_TAG or not fut.done() or fut.cancelled() \
                    or fut.exception() is not None or src >= other.size:
                continue
            peer = other.members[src].device
            if peer in late:
                msg = fut.result()
                header = msg[0] if isinstance(msg, list) and msg else None
                return CrossWait(peer, other, key, header)
    return None


class StallCheck:
    """An engine's stall check, called at each stall warning of a collective
    (task path and direct path alike): ``check(spec, watch)`` is the
    mismatch's error when the same cross wait was there at the previous
    check (the peer's instance is failed too; the caller fails its own),
    else None, with the cross wait kept in ``watch.suspect`` for the warning.
    ``final``: the collective's deadline has come, and it fails either way:
    a cross wait there now is the mismatch it reports."""

    def __init__(self, task: str, table: InstanceTable, groups: dict[int, Group],
                 issued: Callable[[InstanceKey], bool],
                 tell_abort: Callable[[Any, list, dict], None]) -> None:
        self.task = task
        self.table = table
        self.groups = groups            # the engine's own dict (it changes in place)
        self.issued = issued            # (key) -> whether this engine started that run
        self.tell_abort = tell_abort    # (member, key, wire error): fail it there

    def __call__(self, spec: Any, watch: Any, final: bool = False
                 ) -> InvalidArgumentError | None:
        inst, group = watch.instance, watch.group
        if inst is None or group is None or inst.error is not None:
            return None
        found = find_cross_wait(self.table, self.groups, inst, group, self.issued)
        before, watch.suspect = watch.suspect, found
        if found is None or (not final and (before is None or before.sig != found.sig)):
            return None
        err = found.error(inst, spec.device, f"{spec.op} {spec.name!r}", self.task)
        early = self.table.early.get(found.key)
        if early is not None:
            early.fail(err)   # issued here later, it fails at once as the peer's did
        gk, sig, ik, seq, _ = found.key
        wire = errors.to_wire(err, task=self.task)
        for m in found.group.members:
            if m.device != spec.device:
                self.tell_abort(m, [gk, sig, ik, seq, m.device], wire)
        return err
