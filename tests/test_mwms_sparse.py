"""MultiWorkerMirroredStrategy all-gathers sparse gradients across processes
(issue 41 item 3, TF's ``CollectiveAllReduce`` of ``IndexedSlices``): two
worker processes (tests/peers/mwms_sparse.py) each send their own rows (four
ids on one, three on the other: slices of different lengths), both apply
the gathered rows with TF1's Adagrad and end with equal tables, equal to a
numpy Adagrad on the global batch; and no collective of the step carries a
tensor the table's size (only rows and ids cross)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import run_workers

pytestmark = pytest.mark.slow
BOUND_S = 90
ROWS, DIM, STEPS = 50, 4, 3
IDS = {0: [[1, 4, 4, 0], [7, 1, 2, 2]], 1: [[2, 2, 9], [4, 7, 7]]}
INIT = (np.arange(ROWS * DIM, dtype=np.float64).reshape(ROWS, DIM) - 70) / 100


def _adagrad_reference() -> np.ndarray:
    """TF1's Adagrad (lr 0.2, accumulators from 0.1) on the sum of both workers'
    gradients of sum(table[ids]) / 7: rows of repeated ids add."""
    var, acc = INIT.copy(), np.full_like(INIT, 0.1)
    for k in range(STEPS):
        ids = np.concatenate([IDS[w][k % 2] for w in (0, 1)])
        g = np.bincount(ids, minlength=ROWS)[:, None] / 7.0 * np.ones((1, DIM))
        touched = np.unique(ids)
        acc[touched] += g[touched] ** 2
        var[touched] -= 0.2 * g[touched] / np.sqrt(acc[touched])
    return var


def test_two_workers_all_gather_their_sparse_rows_and_end_equal():
    outs = run_workers(["tests/peers/mwms_sparse.py"], 2, BOUND_S)
    reports = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    for r in reports:
        assert r["replicas"] == 2
        assert r["kinds"] and set(r["kinds"]) == {"IndexedSlices"}, r["kinds"]
        gathers = [shape for kind, shape in r["collectives"] if kind == "CollectiveGather"]
        assert gathers, r["collectives"]
        for kind, shape in r["collectives"]:   # rows (or ids, or counts), never the table
            assert shape is None or shape[0] is None or shape[0] < ROWS, (kind, shape)
    t0, t1 = (np.asarray(r["table"]) for r in reports)
    np.testing.assert_array_equal(t0, t1)
    np.testing.assert_allclose(t0, _adagrad_reference(), rtol=1e-12)
