"""``dt.config``: the devices of this process, and its logical CPU devices.

TF's ``tf.config`` on a CPU machine: ``list_physical_devices("CPU")`` is one
CPU; ``set_logical_device_configuration(cpu, [LogicalDeviceConfiguration()] * 2)``
splits it into ``/device:CPU:0`` and ``/device:CPU:1``, so that
``MirroredStrategy`` (and ``MultiWorkerMirroredStrategy`` on each worker) has
two replicas to mirror over on a machine without GPUs. Here the setting is a
process-wide number that the servers this process starts read when they list
their devices (``Session.list_devices``) and that the strategies read for
their replica devices; the executor runs any ``CPU:i`` on the host (the
replicas' kernels run side by side on its pool). As in TF it must be set
before the runtime starts using the devices: once a strategy or a server
has read it, a change raises ``RuntimeError``.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

__all__ = ["PhysicalDevice", "LogicalDevice", "LogicalDeviceConfiguration",
           "list_physical_devices", "list_logical_devices", "set_logical_device_configuration",
           "get_logical_device_configuration", "logical_cpu_count", "experimental"]


@dataclasses.dataclass(frozen=True)
class PhysicalDevice:
    name: str
    device_type: str


@dataclasses.dataclass(frozen=True)
class LogicalDevice:
    name: str
    device_type: str


@dataclasses.dataclass(frozen=True)
class LogicalDeviceConfiguration:
    memory_limit: int | None = None
    experimental_priority: int | None = None
    experimental_device_ordinal: int | None = None


_lock = threading.Lock()
_logical_cpus: list[LogicalDeviceConfiguration] | None = None
_frozen = False


def _gpu_count() -> int:
    """Visible CUDA devices, without importing numba (0 on a machine without a driver)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not os.path.exists("/dev/nvidiactl"):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return len([d for d in visible.split(",") if d.strip()])
    return len([n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()])


def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """``[PhysicalDevice("/physical_device:CPU:0", "CPU"), ...GPUs]``, filtered by type."""
    found = [PhysicalDevice("/physical_device:CPU:0", "CPU")]
    found += [PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(_gpu_count())]
    return [d for d in found if device_type is None or d.device_type == device_type.upper()]


def set_logical_device_configuration(device: PhysicalDevice,
                                     logical_devices: list[LogicalDeviceConfiguration] | None
                                     ) -> None:
    """Split the CPU into ``len(logical_devices)`` logical CPUs (None: back to one)."""
    global _logical_cpus
    if not isinstance(device, PhysicalDevice):
        raise ValueError(f"expected a PhysicalDevice from dt.config.list_physical_devices(), "
                         f"got {device!r}")
    if device.device_type != "CPU":
        raise ValueError(f"logical devices are supported for the CPU only here, not "
                         f"{device.name}")
    configs = None if logical_devices is None else list(logical_devices)
    if configs is not None and (not configs or not all(
            isinstance(c, LogicalDeviceConfiguration) for c in configs)):
        raise ValueError("logical_devices must be a non-empty list of "
                         "dt.config.LogicalDeviceConfiguration")
    with _lock:
        if _frozen and configs != _logical_cpus:
            raise RuntimeError("Virtual devices cannot be modified after being initialized: "
                               "set the logical devices before making a strategy or a server")
        _logical_cpus = configs


def get_logical_device_configuration(device: PhysicalDevice
                                     ) -> list[LogicalDeviceConfiguration] | None:
    return list(_logical_cpus) if device.device_type == "CPU" and _logical_cpus else None


def logical_cpu_count(freeze: bool = True) -> int:
    """How many logical CPUs this process has (1 unless configured); reading it
    for real use (``freeze``) fixes it, as TF's runtime initialization does."""
    global _frozen
    with _lock:
        if freeze:
            _frozen = True
        return len(_logical_cpus) if _logical_cpus else 1


def list_logical_devices(device_type: str | None = None) -> list[LogicalDevice]:
    found = [LogicalDevice(f"/device:CPU:{i}", "CPU") for i in range(logical_cpu_count())]
    found += [LogicalDevice(f"/device:GPU:{i}", "GPU") for i in range(_gpu_count())]
    return [d for d in found if device_type is None or d.device_type == device_type.upper()]


class experimental:  # noqa: N801 - TF's namespace
    """``dt.config.experimental``: TF's older names of the same calls."""
    set_virtual_device_configuration = staticmethod(set_logical_device_configuration)
    get_virtual_device_configuration = staticmethod(get_logical_device_configuration)
    VirtualDeviceConfiguration = LogicalDeviceConfiguration

    @staticmethod
    def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
        return list_physical_devices(device_type)


def _reset_for_tests() -> Any:
    """Back to one CPU, unfrozen (tests only)."""
    global _logical_cpus, _frozen
    with _lock:
        _logical_cpus, _frozen = None, False
