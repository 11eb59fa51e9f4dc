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

GPUs follow TF's rules too. ``set_visible_devices(gpus[1:], "GPU")`` hides
the other GPUs from this process's servers and strategies; the visible ones
become ``/device:GPU:0``, ``GPU:1``... in physical order. A server's own
``ConfigProto(gpu_options=GPUOptions(visible_device_list="1,0"))`` wins over
it for that server (``task_gpus``). The first server of the process that
reaches the CUDA driver fixes which GPUs the process uses (the driver reads
``CUDA_VISIBLE_DEVICES`` once), as TF's GPU ids are fixed per process; once a
server has listed its devices, or a strategy has read them, a change of
visibility or of memory growth raises ``RuntimeError``, as TF's does once its
runtime is initialized. Memory growth (``experimental.set_memory_growth``)
is recorded only: numba allocates device memory on demand, which is what
growth means, and nothing is reserved up front. The CPU cannot be hidden:
every task runs on its ``CPU:0`` (TF fails later, at start, without one).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any, Sequence

from distrib.errors import AlreadyExistsError, InvalidArgumentError
from distrib.settings import GPU_MATMUL

__all__ = ["PhysicalDevice", "LogicalDevice", "LogicalDeviceConfiguration",
           "list_physical_devices", "list_logical_devices", "set_logical_device_configuration",
           "get_logical_device_configuration", "logical_cpu_count", "experimental",
           "set_visible_devices", "get_visible_devices", "parse_visible_device_list", "task_gpus"]

logger = logging.getLogger(__name__)


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
_visible: list[PhysicalDevice] | None = None    # None: every physical device (TF's default)
_growth: dict[PhysicalDevice, bool | None] = {}
_gpus_frozen = False                              # a server has listed this process's GPUs


def _gpu_count() -> int:
    """Visible CUDA devices, without importing numba (0 on a machine without a
    driver; the CUDA simulator is one, as servers list it)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return 1
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not os.path.exists("/dev/nvidiactl"):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        count = 0
        for d in visible.split(","):   # CUDA stops at the first invalid entry ("-1")
            if not d.strip() or d.strip().startswith("-"):
                break
            count += 1
        return count
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
    """The devices the runtime uses: each logical CPU, and ``GPU:i`` for each
    visible GPU; reading them initializes the devices, as in TF."""
    global _gpus_frozen
    found = [LogicalDevice(f"/device:CPU:{i}", "CPU") for i in range(logical_cpu_count())]
    with _lock:
        _gpus_frozen = True
        gpus = [d for d in _visible_now() if d.device_type == "GPU"]
    found += [LogicalDevice(f"/device:GPU:{i}", "GPU") for i in range(len(gpus))]
    return [d for d in found if device_type is None or d.device_type == device_type.upper()]


def _visible_now() -> list[PhysicalDevice]:
    return list(_visible) if _visible is not None else list_physical_devices()


def _check_device(device: Any) -> PhysicalDevice:
    if not isinstance(device, PhysicalDevice) or device not in list_physical_devices():
        raise ValueError(f"Unrecognized device: {device!r}: take one from "
                         "dt.config.list_physical_devices()")
    return device


def get_visible_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """TF's ``tf.config.get_visible_devices``: the physical devices the runtime
    may use (all of them unless ``set_visible_devices`` said otherwise)."""
    with _lock:
        found = _visible_now()
    return [d for d in found if device_type is None or d.device_type == device_type]


def set_visible_devices(devices: PhysicalDevice | Sequence[PhysicalDevice],
                        device_type: str | None = None) -> None:
    """TF's ``tf.config.set_visible_devices``: only ``devices`` (of
    ``device_type``, the other types keeping theirs; ``None``: of every type)
    are used by this process's servers and strategies. ``ValueError`` for a
    device that is not one of ``list_physical_devices()`` (or not of
    ``device_type``) and for hiding the CPU; ``RuntimeError`` for a change once
    the devices are initialized (a server has listed them, or a strategy or
    ``list_logical_devices`` has read them); setting the same list is fine."""
    global _visible
    devices = list(devices) if isinstance(devices, (list, tuple)) else [devices]
    for d in devices:
        _check_device(d)
        if device_type is not None and d.device_type != device_type:
            raise ValueError(f"Unrecognized device: {d!r} is not of device_type {device_type!r}")
    with _lock:
        new = [d for d in _visible_now() if d.device_type != device_type] \
            if device_type is not None else []
        new += devices
        if not any(d.device_type == "CPU" for d in new):
            raise ValueError("the CPU cannot be hidden: every task runs on its CPU:0; "
                             "pass device_type='GPU' to choose GPUs only")
        if new == _visible_now():
            return
        if _frozen or _gpus_frozen:
            raise RuntimeError("Visible devices cannot be modified after being initialized: "
                               "set them before making a server or a strategy")
        _visible = new


def get_memory_growth(device: PhysicalDevice) -> bool | None:
    """TF's ``tf.config.experimental.get_memory_growth``: None until set."""
    if _check_device(device).device_type != "GPU":
        raise ValueError("Cannot get memory growth of non-GPU devices")
    return _growth.get(device)


def set_memory_growth(device: PhysicalDevice, enable: bool) -> None:
    """TF's ``tf.config.experimental.set_memory_growth``, with its checks
    (``ValueError`` for a non-GPU or unknown device, ``RuntimeError`` for a
    change once the devices are initialized). Recorded only: numba allocates
    device memory on demand, which is growth; nothing is reserved up front."""
    if _check_device(device).device_type != "GPU":
        raise ValueError("Cannot set memory growth on non-GPU and non-Pluggable devices")
    with _lock:
        if _growth.get(device) == enable:
            return
        if _frozen or _gpus_frozen:
            raise RuntimeError("Physical devices cannot be modified after being initialized: "
                               "set memory growth before making a server or a strategy")
        _growth[device] = enable


def parse_visible_device_list(text: str) -> list[int]:
    """``GPUOptions.visible_device_list`` ("1,0") -> [1, 0]; "" -> []
    (every GPU); TF's errors for an entry that is not a GPU id or repeats."""
    if not isinstance(text, str):
        raise TypeError(f"visible_device_list is a string such as '0,1', not {text!r}")
    ids: list[int] = []
    for entry in (e.strip() for e in text.split(",")) if text.strip() else ():
        if not entry.isdigit():
            raise InvalidArgumentError(f"Could not parse entry in 'visible_device_list': "
                                       f"'{entry}'. visible_device_list = {text}")
        if int(entry) in ids:
            raise InvalidArgumentError(f"visible_device_list contained a duplicate entry: {text}")
        ids.append(int(entry))
    return ids


def task_gpus(visible_device_list: str = "") -> list[dict[str, Any]]:
    """The GPU devices a server of this process lists (``GPU:i`` dicts, as
    :func:`kernels.cuda.devices.gpu_devices` makes them): the GPUs of its
    ``gpu_options.visible_device_list`` in that order, else those
    ``set_visible_devices`` leaves, else every GPU ``CUDA_VISIBLE_DEVICES``
    leaves. [] on a machine without GPUs, where ``gpu_options`` mean nothing
    (as in a CPU-only TF), and numba is then never imported."""
    global _gpus_frozen
    count = _gpu_count()
    with _lock:
        _gpus_frozen = True
        if count == 0:
            return []
        if visible_device_list:
            ids = parse_visible_device_list(visible_device_list)
            for i in ids:
                if i >= count:
                    raise InvalidArgumentError(f"'visible_device_list' listed an invalid GPU id "
                                               f"'{i}' but visible device count is {count}")
        else:   # dt.config's visible GPUs (all by default), in physical order, as TF
            shown = [d for d in list_physical_devices("GPU") if d in _visible_now()]
            if len({_growth.get(d) for d in shown}) > 1:
                raise ValueError("Memory growth cannot differ between GPU devices")
            ids = [int(d.name.rpartition(":")[2]) for d in shown]
    if ids == []:
        return []
    try:
        from kernels.cuda import devices as kdev
        from kernels.cuda import options as gpu_options
    except Exception as e:  # a broken install: a task without GPUs
        logger.info("no GPU devices: %s", e)
        return []
    # the GPU kernels read no environment: GPU MatMul asks this declaration, at each run
    gpu_options.set_matmul_choice(GPU_MATMUL.get)
    try:
        return kdev.gpu_devices(ids)
    except kdev.GpuOrderError as e:
        raise AlreadyExistsError(f"{e}: give every server of a process the same "
                                 "visible_device_list (or use dt.config.set_visible_devices)") from e
    except Exception as e:  # no driver, broken install: a task without GPUs
        logger.info("no GPU devices: %s", e)
        return []


class experimental:  # noqa: N801 - TF's namespace
    """``dt.config.experimental``: TF's older names of the same calls."""
    set_virtual_device_configuration = staticmethod(set_logical_device_configuration)
    get_virtual_device_configuration = staticmethod(get_logical_device_configuration)
    VirtualDeviceConfiguration = LogicalDeviceConfiguration

    set_memory_growth = staticmethod(set_memory_growth)
    get_memory_growth = staticmethod(get_memory_growth)
    set_visible_devices = staticmethod(set_visible_devices)
    get_visible_devices = staticmethod(get_visible_devices)

    @staticmethod
    def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
        return list_physical_devices(device_type)
