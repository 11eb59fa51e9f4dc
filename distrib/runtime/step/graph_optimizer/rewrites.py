"""The rewriting passes: common subgraph elimination, constant folding,
arithmetic simplification and dead-node pruning (TF's Grappler passes of
the same names; ``docs/ARCHITECTURE.md`` says which are exact).

Each takes the partition's nodes in topological order and returns them
rewritten (same order), never touching a node that is fetched, run as a
target, or has an effect (a variable read or update, a random op, a send or
receive, a collective, a queue op: see :func:`graph.is_pure`), and never
dropping a control dependency: a rewritten or removed node passes its
control inputs on, or is left alone.
"""
from __future__ import annotations

import math

import numpy as np

import kernels
from distrib.runtime.step.graph_optimizer.graph import (
    MAX_CONSTANT_BYTES,
    View,
    attrs_key,
    control_inputs,
    data_inputs,
    dtype_name,
    is_pure,
    on_cpu,
    rewire,
    rewire_node,
    unique_name,
)
from distrib.runtime.step.plan import Node, tensor_op

__all__ = ["eliminate_common_subgraphs", "fold_constants", "simplify_arithmetic", "prune_dead"]


def eliminate_common_subgraphs(nodes: list[Node], view: View) -> list[Node]:
    """Merge pure nodes that compute the same thing: same op, attrs, device,
    data inputs (in order) and control inputs. Exact: the kept node's value
    is the one every reader got before. A preserved node is never merged
    away (it may be the one kept)."""
    seen: dict[tuple, str] = {}
    data: dict[str, str] = {}
    control: dict[str, str] = {}
    out = []
    for n in nodes:
        n = rewire_node(n, data, control) if data or control else n
        if not is_pure(n) or n["name"] in view.fed_ops:   # its readers get the feed
            out.append(n)
            continue
        key = (n["op"], n.get("device", ""), tuple(data_inputs(n)),
               frozenset(control_inputs(n)), attrs_key(n["attrs"]),
               tuple(n.get("output_dtypes") or ()))
        rep = seen.get(key)
        if rep is None or n["name"] in view.preserve:
            seen.setdefault(key, n["name"])
            out.append(n)
            continue
        for k in range(max(1, len(n.get("output_dtypes") or ()))):
            data[f"{n['name']}:{k}"] = f"{rep}:{k}"
        control[n["name"]] = rep
    return out


def _constant(value: np.ndarray, like: Node) -> Node:
    return {"name": like["name"], "op": "Const", "inputs": [], "device": like.get("device", ""),
            "attrs": {"value": value, "dtype": dtype_name(value.dtype)},
            "output_dtypes": [dtype_name(value.dtype)],
            "output_shapes": [list(value.shape)]}


def fold_constants(nodes: list[Node], view: View) -> list[Node]:
    """Evaluate, once, every pure CPU node whose inputs are all constants of
    this partition, and put a ``Const`` of its value in its place (same name,
    so readers and fetches are unchanged). Exact: the value comes from the
    op's own CPU kernel. Nodes with control inputs, several outputs, a GPU
    device, a failing kernel or a result over 10 MiB stay as they are."""
    out = []
    consts: dict[str, np.ndarray] = {}
    for n in nodes:
        if n["op"] == "Const" and not n["inputs"]:
            v = view.const_value(n["name"] + ":0")
            if v is not None:
                consts[n["name"]] = v
            out.append(n)
            continue
        ins = n["inputs"]
        if not is_pure(n) or not on_cpu(n) or control_inputs(n) \
                or len(n.get("output_dtypes") or ()) != 1 \
                or any(tensor_op(i)[0] not in consts or tensor_op(i)[1] or view.is_fed(i)
                       for i in ins):
            out.append(n)
            continue
        args = [consts[tensor_op(i)[0]] for i in ins]
        if _may_exceed_limit(n, args):   # not even computed: it might take seconds and GiBs
            out.append(n)
            continue
        value = _evaluate(n, args)
        if value is None:
            out.append(n)
            continue
        consts[n["name"]] = value
        out.append(_constant(value, n))
    return out


# ops whose result's size comes from an attr or the value of an input, not
# from the sizes of their inputs: without a declared shape, never folded
_EXPANDING_OPS = frozenset({"Zeros", "Ones", "Fill", "Tile", "BroadcastTo", "BroadcastToShapeOf",
                            "Range", "OneHot", "Pad"})


def _may_exceed_limit(n: Node, args: list[np.ndarray]) -> bool:
    """Whether ``n``'s result may be over the folding limit, judged before
    evaluating it: by its declared shape and dtype when both are known;
    else by a bound from its inputs' sizes (no elementwise broadcast,
    matmul or concatenation makes more elements than their product plus
    their sum), and always for an op that makes its size from an attr."""
    declared = (n.get("output_dtypes") or [None])[0]
    try:
        itemsize = np.dtype(declared).itemsize if declared else 8
    except TypeError:
        itemsize = 8
    itemsize = max([itemsize, *(a.itemsize for a in args)])
    shape = (n.get("output_shapes") or [None])[0]
    if _known(shape):
        if math.prod(shape) * itemsize > MAX_CONSTANT_BYTES:
            return True
        if n["op"] not in _EXPANDING_OPS:
            return False
        attr = n["attrs"].get("shape")   # the size a Zeros or Ones really makes
        return attr is not None and (not _known(attr)
                                     or math.prod(attr) * itemsize > MAX_CONSTANT_BYTES)
    if n["op"] in _EXPANDING_OPS:
        return True
    sizes = [max(1, a.size) for a in args]
    return (math.prod(sizes) + sum(sizes)) * itemsize > MAX_CONSTANT_BYTES


def _known(shape: object) -> bool:
    return isinstance(shape, (list, tuple)) and all(type(d) is int and d >= 0 for d in shape)


def _evaluate(n: Node, args: list[np.ndarray]) -> np.ndarray | None:
    try:
        res = kernels.get_kernel(n["op"], kernels.CPU)(list(args), n["attrs"])
    except Exception:   # it fails in its step instead, as it would unoptimized
        return None
    if type(res) is not list or len(res) != 1 or not isinstance(res[0], np.ndarray):
        return None
    value = res[0]
    declared = (n.get("output_dtypes") or [None])[0]
    if value.nbytes > MAX_CONSTANT_BYTES or value.dtype.kind not in "biuf" \
            or (declared is not None and dtype_name(value.dtype) != declared):
        return None
    value = np.array(value)   # its own read-only copy, not a view of an input
    value.setflags(write=False)
    return value


def _all(value: np.ndarray, target: float, signbit: bool | None = None) -> bool:
    if value.ndim == 0:
        v = value.item()
        return v == target and (signbit is None or (math.copysign(1, v) < 0) == signbit)
    if not np.all(value == target):
        return False
    return signbit is None or bool(np.all(np.signbit(value) == signbit))


def _identity_operand(n: Node, view: View, aggressive: bool) -> str | None:
    """The input ``x`` when ``n`` is ``x * 1``, ``1 * x``, ``x / 1``,
    ``x + (-0.0)``, ``x - 0.0`` (any integer zero; with ``aggressive``, a
    float ``+0.0`` too, which turns ``-0.0`` into ``0.0``) of the same dtype,
    broadcast to nothing bigger than ``x``; else None."""
    op = n["op"]
    ins = data_inputs(n)
    if op not in ("Mul", "RealDiv", "Add", "Sub") or len(ins) != 2 or control_inputs(n):
        return None
    out_dt = (n.get("output_dtypes") or [None])[0]
    for k in (1, 0):
        if k == 0 and op in ("RealDiv", "Sub"):
            continue
        c = view.const_value(ins[k])
        x = ins[1 - k]
        if c is None or (c.ndim == 0 and c.item() not in (0, 1)) \
                or dtype_name(c.dtype) != out_dt or view.dtype(x) != out_dt:
            continue
        is_float = c.dtype.kind == "f"
        if op == "RealDiv" and not is_float:
            continue   # RealDiv refuses integers at run time: that error must stay
        if op in ("Mul", "RealDiv"):
            ok = _all(c, 1)
        elif op == "Add":
            ok = _all(c, 0, None if not is_float or aggressive else True)
        else:
            ok = _all(c, 0, None if not is_float or aggressive else False)
        if ok and _same_shape_after(c, view.shape(x), (n.get("output_shapes") or [None])[0]):
            return x
    return None


def _same_shape_after(c: np.ndarray, x_shape: list | None, out_shape: list | None) -> bool:
    if c.ndim == 0:
        return True
    if x_shape is None or out_shape is None or any(d is None for d in x_shape) \
            or list(out_shape) != list(x_shape):
        return False
    try:
        return list(np.broadcast_shapes(tuple(x_shape), c.shape)) == list(x_shape)
    except ValueError:
        return False


def simplify_arithmetic(nodes: list[Node], view: View, aggressive: bool = False) -> list[Node]:
    """``x * 1``, ``x / 1``, ``x + (-0.0)``, ``x - 0.0`` and integer ``x + 0``
    become ``x`` (an ``Identity`` when the node itself is fetched); chains of
    multiplies by scalar constants, ``(x * c1) * c2``, become ``x * (c1 *
    c2)`` on integers (exact: both wrap modulo 2**bits) and, with
    ``aggressive``, on floats (TF's rewrite: within one ulp per multiply
    folded, not bit-exact)."""
    data: dict[str, str] = {}
    out: list[Node] = []
    taken = set(view.by_name) | set(view.graph)
    for n in nodes:
        n = rewire_node(n, data, {}) if data else n
        view.by_name[n["name"]] = n
        x = _identity_operand(n, view, aggressive)
        if x is not None:
            if n["name"] in view.preserve or view.waiters.get(n["name"]):
                n = {**n, "op": "Identity", "inputs": [x], "attrs": {}}
            else:
                data[f"{n['name']}:0"] = x if ":" in x else f"{x}:0"
                out.append(n)   # dead now: pruning removes it
                continue
        else:
            folded = _fold_scalar_chain(n, view, aggressive, taken)
            if folded is not None:
                const, n = folded
                out.append(const)
                view.by_name[const["name"]] = const
        view.by_name[n["name"]] = n
        out.append(n)
    return rewire(out, data, {})


def _fold_scalar_chain(n: Node, view: View, aggressive: bool,
                       taken: set[str]) -> tuple[Node, Node] | None:
    """``(new Const, new n)`` when ``n`` is ``inner * c2`` (either order),
    ``inner`` being ``x * c1`` read by ``n`` alone, with ``c1``, ``c2``
    scalar constants of ``n``'s dtype (an integer one, or any with
    ``aggressive``); else None."""
    dt = (n.get("output_dtypes") or [None])[0]
    if n["op"] != "Mul" or not dt or (dt.startswith("float") and not aggressive) \
            or control_inputs(n) or len(data_inputs(n)) != 2:
        return None
    ins = data_inputs(n)
    for k in (1, 0):
        c2 = view.const_value(ins[k])
        inner = view.local(ins[1 - k])
        if c2 is None or c2.ndim or dtype_name(c2.dtype) != dt or inner is None \
                or inner["op"] != "Mul" or tensor_op(ins[1 - k])[1] or control_inputs(inner) \
                or inner["name"] in view.preserve or view.waiters.get(inner["name"]) \
                or len(view.readers.get(inner["name"], ())) != 1:
            continue
        if not (c2.dtype.kind in "iu" or (aggressive and c2.dtype.kind == "f")):
            return None
        iins = data_inputs(inner)
        for j in (1, 0):
            c1 = view.const_value(iins[j])
            if c1 is None or c1.ndim or c1.dtype != c2.dtype or view.dtype(iins[1 - j]) != dt:
                continue
            with np.errstate(all="ignore"):
                c12 = np.multiply(c1, c2)
            c12 = np.array(c12, c2.dtype)
            name = unique_name(f"{n['name']}/folded_factor", taken)
            taken.add(name)
            const = _constant(c12, {"name": name, "device": n.get("device", "")})
            new = {**n, "inputs": [iins[1 - j], f"{name}:0"]}
            # the inner multiply is read by n alone: it is dead now
            view.readers[inner["name"]] = []
            return const, new
    return None


def prune_dead(nodes: list[Node], view: View) -> list[Node]:
    """Drop the pure nodes that nothing reads, waits for, fetches or runs
    as a target (what the rewrites above left behind)."""
    live: set[str] = set()
    keep = []
    for n in reversed(nodes):
        if n["name"] in live or n["name"] in view.preserve or not is_pure(n):
            keep.append(n)
            for inp in n["inputs"]:
                live.add(inp[1:] if inp.startswith("^") else tensor_op(inp)[0])
    keep.reverse()
    return keep
