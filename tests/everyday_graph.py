"""A graph of every op type of TF's everyday names (issue 39's remainder):
py_function/numpy_function, fill, size, rank, linspace, roll, print, the
asserts, searchsorted, depth/space, gather_nd and the scatters, einsum,
inverse and determinant, with their gradients; for ``tests/test_op_def.py``'s
check that the builders make every catalogue type with its declared arity."""
from __future__ import annotations

from typing import Any

import numpy as np

import distrib as dt


def build_everyday_family(h: Any) -> None:
    """Ops of every everyday type, built on the float tensor ``h`` ([4, 2]) in the
    default graph."""
    dt.numpy_function(lambda a: a, [h], dt.float32)
    dt.py_function(lambda a: a, [h], dt.float32)
    dt.fill([2], 1.0), dt.size(h), dt.rank(h), dt.linspace(0.0, 1.0, 3)
    dt.searchsorted([[1.0, 2.0]], [[1.5]]), dt.searchsorted([[1.0, 2.0]], [[1.5]], side="right")
    dt.print("h:", h)
    dt.debugging.assert_equal(h, h)
    img = dt.reshape(h, [1, 2, 2, 2])
    y = dt.nn.space_to_depth(dt.nn.depth_to_space(dt.tile(img, [1, 1, 1, 2]), 2), 2)
    y = dt.roll(dt.fill(dt.shape(y), dt.reduce_sum(y)), 1, 0)
    rows = dt.gather_nd(h, [[0], [2]])
    z = dt.scatter_nd([[1]], rows[:1], [4, 2])
    z = dt.tensor_scatter_nd_update(z, [[0]], rows[1:])
    z = dt.tensor_scatter_nd_sub(dt.tensor_scatter_nd_add(z, [[2]], rows[:1]), [[3]], rows[1:])
    sq = dt.einsum("ij,kj->ik", h[:2], h[:2]) + dt.constant(np.eye(2, dtype=np.float32))
    total = dt.reduce_sum(y) + dt.reduce_sum(z) + dt.linalg.det(sq) + \
        dt.reduce_sum(dt.linalg.inv(sq))
    dt.gradients(total, [h])
