"""``ConfigProto(device_filters=[...])``: the devices a session may use, as
TF's master keeps them (``DeviceNameUtils``' partial specifications).

Each filter is a partial device name (``"/job:ps"``, ``"/job:worker/task:1"``,
``"/job:worker/task:0/device:CPU:0"``); a device passes when one filter's
every given field equals the device's. With filters set, the master places
the step as usual and then refuses a node whose device no filter passes,
naming the node, its device and the filters, instead of contacting that
task: a session so configured talks only to the tasks its filters name
(mnist_replica.py gives each worker ``["/job:ps", "/job:worker/task:N"]``,
so one worker's session never waits for another worker). An empty list
filters nothing, as TF's default.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.runtime.core.tensor_values import Node
from distrib.runtime.step.plan import Device, parse_device, place

__all__ = ["matches", "place_filtered"]


def matches(device: Device, filters: Sequence[Any]) -> bool:
    """Whether ``device`` passes one of ``filters`` (True when there are none)."""
    if not filters:
        return True
    for f in filters:
        spec = parse_device(str(f))
        if all(want is None or want == have for want, have in (
                (spec.job, device.job), (spec.task, device.task),
                (spec.device_type, device.device_type),
                (spec.device_index, device.device_index))):
            return True
    return False


def place_filtered(nodes: dict[str, Node], order: list[str], *, default_job: str,
                   default_task: int, tasks: dict[str, list[int]],
                   filters: Sequence[Any] | None) -> dict[str, Device]:
    """:func:`distrib.runtime.step.plan.place`, then every device checked
    against ``filters`` (an ``InvalidArgumentError`` for the first that fails)."""
    placed = place(nodes, order, default_job=default_job, default_task=default_task,
                   tasks=tasks)
    if filters:
        for name in order:
            d = placed[name]
            if not matches(d, filters):
                raise InvalidArgumentError(
                    f"op {name!r} is placed on /job:{d.job}/task:{d.task}/device:"
                    f"{d.device_type}:{d.device_index}, which the session's "
                    f"ConfigProto(device_filters={list(filters)}) leaves out; pin it to a "
                    "device the filters name, or widen the filters")
    return placed
