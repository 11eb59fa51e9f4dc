"""The numba-compiled interpreter behind ``_FusedElementwise`` (see
:mod:`kernels.cpu.fused`): one function runs any fused chain of elementwise
ops, given as a small program of opcodes, so it is compiled once per dtype
(float32, float64), not once per chain, and numba keeps the machine code on
disk (``cache=True``): a second process loads it instead of compiling.

Imported only when a fused chain first runs on the CPU (numba is slow to
import); ``import kernels`` never imports this module.

Arithmetic is IEEE, as numpy's: no fast-math, no contraction of a multiply
and an add into one rounding, so ``+ - * /``, ``sqrt``, negation, ``abs`` and
``square`` give the bits numpy gives; ``exp``, ``log``, ``tanh`` and the
sigmoid come from the C library instead of numpy's own vector code and may
differ from it by a few units in the last place (numpy's float32 ``log`` is
itself up to 3 ulp from the correctly rounded value), which is why the
optimizer fuses them only when asked to (``remapping=AGGRESSIVE``).

The program (rows of ``code``): ``(opcode, dst, a_kind, a_index, b_kind,
b_index)``; an operand's kind is 0 for an input of the chain (``in_kind`` /
``in_idx`` then say whether this run got it as an array, a row of ``ins``,
or as a broadcast scalar, an entry of ``scal``), 1 for a register (a row of
``regs``) and 2 for an immediate (an entry of ``scal``). The elements run in
blocks of ``BLOCK``, every instruction over a block before the next, so the
registers stay in cache and the dispatch is paid once per block.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

BLOCK = 512

# opcodes: kernels.cpu.fused.OPCODES maps op types to them
ADD, SUB, MUL, DIV = 1, 2, 3, 4
NEG, SQUARE, ABS, EXP, LOG, SQRT, TANH, SIGMOID = 10, 11, 12, 13, 14, 15, 16, 17


@njit(cache=True, error_model="numpy")
def _apply(op: int, a, b, one):   # noqa: ANN001, ANN202  (numba specializes on the dtypes)
    if op == MUL:
        return a * b
    if op == ADD:
        return a + b
    if op == SUB:
        return a - b
    if op == DIV:
        return a / b
    if op == NEG:
        return -a
    if op == SQUARE:
        return a * a
    if op == ABS:
        return abs(a)
    if op == EXP:
        return math.exp(a)
    if op == LOG:
        return math.log(a)
    if op == SQRT:
        return math.sqrt(a)
    if op == TANH:
        return math.tanh(a)
    # SIGMOID, as kernels.cpu.math.sigmoid: exp only of -|x|
    e = math.exp(-abs(a))
    return one / (one + e) if a >= 0 else e / (one + e)


@njit(cache=True, error_model="numpy")
def run_program(code, ins, scal, in_kind, in_idx, regs, out, n, one):   # noqa: ANN001
    k = code.shape[0]
    for b0 in range(0, n, BLOCK):
        m = min(BLOCK, n - b0)
        for pc in range(k):
            op = code[pc, 0]
            d = code[pc, 1]
            ak = code[pc, 2]
            ai = code[pc, 3]
            bk = code[pc, 4]
            bi = code[pc, 5]
            # resolve the operands: 0 array input, 1 register, 2 scalar (a
            # unary op's missing operand, kind -1, reads scal[0] and ignores it)
            if ak == 0:
                ak = 0 if in_kind[ai] == 0 else 2
                ai = in_idx[ai]
            if bk == 0:
                bk = 0 if in_kind[bi] == 0 else 2
                bi = in_idx[bi]
            elif bk < 0:
                bk = 2
                bi = 0
            if ak == 2 and bk == 2:
                v = _apply(op, scal[ai], scal[bi], one)
                for e in range(m):
                    regs[d, e] = v
            elif ak == 2:
                sa = scal[ai]
                if bk == 0:
                    for e in range(m):
                        regs[d, e] = _apply(op, sa, ins[bi, b0 + e], one)
                else:
                    for e in range(m):
                        regs[d, e] = _apply(op, sa, regs[bi, e], one)
            elif bk == 2:
                sb = scal[bi]
                if ak == 0:
                    for e in range(m):
                        regs[d, e] = _apply(op, ins[ai, b0 + e], sb, one)
                else:
                    for e in range(m):
                        regs[d, e] = _apply(op, regs[ai, e], sb, one)
            elif ak == 0:
                if bk == 0:
                    for e in range(m):
                        regs[d, e] = _apply(op, ins[ai, b0 + e], ins[bi, b0 + e], one)
                else:
                    for e in range(m):
                        regs[d, e] = _apply(op, ins[ai, b0 + e], regs[bi, e], one)
            elif bk == 0:
                for e in range(m):
                    regs[d, e] = _apply(op, regs[ai, e], ins[bi, b0 + e], one)
            else:
                for e in range(m):
                    regs[d, e] = _apply(op, regs[ai, e], regs[bi, e], one)
        # the last instruction's register is the result
        last = code[k - 1, 1]
        for e in range(m):
            out[b0 + e] = regs[last, e]


def warm(dtype: np.dtype) -> None:
    """Compile (or load from the disk cache) the interpreter for ``dtype``."""
    code = np.array([[NEG, 0, 0, 0, -1, 0]], np.int64)
    x = np.zeros((1, 1), dtype)
    run_program(code, x, np.zeros(1, dtype), np.zeros(1, np.int64), np.zeros(1, np.int64),
                np.zeros((1, BLOCK), dtype), np.zeros(1, dtype), 1, dtype.type(1))
