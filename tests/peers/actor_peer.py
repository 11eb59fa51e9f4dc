"""A peer process for actor tests: one actor system with an "echo" actor.

Prints its address on the first line of stdout, then serves until stdin
closes (the test ends) or it is killed.
"""
from __future__ import annotations

import asyncio
import sys

import numpy as np
import uvloop

from distrib.errors import InvalidArgumentError
from distrib.runtime.actors.system import ActorSystem
from transports import TransportConfig


class Echo:
    def echo(self, x):
        return x

    def add(self, a, b):
        return np.asarray(a) + np.asarray(b)

    def fail(self, msg):
        raise InvalidArgumentError(f"bad: {msg}")

    def crash(self):
        raise ZeroDivisionError("boom")

    async def slow(self, seconds):
        await asyncio.sleep(seconds)
        return "done"

    def inbound_connections(self):
        return len(SYSTEM._inbound)

    async def call_back(self, address, value):
        # calls an actor of the caller's system: the path workers use to push tensors
        return await SYSTEM.ref(address, "echo").call("echo", value, timeout=10)

    async def tell_back(self, address, name, incarnation, value):
        # tells an actor of the caller's system, naming that system as a worker
        # names the task it pushes a tensor to; says which connections it has now
        await SYSTEM.ref(address, "counter", (name, incarnation)).tell("note", value)
        return {"outbound": sorted(SYSTEM._out), "inbound": len(SYSTEM._inbound)}


SYSTEM: ActorSystem
ECHO = ["echo", "add", "fail", "crash", "slow", "inbound_connections", "call_back", "tell_back"]


async def main() -> None:
    global SYSTEM
    mode = sys.argv[1] if len(sys.argv) > 1 else "auto"
    SYSTEM = ActorSystem("/job:peer/task:0", config=TransportConfig(mode=mode))
    await SYSTEM.start()
    SYSTEM.spawn("echo", Echo(), ECHO)
    print(SYSTEM.address, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    await SYSTEM.shutdown()


if __name__ == "__main__":
    uvloop.run(main())
