"""Fusion (TF's "remapping"): trees of elementwise float ops on the CPU
become one ``_FusedElementwise`` node, run by one compiled kernel
(:mod:`kernels.cpu.fused`).

A group is a tree: an op joins the group of the op that reads it when that
op is its only reader, nothing waits for it, it is not fetched or a target,
and both are fusible (an op of ``kernels.cpu.fused.OPCODES`` on the CPU
whose inputs and output have one float dtype). The fused node takes the
name of the tree's root, so its readers and fetches are unchanged, and the
control inputs of all its ops. Scalar constants of the group's dtype that
it reads become immediates of the program.

Results: the same IEEE operations in the same order, so bit-for-bit the
unfused graph's for ``+ - * /``, negation, ``abs``, ``square`` and
``sqrt``, the ops fused by default. ``exp``, ``log``, ``tanh`` and sigmoid
join only with ``remapping=AGGRESSIVE``: the C library's functions differ
from numpy's vector code by up to 4 ulp per op (tested).
"""
from __future__ import annotations

import numpy as np

from distrib.runtime.step.graph_optimizer.graph import View, control_inputs, data_inputs, on_cpu
from distrib.runtime.step.plan import Node, tensor_op
from kernels.cpu.fused import FUSIBLE_DTYPES, INEXACT_OPS, OPCODES

__all__ = ["fuse_elementwise"]

MIN_GROUP = 2   # a lone op gains nothing from fusion


def _fusible_dtype(n: Node, view: View, aggressive: bool) -> str | None:
    if n["op"] not in OPCODES or not on_cpu(n) or (n["op"] in INEXACT_OPS and not aggressive):
        return None
    dts = n.get("output_dtypes") or []
    ins = data_inputs(n)
    if len(dts) != 1 or dts[0] not in FUSIBLE_DTYPES or len(ins) != OPCODES[n["op"]][1]:
        return None
    if any(view.dtype(i) != dts[0] for i in ins):
        return None
    return dts[0]


def fuse_elementwise(nodes: list[Node], view: View, aggressive: bool = False) -> list[Node]:
    """``nodes`` with each fusible tree of two ops or more replaced by one
    ``_FusedElementwise`` node; ``aggressive`` lets exp, log, tanh and
    sigmoid in too (not bit-exact: see the module's header)."""
    dtype = {n["name"]: _fusible_dtype(n, view, aggressive) for n in nodes}
    members: dict[str, list[str]] = {}   # root -> its group, in topological order
    merged: set[str] = set()
    for n in nodes:
        name = n["name"]
        if dtype[name] is None:
            continue
        group: list[str] | None = None
        for inp in dict.fromkeys(data_inputs(n)):
            p, idx = tensor_op(inp)
            if (idx or p not in view.by_name or dtype.get(p) != dtype[name] or p in merged
                    or p in view.preserve or view.waiters.get(p)
                    or set(view.readers.get(p, ())) != {name}):
                continue
            sub = members.pop(p)
            if group is None:
                group = sub   # a chain grows its producer's list: linear, not quadratic
            else:
                group.extend(sub)
            merged.add(p)
        group = group if group is not None else []
        group.append(name)
        members[name] = group
    fused = {root: g for root, g in members.items() if len(g) >= MIN_GROUP}
    if not fused:
        return nodes
    gone = {m for g in fused.values() for m in g[:-1]}
    out = []
    for n in nodes:
        if n["name"] in gone:
            continue
        g = fused.get(n["name"])
        out.append(n if g is None else _fused_node([view.by_name[m] for m in g], view))
    return out


def _fused_node(group: list[Node], view: View) -> Node:
    root = group[-1]
    dt = root["output_dtypes"][0]
    names = {m["name"] for m in group}
    inputs: dict[str, int] = {}     # external tensor -> input index
    imms: list[float] = []
    imm_of: dict[str, int] = {}
    reg_of: dict[str, int] = {}     # member -> its register (until read)
    free: list[int] = []
    n_regs = 0
    code = []
    controls: dict[str, None] = {}

    def operand(t: str) -> tuple[int, int]:
        op, _ = tensor_op(t)
        if op in names and not view.is_fed(t):
            return 1, reg_of[op]
        if t in imm_of:
            return 2, imm_of[t]
        c = view.const_value(t)
        if c is not None and c.ndim == 0 and str(c.dtype) == dt:
            imm_of[t] = len(imms)
            imms.append(float(c))
            return 2, imm_of[t]
        key = t if ":" in t else f"{t}:0"
        if key not in inputs:
            inputs[key] = len(inputs)
        return 0, inputs[key]

    for m in group:
        for c in control_inputs(m):
            if c[1:] not in names:
                controls[c] = None
        ins = data_inputs(m)
        a = operand(ins[0])
        b = operand(ins[1]) if len(ins) > 1 else (-1, 0)
        for kind, idx in (a, b):   # a member's value is read once: its register is free
            if kind == 1 and idx not in free:
                free.append(idx)
        if free:
            d = free.pop()
        else:
            d, n_regs = n_regs, n_regs + 1
        reg_of[m["name"]] = d
        code.append([OPCODES[m["op"]][0], d, a[0], a[1], b[0], b[1]])
    return {
        "name": root["name"], "op": "_FusedElementwise",
        "inputs": list(inputs) + list(controls), "device": root.get("device", ""),
        "attrs": {"dtype": dt, "code": np.array(code, np.int64), "ops": [m["op"] for m in group],
                  "imms": np.array(imms, np.float64), "n_regs": max(1, n_regs),
                  "fused": [m["name"] for m in group]},
        "output_dtypes": [dt], "output_shapes": root.get("output_shapes") or [None],
    }
