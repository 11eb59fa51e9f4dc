"""A bad graph from a client is a typed error for that client; the server
keeps serving everyone else. GraphDefs are sent straight to the master
service, as a buggy or hostile client could."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from distrib.client.session import parse_target
from distrib.errors import InvalidArgumentError, NotFoundError, OpError
from distrib.runtime.actors.system import ActorSystem


def node(name, op, inputs=(), **attrs):
    return {"name": name, "op": op, "inputs": list(inputs), "device": "", "attrs": attrs}


BAD_GRAPHS = [
    ({"nodes": "not a list"}, ["x:0"], InvalidArgumentError),
    ({"nodes": [{"op": "Const"}]}, ["x:0"], InvalidArgumentError),
    ({"nodes": [node("x", "Add", ["ghost:0", "ghost:0"])]}, ["x:0"], NotFoundError),
    ({"nodes": [node("a", "Neg", ["b:0"]), node("b", "Neg", ["a:0"])]}, ["a:0"],
     InvalidArgumentError),
    ({"nodes": [node("x", "NoSuchOpType")]}, ["x:0"], NotFoundError),
    ({"nodes": [node("x", "Const", value=[1, [2, 3]], dtype="float32")]}, ["x:0"], OpError),
    ({"nodes": [node("x", "Const", value=np.ones(3, np.float32), dtype="float32"),
                node("y", "MatMul", ["x:0", "x:0"])]}, ["y:0"], InvalidArgumentError),
    ({"nodes": [node("x", "Const", value=1.0, dtype="float32", )]}, ["x:7"],
     InvalidArgumentError),
    ("not a dict", ["x:0"], InvalidArgumentError),
    # the runtime's internal ops are not for clients (a bad fused program
    # once wrote out of bounds and killed the server)
    ({"nodes": [node("x", "Const", value=np.ones(3, np.float32), dtype="float32"),
                node("y", "_FusedElementwise", ["x:0"], dtype="float32",
                     code=np.array([[1, 100000000, 0, 0, 0, 0]], np.int64), ops=["Add"],
                     imms=np.zeros(0), n_regs=1, fused=["y"])]}, ["y:0"],
     InvalidArgumentError),
    ({"nodes": [node("x", "_Recv", key="k", src_task="/job:a/task:0",
                     dst_task="/job:a/task:0", dtype="float32")]}, ["x:0"], InvalidArgumentError),
]

GOOD = {"nodes": [node("x", "Const", value=np.ones(3, np.float32), dtype="float32")]}
# (fetches, targets, feeds, options) of a run, each wrong in one way
BAD_RUNS = [
    (5, [], {}, None),
    (["x:0"], "x", {}, None),
    (["x:0"], [], {5: 1.0}, None),
    (["x:0"], [], [], None),
    (["x:0"], [], {}, [1]),
    (["x:0"], [], {}, {"operation_timeout_s": "soon"}),
    (["x:0"], [], {}, {"operation_timeout_s": -1}),
]


@pytest.mark.parametrize("fetches,targets,feeds,options", BAD_RUNS)
async def test_malformed_run_arguments_are_invalid_argument(server, fetches, targets, feeds,
                                                            options):
    system = await ActorSystem("client:bad", listen=False).start()
    try:
        master = system.ref(parse_target(server.target), "master")
        handle = await master.call("create_session", GOOD, {})
        with pytest.raises(InvalidArgumentError):
            await master.call("run", handle, fetches, targets, feeds, options)
        assert list(await master.call("run", handle, ["x:0"], [], {}, None))[0].sum() == 3.0
    finally:
        await system.shutdown()


@pytest.fixture(scope="module")
def server():
    s = dt.Server.create_local_server()
    yield s
    s.stop()


@pytest.mark.parametrize("graph_def,fetches,error", BAD_GRAPHS)
async def test_bad_graph_is_a_typed_error_and_the_server_keeps_serving(server, graph_def,
                                                                        fetches, error):
    system = await ActorSystem("client:bad", listen=False).start()
    try:
        master = system.ref(parse_target(server.target), "master")
        with pytest.raises(error):
            handle = await master.call("create_session", graph_def, {})
            await master.call("run", handle, fetches, [], {}, None)
    finally:
        await system.shutdown()
    with dt.Graph().as_default():
        async with dt.Session(server.target) as sess:
            assert await sess.run(dt.constant(2.0) * 21.0) == 42.0
