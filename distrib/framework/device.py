"""Device specifications: where an op asks to run, in the model of ``tf.DeviceSpec``.

A device string names any subset of ``job``, ``replica``, ``task`` and a
device (``TYPE:index``); unnamed fields are "unspecified" and are filled in by
an outer ``dt.device`` scope, a device function, or finally by the master's
placer. Every form TensorFlow accepts parses here::

    "/job:ps/task:0"  "/job:worker/replica:0/task:1/device:GPU:0"
    "/gpu:0"  "/cpu:0"  "/device:CPU:*"  "GPU:1"  ""

Merging follows TF: ``a.merge_from(b)`` overwrites a's fields with those that
b specifies and keeps the rest. The device stack of a graph turns every entry
into a *device function* (``Operation -> str``); a plain spec becomes
:func:`merge_device`, whose result lets the device set so far (by inner
scopes) win over the scope's own fields.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Callable

from distrib.errors import InvalidArgumentError

__all__ = ["DeviceSpec", "merge_device", "canonical_device", "check_device_string"]

_VALID_FORM = ("valid forms: '/job:NAME/replica:N/task:N/device:TYPE:N' (any part may be "
               "left out), '/cpu:0', '/gpu:1', 'GPU:0', '/device:CPU:*', or ''")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_SHORT_TYPES = frozenset({"CPU", "GPU", "TPU"})


class DeviceSpec:
    """A (possibly partial) device: job, replica, task, device type and index.

    ``None`` means unspecified. ``device_type`` is upper-cased for CPU/GPU so
    ``"/gpu:0"`` and ``"/device:GPU:0"`` are the same device.
    """

    __slots__ = ("job", "replica", "task", "device_type", "device_index")

    def __init__(self, job: str | None = None, replica: int | None = None,
                 task: int | None = None, device_type: str | None = None,
                 device_index: int | None = None) -> None:
        self.job = job
        self.replica = None if replica is None else int(replica)
        self.task = None if task is None else int(task)
        self.device_type = _normalize_type(device_type)
        self.device_index = None if device_index is None else int(device_index)

    # -- parsing and printing -------------------------------------------------
    @classmethod
    def from_string(cls, spec: str | DeviceSpec | None) -> DeviceSpec:
        """Parse any TF device string; InvalidArgumentError names a bad one."""
        if isinstance(spec, DeviceSpec):
            return copy.copy(spec)
        out = cls()
        out.parse_from_string(spec or "")
        return out

    def parse_from_string(self, spec: str) -> DeviceSpec:
        """Set the fields named in ``spec`` (TF1 API); returns self."""
        if not isinstance(spec, str):
            raise InvalidArgumentError(
                f"device must be a string, DeviceSpec or function, got {spec!r}; {_VALID_FORM}")
        for part in spec.split("/"):
            if part:
                self._parse_part(spec, part)
        return self

    def _parse_part(self, spec: str, part: str) -> None:
        fields = part.split(":")
        key = fields[0].lower()
        try:
            if key == "job" and len(fields) == 2 and _NAME_RE.match(fields[1]):
                self.job = fields[1]
            elif key in ("replica", "task") and len(fields) == 2:
                setattr(self, key, _parse_index(fields[1], star_ok=False))
            elif key == "device" and len(fields) in (2, 3) and fields[1]:
                self.device_type = _normalize_type(fields[1])
                self.device_index = _parse_index(fields[2]) if len(fields) == 3 else None
            elif len(fields) == 2 and key.upper() in _SHORT_TYPES:
                # the short forms "/cpu:0", "/gpu:1", "GPU:0" (only for known device
                # types: "/taks:1" is a typo, not a device type)
                self.device_type = _normalize_type(fields[0])
                self.device_index = _parse_index(fields[1])
            else:
                raise ValueError(part)
        except ValueError:
            raise InvalidArgumentError(
                f"malformed device string {spec!r} (at {part!r}); {_VALID_FORM}") from None

    def to_string(self) -> str:
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else str(self.device_index)
            parts.append(f"/device:{self.device_type}:{index}")
        return "".join(parts)

    # -- merging -----------------------------------------------------------------
    def merge_from(self, dev: DeviceSpec | str | None) -> DeviceSpec:
        """Overwrite this spec's fields with those ``dev`` specifies (TF1: in place).

        Returns self as well, so it also reads as an expression.
        """
        other = DeviceSpec.from_string(dev) if not isinstance(dev, DeviceSpec) else dev
        for field in ("job", "replica", "task"):
            if getattr(other, field) is not None:
                setattr(self, field, getattr(other, field))
        if other.device_type is not None:
            if other.device_type != self.device_type:
                self.device_index = None  # an index of another device type means nothing
            self.device_type = other.device_type
            if other.device_index is not None:
                self.device_index = other.device_index
        return self

    def make_merged_spec(self, dev: DeviceSpec | str | None) -> DeviceSpec:
        """A new spec: this one with ``dev``'s fields on top (TF2 API)."""
        return copy.copy(self).merge_from(dev)

    def replace(self, **fields: Any) -> DeviceSpec:
        out = copy.copy(self)
        for key, value in fields.items():
            if key not in self.__slots__:
                raise InvalidArgumentError(f"DeviceSpec has no field {key!r}; fields: {self.__slots__}")
            setattr(out, key, _normalize_type(value) if key == "device_type" else value)
        return out

    def canonical(self, job: str, task: int, device_type: str = "CPU",
                  device_index: int = 0) -> str:
        """``/job:J/replica:0/task:T/device:TYPE:N`` with unspecified fields defaulted."""
        spec = DeviceSpec(job, 0, task, device_type, device_index).merge_from(self)
        if spec.device_index is None:
            spec.device_index = 0
        return spec.to_string()

    # -- value semantics ------------------------------------------------------
    def _key(self) -> tuple:
        return (self.job, self.replica, self.task, self.device_type, self.device_index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceSpec) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __copy__(self) -> DeviceSpec:
        return DeviceSpec(*self._key())

    def __repr__(self) -> str:
        return f"DeviceSpec({self.to_string()!r})"


def _normalize_type(device_type: str | None) -> str | None:
    if device_type is None:
        return None
    return device_type.upper() if device_type.lower() in ("cpu", "gpu") else device_type


def _parse_index(text: str, star_ok: bool = True) -> int | None:
    if star_ok and text == "*":
        return None
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def check_device_string(spec: str | DeviceSpec | None) -> str:
    """Validate and normalize a device string (``"/gpu:0"`` -> ``"/device:GPU:0"``)."""
    return DeviceSpec.from_string(spec).to_string()


def merge_device(spec: str | DeviceSpec | None) -> Callable[[Any], str]:
    """The device function of a plain ``dt.device(spec)`` scope.

    The device already set on the op (by inner scopes, applied first) wins;
    the scope fills only the fields left unspecified, as in TF.
    """
    base = DeviceSpec.from_string(spec)

    def _device_function(op: Any) -> str:
        merged = copy.copy(base).merge_from(DeviceSpec.from_string(op.device or ""))
        return merged.to_string()

    _device_function.spec = base  # type: ignore[attr-defined]  # for repr/debugging
    return _device_function


def canonical_device(device: str | DeviceSpec | None, job: str, task: int,
                     device_type: str = "CPU", device_index: int = 0) -> str:
    """Fill the unspecified fields of ``device`` from defaults; the placer's last step."""
    return DeviceSpec.from_string(device).canonical(job, task, device_type, device_index)
