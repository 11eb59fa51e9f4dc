"""Chief election: a lease with terms on the arbiter, candidates that renew
it, and fencing at the ps tasks.

The arbiter's rules run on a fake clock (exact, instant); a simulation with
random pauses and delays checks the safety property (no two candidates ever
believe they are chief at the same moment, and every term has one holder);
the cluster tests run real servers on loopback with real actor systems.
"""
from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

import distrib as dt
from distrib.errors import AbortedError, FencedError, InvalidArgumentError
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.election import ChiefElection
from distrib.runtime.chief.lease import ChiefLease, task_rank

W = [f"/job:worker/task:{i}" for i in range(4)]
LEASE = 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def arbiter() -> tuple[ChiefLease, Clock]:
    clock = Clock()
    return ChiefLease("/job:ps/task:0", lease_s=LEASE, clock=clock), clock


def test_the_preferred_chief_gets_the_first_term_and_the_others_wait() -> None:
    lease, clock = arbiter()
    assert not lease.campaign(W[1], 11)["granted"]          # not preferred: waits out the grace
    assert not lease.campaign(W[2], 12)["granted"]
    got = lease.campaign(W[0], 10, preferred=True)
    assert got == {"granted": True, "term": 1, "holder": W[0], "lease_s": LEASE}
    clock.now += 1
    assert lease.campaign(W[1], 11)["holder"] == W[0]
    assert lease.campaign(W[0], 10, 1, True, True)["granted"]   # renewal: same term
    assert lease.term == 1


def test_a_cluster_that_never_had_a_chief_waits_for_the_preferred_one() -> None:
    lease, clock = arbiter()
    for _ in range(40):                                    # ten lease periods
        for w, inc in ((W[2], 12), (W[1], 11)):
            assert not lease.campaign(w, inc)["granted"]
        clock.now += LEASE / 4
    assert lease.campaign(W[0], 10, preferred=True)["granted"]
    assert (lease.term, lease.holder) == (1, (W[0], 10))


def test_a_silent_chief_loses_the_role_to_the_senior_live_worker_in_a_new_term() -> None:
    lease, clock = arbiter()
    lease.campaign(W[1], 11)
    lease.campaign(W[2], 12)
    assert lease.campaign(W[0], 10, preferred=True)["granted"]
    # worker 0 dies; it restarts (a new incarnation) and asks again at once
    for _ in range(int(LEASE) + 1):
        clock.now += 1
        lease.campaign(W[2], 12, 1)
        lease.campaign(W[1], 11, 1)
        lease.campaign(W[0], 20, 1, False, True)
    # the lease ran out; the restarted worker 0 ranks last, worker 1 first
    assert lease.holder == (W[1], 11) and lease.term == 2
    assert lease.grants == [(1, W[0], 10), (2, W[1], 11)]


def test_after_an_arbiter_restart_the_last_chief_keeps_the_role_in_a_higher_term() -> None:
    lease, clock = arbiter()                               # a fresh arbiter: no state
    assert not lease.campaign(W[0], 10, 7, False, True)["granted"]   # preferred, but...
    got = lease.campaign(W[2], 12, 7, True, False)         # ...worker 2 held term 7
    assert got["granted"] and got["term"] == 8


def test_a_resigning_chief_is_succeeded_at_once() -> None:
    lease, clock = arbiter()
    lease.campaign(W[1], 11)
    assert lease.campaign(W[0], 10, preferred=True)["granted"]
    assert lease.resign(W[0], 10) is True
    assert lease.campaign(W[1], 11, 1)["granted"]
    assert lease.term == 2
    assert lease.resign(W[0], 10) is False


@pytest.mark.parametrize("args", [("worker0", 1), (W[0], -1), (W[0], True), (W[0], 1, "2")])
def test_a_malformed_campaign_is_refused(args) -> None:
    lease, _ = arbiter()
    with pytest.raises(InvalidArgumentError):
        lease.campaign(*args)


def test_task_rank_orders_by_job_then_index() -> None:
    assert sorted(["/job:worker/task:10", "/job:worker/task:2"], key=task_rank) == \
        ["/job:worker/task:2", "/job:worker/task:10"]


@pytest.mark.parametrize("seed", range(6))
def test_no_two_candidates_ever_believe_they_are_chief_at_once(seed) -> None:
    """Candidates campaign every 1 s (heartbeat) with random message delays,
    pause for random stretches (a paused chief keeps no clock of its own
    running), die and restart. A candidate believes it is chief from when a
    grant reaches it until its own clock passes send time + lease."""
    rng = random.Random(seed)
    lease, clock = arbiter()
    cands = [{"name": w, "inc": i + 1, "next": rng.random(), "term": 0, "chief": False,
              "until": 0.0, "beliefs": []} for i, w in enumerate(W)]
    for c in cands:
        c["next"] += clock.now
    end = clock.now + 300
    while clock.now < end:
        c = min(cands, key=lambda c: c["next"])
        clock.now = c["next"]
        if rng.random() < 0.03:                      # a pause (or death) of 2-8 s
            c["next"] = clock.now + rng.uniform(2, 8)
            if rng.random() < 0.3:
                c["inc"] += 100                      # it died and came back
                c["chief"] = False
            continue
        sent = clock.now
        clock.now += rng.uniform(0, 0.3)             # delay to the arbiter
        got = lease.campaign(c["name"], c["inc"], c["term"], c["chief"], c["name"] == W[0])
        clock.now += rng.uniform(0, 0.3)             # delay back
        if got["granted"]:
            start = clock.now
            c["beliefs"].append((start, sent + got["lease_s"], got["term"]))
            c["chief"], c["term"] = True, got["term"]
        else:
            c["chief"], c["term"] = False, max(c["term"], got["term"])
        c["next"] = clock.now + 1.0
    spans = sorted((a, b, term, c["name"]) for c in cands for a, b, term in c["beliefs"] if b > a)
    for (a1, b1, t1, n1), (a2, b2, t2, n2) in zip(spans, spans[1:]):
        assert n1 == n2 or b1 <= a2, f"{n1} (term {t1}) and {n2} (term {t2}) overlap"
    holders: dict[int, tuple[str, int]] = {}
    for term, name, inc in lease.grants:
        assert holders.setdefault(term, (name, inc)) == (name, inc)
    assert [g[0] for g in lease.grants] == sorted({g[0] for g in lease.grants})
    assert len(lease.grants) >= 2                    # the role did move


# -- on real servers ---------------------------------------------------------------------------

@pytest.fixture
def cluster():
    servers: list[dt.Server] = []
    yield servers
    for s in servers:
        s.stop()


async def _candidates(ps: dt.Server, n: int, changes: list) -> list[ChiefElection]:
    out = []
    arbiter = ps.target.split("://", 1)[1]
    for i in range(n):
        system = await ActorSystem(f"{W[i]}", listen=False).start()
        out.append(ChiefElection(
            system, W[i], arbiter, {"/job:ps/task:0": arbiter}, preferred=i == 0,
            on_change=lambda chief, term, i=i: changes.append((i, chief, term)), every=0.3))
    return out


async def _stop(cands: list[ChiefElection]) -> None:
    for c in cands:
        await c.stop()
        await c.system.shutdown()


async def test_a_dead_chief_is_replaced_and_its_old_term_is_fenced_at_the_ps(
        cluster, monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")   # a loaded machine must not miss leases
    ps = dt.Server({"ps": ["localhost:0"]}, job_name="ps", task_index=0)
    cluster.append(ps)
    changes: list = []
    cands = await _candidates(ps, 3, changes)
    try:
        for c in cands:
            c.start()
        assert await cands[0].wait_decided(10)
        await asyncio.gather(*(c.wait_decided(10) for c in cands[1:]))
        assert [c.is_chief for c in cands] == [True, False, False]
        assert cands[1].holder == W[0] and cands[0].term == 1
        # the chief dies (no resignation): its campaign just stops
        cands[0]._task.cancel()
        for _ in range(200):
            if cands[1].is_chief or cands[2].is_chief:
                break
            await asyncio.sleep(0.05)
        # the senior of the two (the first to ask) took over, alone, in term 2
        (new,) = [c for c in cands[1:] if c.is_chief]
        assert new.term == 2
        # its lease ran out by its own clock: the old chief knows it is not chief
        assert not cands[0].is_chief
        # the ps saw term 2: a chief-only write of term 1 is refused there
        g = dt.Graph()
        with g.as_default(), dt.device("/job:ps/task:0"):
            v = dt.Variable(np.zeros(3, np.float32), name="fenced_v")
            init = v.initializer
        async with dt.Session(ps.target, graph=g) as sess:
            with pytest.raises(FencedError) as refused:
                await sess.run(init, options={"fencing_term": 1})
            assert isinstance(refused.value, AbortedError)   # users' except clauses catch it
            await sess.run(init, options={"fencing_term": 2})
            await sess.run(init)                       # no term: not a chief-only write
        status = ps._core.system.actor("chief_lease").status()
        assert [g[:2] for g in status["grants"]] == [[1, W[0]], [2, new.task]]
        assert changes[0] == (0, True, 1) and (cands.index(new), True, 2) in changes
    finally:
        await _stop(cands)


async def test_a_stale_candidate_that_finds_a_newer_term_at_a_ps_does_not_become_chief(
        cluster, monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")   # a loaded machine must not miss leases
    ps = dt.Server({"ps": ["localhost:0"]}, job_name="ps", task_index=0)
    cluster.append(ps)
    ps._core.worker.fencing.admit(9)          # as if a chief of term 9 had written there
    changes: list = []
    (cand,) = await _candidates(ps, 1, changes)
    try:
        assert await cand.campaign_once() is False
        assert changes == [] and not cand.is_chief
    finally:
        await _stop([cand])


async def test_a_bad_fencing_term_in_run_options_is_an_invalid_argument(server) -> None:
    g = dt.Graph()
    with g.as_default():
        c = dt.constant(1.0)
    async with dt.Session(server.target, graph=g) as sess:
        with pytest.raises(InvalidArgumentError, match="fencing_term"):
            await sess.run(c, options={"fencing_term": -3})


def test_a_restarted_preferred_chief_does_not_win_the_role_back() -> None:
    # the others first asked after term 1 was granted (the usual order: the
    # preferred chief is quickest); the restarted chief is still the junior
    lease, clock = arbiter()
    assert lease.campaign(W[0], 10, preferred=True)["granted"]
    clock.now += 0.5
    lease.campaign(W[2], 12, 1)
    lease.campaign(W[1], 11, 1)
    for _ in range(int(LEASE) + 1):                        # worker 0 died and restarted
        clock.now += 1
        lease.campaign(W[0], 20, 1, False, True)
        lease.campaign(W[2], 12, 1)
        lease.campaign(W[1], 11, 1)
    assert lease.holder[0] != W[0] and lease.term == 2
