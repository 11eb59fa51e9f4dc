"""The group leader's wait for the tasks a group names (collective.group,
collective.registration), in one process with a stand-in for the probe that
reaches a task; the real-process tests are in tests/test_mwms.py.

- A task not reached yet may still be starting: it is probed again (with
  backoff) and fails the group only after ``DISTRIB_REGISTER_TIMEOUT_S``,
  naming it and the setting; one that starts within it joins.
- A task that was reached and then lost before the group waits for it (a
  worker that exited before the chief's save) fails the group within the
  rejoin grace, naming it.
- A member waiting for its group leader to start stops waiting, with the
  reason, once the leader it had heard is lost (it is not starting) or its
  own system stopped: not after the registration bound.
- Every fixed group key of distrib/distribute (a group of the strategy's
  worker tasks: its all-reduces, the preemption agreement, a save's) is one
  that MultiWorkerMirroredStrategy names its tasks for.
"""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from distrib.distribute.strategies.collective import WORKER_GROUP_KEYS
from distrib.errors import UnavailableError
from distrib.runtime.collective.group import GroupLeader, Member
from distrib.runtime.collective.registration import Sayer, reach_until_registered

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["/job:worker/task:0", "/job:worker/task:1"]


def member(t: int, incarnation: int = 1) -> Member:
    return Member(f"/job:worker/replica:0/task:{t}/device:CPU:0", TASKS[t], f"h:{t}",
                  incarnation)


def refused(task: str) -> asyncio.Future:
    """A probe of a task that does not listen (yet)."""
    fut = asyncio.get_running_loop().create_future()
    fut.set_exception(UnavailableError(f"could not reach {task}: connection refused"))
    return fut


async def test_a_task_that_never_starts_fails_the_group_after_the_registration_bound(
        monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_REGISTER_TIMEOUT_S", "1.5")
    probes: list[str] = []

    def reach(task: str) -> asyncio.Future:
        probes.append(task)
        return refused(task)
    leader = GroupLeader(TASKS[0], reach)
    waiter = leader.join(7, 2, member(0), TASKS)
    with pytest.raises(UnavailableError, match="DISTRIB_REGISTER_TIMEOUT_S") as info:
        await asyncio.wait_for(waiter, 10)
    assert info.value.peer == TASKS[1] and "start every task" in str(info.value)
    assert len(probes) >= 3 and set(probes) == {TASKS[1]}   # probed again, not failed at once


async def test_a_task_that_starts_late_joins_and_the_group_forms() -> None:
    tries = []

    def reach(task: str) -> asyncio.Future:
        tries.append(task)
        if len(tries) < 3:
            return refused(task)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(task)
        return fut
    leader = GroupLeader(TASKS[0], reach)
    waiter = leader.join(7, 2, member(0), TASKS)
    while len(tries) < 3:
        await asyncio.sleep(0.05)
        assert not waiter.done(), waiter
    members = await asyncio.wait_for(leader.join(7, 2, member(1), TASKS), 10)
    assert await waiter == members and len(members) == 2


async def test_a_task_lost_before_the_group_waits_for_it_fails_it_within_the_grace(
        monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.2")
    probes: list[asyncio.Future] = []

    def reach(task: str) -> asyncio.Future:   # a connect to a dead task: refused for long
        probes.append(asyncio.ensure_future(asyncio.sleep(30)))
        return probes[-1]
    leader = GroupLeader(TASKS[0], reach)
    for t in (0, 1):   # the group of the steps: both joined, it formed
        leader.join(7, 2, member(t), TASKS)
    leader.lost(TASKS[1], 1)   # worker 1 exited
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(UnavailableError, match="task:1") as info:   # the save's own group
            await asyncio.wait_for(leader.join(9, 2, member(0), TASKS), 10)
    finally:
        for p in probes:
            p.cancel()
    assert info.value.peer == TASKS[1]
    assert loop.time() - started < 5.0


async def test_waiting_for_a_leader_ends_once_it_is_known_gone(monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_REGISTER_TIMEOUT_S", "600")
    tries: list[int] = []
    lost = UnavailableError("the collective group leader /job:worker/task:0 stopped or "
                            "crashed", peer=TASKS[0])

    async def ping() -> None:
        tries.append(1)
        raise UnavailableError(f"could not reach {TASKS[0]}: connection refused")

    def gone() -> UnavailableError | None:
        return lost if len(tries) >= 2 else None   # heard, then lost, after two tries
    with pytest.raises(UnavailableError, match="stopped or crashed") as raised:
        await asyncio.wait_for(reach_until_registered(ping, TASKS[0], "group 7", TASKS[1],
                                                      Sayer(), gone), 30)
    assert raised.value is lost and len(tries) == 2


def test_every_fixed_group_key_of_the_strategys_steps_names_its_tasks() -> None:
    keys = {}
    for path in sorted((ROOT / "distrib" / "distribute").rglob("*.py")):
        for name, value in re.findall(r"^(\w*GROUP_KEY)\s*=\s*(\d+)\b", path.read_text(),
                                      re.MULTILINE):
            keys[f"{path.name}:{name}"] = int(value)
    assert len(keys) >= 3, keys
    missing = {k: v for k, v in keys.items() if v not in WORKER_GROUP_KEYS}
    assert not missing, (f"fixed group keys not in strategies/collective.py's WORKER_GROUP_KEYS "
                         f"(a lost worker would hang their groups): {missing}")
