"""Eager op overhead (issue 39): ``x + y`` of two small eager tensors, beside
numpy's ``a + b`` on the same arrays, both timed in a fresh process that
turned eager execution on (eager is process-wide: the graph rows of
``bench/step.py`` must not run under it).

- ``numpy-add-4``: ``a + b`` of two float32 ``[4]`` arrays;
- ``eager-add-4``: ``x + y`` of two eager tensors of those values (the
  operators' fast path: one cached CPU kernel, a thin wrapper); target
  <= 5 us (TF 2.21 eager: 11.9 us on the machine the issue measured);
- ``eager-op-4``: ``dt.add(x, y)``, the general path every builder takes
  (the catalogue's shape check, the eager op record), for information.

Each figure is the median over repetitions of the mean of a tight loop.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, statistics, sys, time
import numpy as np
import distrib as dt
dt.enable_eager_execution()
reps, n = int(sys.argv[1]), 20000
a = np.arange(4, dtype=np.float32); b = np.ones(4, np.float32)
x, y = dt.constant(a), dt.constant(b)

def mean_us(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6

out = {}
for name, fn, count in (("numpy", lambda: a + b, n), ("fast", lambda: x + y, n),
                        ("general", lambda: dt.add(x, y), n // 10)):
    mean_us(fn, count // 10)
    out[name] = statistics.median(mean_us(fn, count) for _ in range(reps))
assert np.array_equal((x + y).numpy(), a + b)
print(json.dumps(out))
"""


def eager_rows(reps: int) -> list[dict]:
    """The three rows above, measured in a child process."""
    done = subprocess.run([sys.executable, "-c", _CHILD, str(reps)], capture_output=True,
                          text=True, timeout=600, check=True, cwd=ROOT)
    us = json.loads(done.stdout.strip().splitlines()[-1])
    return [{"name": "numpy-add-4", "us": us["numpy"]},
            {"name": "eager-add-4", "us": us["fast"], "baseline": "numpy-add-4",
             "ratio": us["fast"] / us["numpy"], "target": "<= 5 us"},
            {"name": "eager-op-4", "us": us["general"], "baseline": "eager-add-4",
             "ratio": us["general"] / us["fast"]}]


if __name__ == "__main__":
    for row in eager_rows(5):
        print(row)
