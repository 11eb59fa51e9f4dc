"""A graph of every op type of the everyday vocabulary (issue 39): the math,
activation, array and random builders, their gradients (and the gradients of
the activations' gradient ops), and TF1's remaining optimizers; for
``tests/test_op_def.py``'s check that the builders make every catalogue type
with its declared arity."""
from __future__ import annotations

from typing import Any

import distrib as dt


def build_vocabulary_family(h: Any, step: Any) -> None:
    """Ops of every vocabulary type, built on the float tensor ``h`` ([4, 2])
    in the default graph; ``step`` is the int64 global step variable."""
    m = dt.math
    unary = [m.sin, m.cos, m.tan, m.asin, m.acos, m.atan, m.sinh, m.cosh, m.asinh, m.acosh,
             m.atanh, m.log1p, m.expm1, m.rsqrt, m.erf, m.erfc, m.ceil, m.rint,
             m.round, m.reciprocal, dt.nn.elu, dt.nn.selu, dt.nn.relu6, dt.nn.leaky_relu,
             dt.nn.softplus, dt.nn.softsign]
    parts = [fn(h) for fn in unary]
    parts += [m.floordiv(h, 2.0), m.floormod(h, 2.0), m.squared_difference(h, 1.0),
              m.atan2(h, 1.0), m.xlogy(h, h), m.xdivy(h, h), m.divide_no_nan(h, h),
              dt.cumsum(h, 1, exclusive=True), m.cumprod(h, reverse=True),
              dt.debugging.check_numerics(h, "h"), dt.squeeze(dt.expand_dims(h, 0)),
              dt.tile(h, [1, 2])[:, :2], dt.pad(h, [[1, 1], [1, 0]], "REFLECT")[1:-1, 1:]]
    parts += dt.unstack(dt.stack([h, h], axis=1), axis=1)
    parts += dt.split(h, 2, axis=1) + dt.split(h, [1, 1], axis=1)
    total = dt.add_n([dt.reduce_sum(p) for p in parts])
    (gh,) = dt.gradients(total, [h])
    dt.gradients(dt.reduce_sum(gh), [h])   # the activations' gradient ops differentiated
    dt.gradients(dt.reduce_sum(m.lgamma(h)), [h])   # (Digamma has no gradient here)
    for p in (m.is_nan(h), m.is_inf(h), m.is_finite(h)):
        dt.reduce_any(p), dt.reduce_all(p)
    m.argmin(h, 1), m.digamma(h), dt.where(h > 0.0)
    dt.one_hot([0, 1], 3), dt.range(3)
    dt.truncated_normal([2], seed=1), dt.random.categorical(h, 2, seed=2)
    dt.random.stateless_uniform([2], [1, 2]), dt.random.stateless_normal([2], [1, 2])
    dt.random.stateless_truncated_normal([2], [1, 2])
    with dt.device("/job:ps/task:0"):
        v = dt.Variable([1.0, 2.0], name="vocab_v")
    grads = [(dt.constant([0.1, 0.2]), v)]
    for opt in (dt.train.AdadeltaOptimizer(0.1), dt.train.FtrlOptimizer(0.1),
                dt.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.1),
                dt.train.ProximalAdagradOptimizer(0.1),
                dt.train.ProximalGradientDescentOptimizer(0.1),
                dt.train.AdagradDAOptimizer(0.1, global_step=step)):
        opt.apply_gradients(grads)
