"""The graph optimizer (distrib.runtime.step.graph_optimizer) and the fused
CPU kernel (kernels.cpu.fused): each pass on small graphs, its switches,
exactness against the unoptimized graph (bit for bit, or within the ulp
bound where the docs say so), what must survive (fetched, fed, stateful,
random, control dependencies), numba's on-disk cache across processes, and
sessions on a real server with the optimizer on and off."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distrib as dt
from distrib.errors import InvalidArgumentError
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.executor import CompiledPartition
from distrib.runtime.step.graph_optimizer import Passes, optimize_nodes, resolve_passes
from distrib.runtime.step.plan import partition, place, prune, tensor_op
from kernels.cpu import fused as cpu_fused
from kernels.registry import KernelError
from tests.helpers import child_env

ROOT = Path(__file__).resolve().parents[1]
NONE = Passes(False, False, False, False, False, False, False)
AGGRESSIVE_FUSION = Passes(aggressive_fusion=True)
ALL = Passes()


def _partition(fetches, feeds=(), targets=()):
    g = dt.get_default_graph()
    nodes = {n["name"]: n for n in g.as_graph_def()["nodes"]}
    names = [t.name for t in fetches]
    fed = [t.name for t in feeds]
    tnames = [t.name for t in targets]
    order = prune(nodes, names, tnames, fed)
    placed = place(nodes, order, default_job="local", default_task=0, tasks={"local": [0]})
    (part,) = partition(nodes, order, placed, names, fed, tnames).values()
    return part, nodes, {tensor_op(n)[0] for n in names} | set(tnames)


def _optimized(fetches, feeds=(), targets=(), passes=ALL):
    part, nodes, preserve = _partition(fetches, feeds, targets)
    return optimize_nodes(part.nodes, nodes, preserve, passes, part.feeds), part.fetches


def _run(node_list, fetch_names, feeds, store=None):
    feeds = {t.name: np.asarray(v) for t, v in feeds.items()}
    compiled = CompiledPartition(node_list, fetch_names, soft_placement=True, feeds=list(feeds))
    return asyncio.run(compiled.run(feeds, store or VariableStore("/job:local/task:0")))


def _both(fetches, feeds, passes=ALL, targets=()):
    """(unoptimized results, optimized results, optimized nodes)."""
    opt, names = _optimized(fetches, list(feeds), targets, passes)
    plain, _ = _optimized(fetches, list(feeds), targets, NONE)
    return _run(plain, names, feeds), _run(opt, names, feeds), opt


def _ops(nodes):
    return [n["op"] for n in nodes]


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(autouse=True, scope="module")
def compiled_kernels():
    """The fused kernel's interpreter ready (a first run otherwise takes the
    numpy path while a thread loads numba), so the tests compare numba's
    results with numpy's."""
    assert cpu_fused.prepare("float32") and cpu_fused.prepare("float64")


@pytest.fixture
def graph():
    g = dt.Graph()
    with g.as_default():
        yield g


# -- switches ---------------------------------------------------------------------------------
def test_passes_follow_config_proto_and_the_setting():
    def wire(**kw):
        return dt.ConfigProto(graph_options=dt.GraphOptions(**kw)).as_dict()["graph_options"]

    assert resolve_passes(None, {}) == ALL == resolve_passes(wire(), {})
    rc = dt.RewriterConfig
    for field, attr in (("constant_folding", "constant_folding"), ("remapping", "fusion"),
                        ("arithmetic_optimization", "arithmetic"),
                        ("dependency_optimization", "pruning"),
                        ("common_subgraph_elimination", "common_subgraph_elimination")):
        p = resolve_passes(wire(rewrite_options=rc(**{field: rc.OFF})), {})
        assert getattr(p, attr) is False
        assert sum(getattr(p, f) for f in ("constant_folding", "fusion", "arithmetic", "pruning",
                                           "common_subgraph_elimination")) == 4
    assert resolve_passes(wire(rewrite_options=rc(arithmetic_optimization=rc.AGGRESSIVE)),
                          {}).aggressive_arithmetic
    assert resolve_passes(wire(rewrite_options=rc(remapping=rc.AGGRESSIVE)), {}).aggressive_fusion
    assert not resolve_passes(wire(rewrite_options=rc(disable_model_pruning=True)), {}).pruning
    l0 = resolve_passes(wire(optimizer_options=dt.OptimizerOptions(
        opt_level=dt.OptimizerOptions.L0)), {})
    assert not l0.constant_folding and not l0.common_subgraph_elimination and l0.fusion
    on = resolve_passes(wire(optimizer_options=dt.OptimizerOptions(do_constant_folding=False),
                             rewrite_options=rc(constant_folding=rc.ON)), {})
    assert on.constant_folding
    assert not resolve_passes(wire(), {"DISTRIB_GRAPH_OPTIMIZER": "off"}).any
    with pytest.raises(InvalidArgumentError, match="Toggle"):
        resolve_passes({"rewrite_options": {"remapping": 7}}, {})
    with pytest.raises(ValueError, match="Toggle"):
        rc(remapping=7)
    cfg = dt.ConfigProto(graph_options={"rewrite_options": {"remapping": rc.OFF}})
    assert cfg.graph_options.rewrite_options.remapping == rc.OFF


# -- the passes, one at a time ----------------------------------------------------------------
def test_common_subgraph_elimination_merges_equal_nodes(graph):
    x = dt.placeholder(dt.float32, [3])
    a = dt.exp(x * 2.0) + dt.exp(x * 2.0)
    b = dt.exp(x * -0.0) + dt.exp(x * 0.0)   # -0.0 and 0.0 are different constants
    feeds = {x: np.array([0.5, -1.0, 3.0], np.float32)}
    only = Passes(True, False, False, False, False, False)
    plain, opt, nodes = _both([a, b], feeds, only)
    assert all(_same_bits(p, o) for p, o in zip(plain, opt))
    assert _ops(nodes).count("Exp") == 3 and _ops(nodes).count("Mul") == 3
    off, _ = _optimized([a, b], list(feeds), passes=NONE)
    assert _ops(off).count("Exp") == 4


def test_constant_folding_is_exact_and_leaves_state_and_randomness(graph):
    x = dt.placeholder(dt.float32, [2])
    c = dt.sqrt(dt.constant([2.0, 3.0]) * 1.5 + 0.25)
    v = dt.Variable([1.0, 2.0])
    r = dt.random_uniform([2], seed=3)
    y = x * c + v * 2.0 + r * 0.0
    only = Passes(False, True, False, False, False, False)
    nodes, names = _optimized([y, c], [x], passes=only)
    assert _ops(nodes).count("Sqrt") == 0 and "VariableV2" in _ops(nodes)
    assert "RandomUniform" in _ops(nodes)
    assert next(n for n in nodes if n["name"] == c.op.name)["op"] == "Const"   # fetched: same name
    want = np.sqrt(np.array([2.0, 3.0], np.float32) * np.float32(1.5) + np.float32(0.25))
    folded = next(n for n in nodes if n["name"] == c.op.name)["attrs"]["value"]
    assert _same_bits(folded, want)
    with dt.control_dependencies([x]):
        guarded = dt.constant(1.0) + 1.0
    nodes, _ = _optimized([guarded], [x], passes=only)
    assert "Add" in _ops(nodes)   # a control input keeps it a run-time op


def test_constant_folding_never_computes_a_result_over_the_limit(graph):
    import tracemalloc

    big = dt.ones([16384, 1024])                  # 64 MiB: over the 10 MiB limit
    y = dt.reduce_sum(big) + 1.0
    small = dt.reduce_sum(dt.ones([4, 4]))        # folded as before
    only = Passes(False, True, False, False, False, False)
    tracemalloc.start()
    try:
        nodes, _ = _optimized([y, small], passes=only)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak   # the 64 MiB array was never built, not built and dropped
    by_name = {n["name"]: n for n in nodes}
    assert by_name[big.op.name]["op"] == "Ones" and by_name[small.op.name]["op"] == "Const"
    # a declared shape that understates the attrs' (a client's graph) is not trusted
    lying = {**by_name[big.op.name], "output_shapes": [[1]]}
    tracemalloc.start()
    try:
        out = optimize_nodes([lying], {}, {lying["name"]}, only)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out[0]["op"] == "Ones" and peak < 8 << 20, peak


def test_exact_arithmetic_rewrites(graph):
    x = dt.placeholder(dt.float32, [4])
    ys = [x * 1.0, 1.0 * x, x / 1.0, x + dt.constant(-0.0), x - 0.0]
    keep = x + 0.0          # -0.0 + 0.0 is +0.0: not x, so kept unless aggressive
    out = dt.add_n(ys)
    feeds = {x: np.array([-0.0, 1.5, np.inf, np.nan], np.float32)}
    only = Passes(False, False, True, False, True, False)
    plain, opt, nodes = _both(ys + [keep, out], feeds, only)
    assert all(_same_bits(p, o) for p, o in zip(plain, opt))
    assert _same_bits(opt[5][:1], np.float32([0.0]))
    # the fetched ones became Identity (their names stay); the sum reads x directly
    assert _ops(nodes).count("Mul") == 0 and _ops(nodes).count("RealDiv") == 0
    by_name = {n["name"]: n["op"] for n in nodes}
    assert [by_name[t.op.name] for t in ys] == ["Identity"] * 5
    assert by_name[keep.op.name] == "Add" and _ops(nodes).count("Sub") == 0
    aggressive = Passes(False, False, True, True, True, False)
    nodes, _ = _optimized([keep], [x], passes=aggressive)
    assert _ops(nodes) == ["Identity"]


def test_integer_multiply_chains_fold_exactly_with_wraparound(graph):
    x = dt.placeholder(dt.int32, [3])
    y = x
    for c in (7, 123456, -3, 99991):
        y = y * c
    feeds = {x: np.array([1, -5, 2**30], np.int32)}
    plain, opt, nodes = _both([y], feeds, Passes(False, True, True, False, True, False))
    assert _same_bits(plain[0], opt[0])
    assert _ops(nodes).count("Mul") == 1


def test_float_multiply_chains_fold_only_when_aggressive(graph):
    x = dt.placeholder(dt.float32, [4])
    y = x
    for _ in range(50):
        y = y * 1.0001
    feeds = {x: np.array([1.0, -3.0, 1e-3, 7e30], np.float32)}
    arith = Passes(True, True, True, False, True, False)
    plain, opt, nodes = _both([y], feeds, arith)
    assert _ops(nodes).count("Mul") == 50 and _same_bits(plain[0], opt[0])
    aggressive = Passes(True, True, True, True, True, False)
    plain, opt, nodes = _both([y], feeds, aggressive)
    assert _ops(nodes) == ["Const", "Mul"]
    ulp = np.spacing(np.abs(plain[0]))
    assert np.all(np.abs(opt[0] - plain[0]) <= 50 * ulp)


def test_pruning_keeps_targets_and_effects(graph):
    x = dt.placeholder(dt.float32, [2])
    v = dt.Variable([0.0, 0.0])
    bump = v.assign_add([1.0, 1.0])
    target = dt.identity(x * 3.0, name="pure_target")
    one = x * 1.0
    y = one * 2.0
    part, nodes, preserve = _partition([y], [x], [bump.op, target.op])
    opt = optimize_nodes(part.nodes, nodes, preserve, ALL)
    names = {n["name"] for n in opt}
    assert bump.op.name in names and "pure_target" in names and y.op.name in names
    one_const = tensor_op(nodes[one.op.name]["inputs"][1])[0]
    assert one.op.name not in names and one_const not in names


# -- fusion -----------------------------------------------------------------------------------
_exact = st.sampled_from(["Add", "Sub", "Mul", "RealDiv", "Neg", "Abs", "Square", "Sqrt"])
_values = st.one_of(st.floats(width=32), st.sampled_from([0.0, -0.0, 1e-45, -1e-40, 3e38]))


def _chain(x, ops, other):
    y = x
    fns = {"Add": lambda a: a + other, "Sub": lambda a: other - a, "Mul": lambda a: a * other,
           "RealDiv": lambda a: a / other, "Neg": lambda a: -a, "Abs": dt.abs,
           "Square": dt.square, "Sqrt": dt.sqrt, "Exp": dt.exp, "Log": dt.log,
           "Tanh": dt.tanh, "Sigmoid": dt.sigmoid}
    for op in ops:
        y = fns[op](y)
    return y


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(_exact, min_size=2, max_size=12),
       xs=st.lists(_values, min_size=5, max_size=5), k=_values,
       dtype=st.sampled_from([np.float32, np.float64]))
def test_fused_exact_chains_are_bit_for_bit(ops, xs, k, dtype):
    with dt.Graph().as_default():
        x = dt.placeholder(dt.as_dtype(dtype), [5])
        other = dt.placeholder(dt.as_dtype(dtype), [5])
        y = _chain(x, ops, other * dt.constant(np.asarray(k, dtype)))
        feeds = {x: np.array(xs, dtype), other: np.array(xs[::-1], dtype)}
        with np.errstate(all="ignore"):
            plain, opt, nodes = _both([y], feeds)
    assert "_FusedElementwise" in _ops(nodes)
    assert _same_bits(plain[0], opt[0]), (ops, plain[0], opt[0])


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(["Exp", "Log", "Tanh", "Sigmoid"]),
       xs=st.lists(st.floats(-80, 80, width=32), min_size=6, max_size=6),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_fused_transcendentals_only_when_aggressive_and_within_4_ulp(op, xs, dtype):
    with dt.Graph().as_default():
        x = dt.placeholder(dt.as_dtype(dtype), [6])
        y = _chain(dt.abs(x) if op == "Log" else x, [op, "Neg"], None)
        with np.errstate(all="ignore"):
            _, _, exact = _both([y], {x: np.array(xs, dtype)})
            plain, opt, nodes = _both([y], {x: np.array(xs, dtype)}, AGGRESSIVE_FUSION)
    assert op in _ops(exact) and "_FusedElementwise" in _ops(nodes)
    a, b = plain[0], opt[0]
    both_inf = np.isinf(a) & (a == b)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    assert np.all(both_inf | (diff <= 4 * np.spacing(np.abs(a)))), (op, a, b)


def test_fusion_keeps_fetched_fed_and_control_members(graph):
    x = dt.placeholder(dt.float32, [3])
    v = dt.Variable([1.0, 2.0, 3.0])
    a = x * 2.0
    b = dt.sqrt(a * 3.0)      # fetched: a fused tree ends here
    c = b * v                 # reads a variable
    with dt.control_dependencies([c]):
        d = dt.identity(c)
    e = dt.square(c) - 1.0
    fed_mid = a + 1.0         # a is read twice: not fused into b's tree
    feeds = {x: np.array([0.1, -0.2, 0.3], np.float32)}
    store = VariableStore("/job:local/task:0")
    init, _ = _optimized([], targets=[v.initializer], passes=NONE)
    _run(init, [], {}, store)
    opt, names = _optimized([b, d, e, fed_mid], list(feeds), passes=ALL)
    plain, _ = _optimized([b, d, e, fed_mid], list(feeds), passes=NONE)
    got, want = _run(opt, names, feeds, store), _run(plain, names, feeds, store)
    assert all(_same_bits(p, o) for p, o in zip(want, got))
    by_name = {n["name"]: n for n in opt}
    assert by_name[b.op.name]["op"] == "_FusedElementwise"
    assert "VariableV2" in _ops(opt)
    # an intermediate fed: its producer's chain is cut there
    fed = {x: feeds[x], c: np.array([0.5, 1.0, -2.0], np.float32)}
    plain, opt, nodes = _both([e], fed)
    assert "VariableV2" not in _ops(nodes) and "_FusedElementwise" in _ops(nodes)
    assert _same_bits(plain[0], opt[0])


def test_a_fed_tensor_whose_producer_stays_is_read_from_the_feed(graph):
    # the producer stays in the partition (run as a target, or waited for):
    # its readers still get the feed, and no pass takes it for a constant
    c = dt.constant(2.0)
    y = c * 3.0 + 1.0
    w = dt.sqrt(c * c) * 1.0 + dt.constant(0.0) * c
    with dt.control_dependencies([c]):
        z = dt.identity(dt.constant(7.0))
    feeds = {c: np.float32(5.0)}
    for targets, fetches in (([c.op], [y, w]), ([], [y, w, z])):
        for passes in (NONE, ALL, AGGRESSIVE_FUSION, Passes(aggressive_arithmetic=True)):
            opt, names = _optimized(fetches, list(feeds), targets, passes)
            got = _run(opt, names, feeds)
            assert got[0] == 16.0 and got[1] == 5.0, (passes, got)
    x = dt.placeholder(dt.float32, [3])
    a = x * 2.0
    b = a * 3.0          # a is fed, and a's producer stays (a target): b reads the feed
    feeds = {x: np.ones(3, np.float32), a: np.float32([1, 2, 3])}
    opt, names = _optimized([b], list(feeds), [a.op], ALL)
    assert _same_bits(_run(opt, names, feeds)[0], np.float32([3, 6, 9]))


def test_fused_kernel_falls_back_to_numpy_for_broadcasts_and_missing_numba(graph, monkeypatch):
    x = dt.placeholder(dt.float32, [None, 3])
    w = dt.placeholder(dt.float32, [3])
    y = dt.tanh(x * w + 1.0) * 3.0
    feeds = {x: np.arange(6, dtype=np.float32).reshape(2, 3) / 7, w: np.float32([1, -2, 0.5])}
    plain, opt, nodes = _both([y], feeds)
    assert "_FusedElementwise" in _ops(nodes) and _same_bits(plain[0], opt[0])
    monkeypatch.setattr(cpu_fused, "ready_jit", lambda dt: None)
    feeds[x] = feeds[x][:1]
    plain, opt, _ = _both([y], feeds)
    assert _same_bits(plain[0], opt[0])


def test_a_failing_fused_op_is_named_in_the_error(graph):
    x = dt.placeholder(dt.float32, [None])
    w = dt.placeholder(dt.float32, [None])
    bad = x * 2.0
    y = (bad * w) - 1.0
    opt, names = _optimized([y], [x, w])
    assert _ops(opt) == ["_FusedElementwise"]
    with pytest.raises(InvalidArgumentError, match=r"Mul .*do not broadcast"):
        _run(opt, names, {x: np.ones(2, np.float32), w: np.ones(3, np.float32)})


def test_a_malformed_fused_program_is_refused_before_it_runs():
    # the interpreter checks no bounds: each of these once wrote or read out
    # of bounds (a register row of 100000000 killed the process)
    good = {"dtype": "float32", "code": np.array([[3, 0, 0, 0, 2, 0], [1, 0, 1, 0, 0, 0]]),
            "ops": ["Mul", "Add"], "imms": np.array([2.0]), "n_regs": 1, "fused": ["a", "b"]}
    x = np.ones(4, np.float32)
    assert _same_bits(cpu_fused.fused_elementwise([x], good)[0], np.full(4, 3, np.float32))
    bad = [{"code": np.array([[1, 100000000, 0, 0, 0, 0]]), "ops": ["Add"]},
           {"code": np.array([[3, 0, 0, 7, 2, 0], [1, 0, 1, 0, 0, 0]])},   # input 7
           {"code": np.array([[3, 0, 1, 0, 2, 0], [1, 0, 1, 0, 0, 0]])},   # unwritten register
           {"imms": np.zeros(0)},                                          # no immediate 0
           {"ops": ["Mul", "Sub"]},                                        # op != opcode
           {"code": np.array([[99, 0, 0, 0, 2, 0], [1, 0, 1, 0, 0, 0]])},  # unknown opcode
           {"code": np.array([[3, 0, 0, 0, -1, 0], [1, 0, 1, 0, 0, 0]])},  # binary, one operand
           {"n_regs": 0}, {"code": np.array([1, 0, 0, 0, 0, 0])}]
    for change in bad:
        with pytest.raises(KernelError, match="_FusedElementwise"):
            cpu_fused.fused_elementwise([x, x], {**good, **change})
    with pytest.raises(KernelError, match="reads 1 inputs"):
        cpu_fused.fused_elementwise([], good)


_CACHE_PROBE = r"""
import json, sys, numpy as np
from kernels.cpu import fused as cpu_fused
attrs = {"dtype": "float32", "code": np.array([[3, 0, 0, 0, 0, 0], [3, 0, 1, 0, 2, 0]]),
         "ops": ["Mul", "Mul"], "imms": np.array([1.0001]), "n_regs": 1, "fused": ["a", "b"]}
x = np.array([1.5, -2.0, 3e-3], np.float32)
first = cpu_fused.fused_elementwise([x], attrs)[0]   # numpy: starts the loader thread
assert "numba" not in sys.modules or cpu_fused.ready_jit(x.dtype) is None
cpu_fused.prepare("float32")
again = cpu_fused.fused_elementwise([x], attrs)[0]   # the compiled interpreter
s = cpu_fused.jit_module().run_program.stats
print(json.dumps({"hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values()),
                  "same": first.tobytes() == again.tobytes() == (x * x * np.float32(1.0001)).tobytes()}))
"""


def test_second_process_loads_the_compiled_kernel_from_disk():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _CACHE_PROBE], cwd=ROOT, env=env,
                                      capture_output=True, text=True, timeout=110,
                                      check=True).stdout) for _ in range(2)]
    assert runs[1] == {"hits": 1, "misses": 0, "same": True}, runs


# -- sessions ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    s = dt.Server.create_local_server()
    yield s
    s.stop()


def test_sessions_with_the_optimizer_on_and_off_agree(server, graph, monkeypatch):
    x = dt.placeholder(dt.float32, [4])
    y = x
    for _ in range(300):
        y = y * x * 1.0001
    v = dt.Variable(0.0)
    step = v.assign_add(1.0)
    xv = np.array([1.0, 1.0001, 0.9999, -1.0], np.float32)
    rc = dt.RewriterConfig
    off = dt.ConfigProto(graph_options=dt.GraphOptions(
        optimizer_options=dt.OptimizerOptions(opt_level=dt.OptimizerOptions.L0),
        rewrite_options=rc(arithmetic_optimization=rc.OFF, dependency_optimization=rc.OFF,
                           remapping=rc.OFF)))
    results = []
    for config, env in ((None, "on"), (off, "on"), (None, "off")):
        monkeypatch.setenv("DISTRIB_GRAPH_OPTIMIZER", env)
        sess = dt.SyncSession(server.target, config=config)
        try:
            sess.run(v.initializer)
            results.append((sess.run(y, {x: xv}), sess.run([step, y], {x: xv})[0]))
        finally:
            sess.close()
    assert all(_same_bits(r[0], results[0][0]) for r in results)
    assert [r[1] for r in results] == [1.0, 1.0, 1.0]


def test_a_process_that_exits_while_the_fused_kernel_loads_waits_for_the_loader():
    """The loader thread is a daemon inside numba: left running while the
    interpreter finalizes it can crash a finished program (SIGSEGV); at exit
    it is joined, bounded (cpu_fused.join_loaders)."""
    code = ("import threading, numpy as np\n"
            "from kernels.cpu import fused as cpu_fused\n"
            "assert cpu_fused.ready_jit(np.dtype(np.float64)) is None\n"
            "assert any(t.name == 'fused-kernel-loader' for t in threading.enumerate())\n")
    child = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(),
                           capture_output=True, text=True, timeout=90)
    assert child.returncode == 0, child.stderr[-2000:]
    # a bounded wait: nothing to wait for returns at once
    t = time.monotonic()
    cpu_fused.join_loaders(timeout=0.0)
    assert time.monotonic() - t < 1.0
