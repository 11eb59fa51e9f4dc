"""What one collective op asks for: its attrs, checked, the engine's settings
that shape a run, and the plan of a run (its header and algorithm).

``CollectiveSpec`` parses a collective node's attrs once per node of a
compiled partition (collective.engine caches it). ``plan`` decides, from the
spec, the value and the group, the header every member sends in the header
round (collective.small), whether the data rides along with it (the one-round
algorithm, up to ``DISTRIB_COLLECTIVE_DIRECT_BYTES``) or the ring runs after
it (collective.ring), and the result's shape and dtype.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.runtime.collective.group import Group
from distrib.runtime.collective.instance import FINAL_OPS, MERGE
from distrib.settings import COLLECTIVE_DIRECT_BYTES, COLLECTIVE_SEGMENT_BYTES, COLLECTIVE_STALL_S

__all__ = ["CollectiveSpec", "plan", "stall_s", "segment_bytes", "direct_max_bytes"]


def stall_s() -> float:
    """``DISTRIB_COLLECTIVE_STALL_S``: how often a collective without a
    timeout says whom it waits for (default 60 s)."""
    return COLLECTIVE_STALL_S.get()


def segment_bytes() -> int:
    """``DISTRIB_COLLECTIVE_SEGMENT_BYTES``: the ring's segment; 0 (unset):
    at least 1 MiB, and a quarter of a chunk for bigger ones (collective.ring)."""
    return COLLECTIVE_SEGMENT_BYTES.get()


def direct_max_bytes() -> int:
    """``DISTRIB_COLLECTIVE_DIRECT_BYTES``: up to this size a reduce or gather
    takes the one-round algorithm (collective_small)."""
    return COLLECTIVE_DIRECT_BYTES.get()


class CollectiveSpec:
    """A collective op's attrs, checked."""

    __slots__ = ("op", "name", "device", "group_size", "group_key", "instance_key",
                 "merge_op", "final_op", "hint", "timeout", "shape", "dtype")

    def __init__(self, node: dict[str, Any]) -> None:
        a = node.get("attrs", {})
        self.op = node["op"]
        self.name = node["name"]
        self.device = node.get("device") or ""
        try:
            self.group_size = int(a["group_size"])
            self.group_key = int(a["group_key"])
            self.instance_key = int(a["instance_key"])
        except (KeyError, TypeError, ValueError):
            raise InvalidArgumentError(f"{self.op} needs integer attrs group_size, group_key "
                                       "and instance_key") from None
        if self.group_size < 1:
            raise InvalidArgumentError(f"{self.op}: group_size must be >= 1, not "
                                       f"{self.group_size}")
        self.merge_op = str(a.get("merge_op", "Add"))
        self.final_op = str(a.get("final_op", "Id"))
        if self.op == "CollectiveReduce" and (self.merge_op not in MERGE
                                              or self.final_op not in FINAL_OPS):
            raise InvalidArgumentError(
                f"CollectiveReduce: merge_op must be one of {sorted(MERGE)} and final_op one "
                f"of {list(FINAL_OPS)}, not {self.merge_op!r} and {self.final_op!r}")
        self.hint = str(a.get("communication_hint", "auto")).lower()
        self.timeout = float(a.get("timeout_seconds", 0) or 0)
        shape = a.get("shape")
        self.shape = None if shape is None else tuple(int(d) for d in shape)
        self.dtype = None if a.get("T") is None else np.dtype(a["T"])


def plan(spec: CollectiveSpec, value: np.ndarray | None, group: Group) -> tuple:
    """(header, the header round's data, ring?, shape, dtype) of a run."""
    if spec.op == "CollectiveBcastRecv":
        shape = spec.shape or ()
        dtype = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
    else:
        assert value is not None
        shape, dtype = value.shape, value.dtype
    nbytes = math.prod(shape) * dtype.itemsize
    bcast = spec.op.startswith("CollectiveBcast")
    ring = not bcast and (spec.hint == "ring" or nbytes > direct_max_bytes()) \
        and group.size > 1
    role = "send" if spec.op == "CollectiveBcastSend" else "recv" if bcast else ""
    op = "CollectiveBcast" if bcast else spec.op
    header = [op, spec.merge_op if op == "CollectiveReduce" else "",
              spec.final_op if op == "CollectiveReduce" else "", list(shape), dtype.str,
              "ring" if ring else "direct", role]
    return header, None if ring or role == "recv" else value, ring, shape, dtype
