"""The environment's knobs: one declaration per ``DISTRIB_*`` variable.

Every variable a user may set is declared once, as a :class:`Setting`: its
name, its type, its default, what it allows and one line of help. A module
reads one with ``HEARTBEAT_S.get()``, never ``os.environ`` itself, so a bad
value is refused the same way everywhere: a :class:`SettingError` (a
``ValueError``) naming the variable, the value and what is allowed. The same
bad value used to be a crash in one place, a warning in another and a silent
default in a third, because each reader wrote its own parsing.

Values are read when asked: ``get()`` looks at the environment on every call,
so a test that sets ``os.environ`` at run time, or a server started with its
own environment, is seen. A caller that wants a value once reads it once
(the shared-memory arena's size, at import).

This is the bottom of the stack: it imports nothing of ours. transports
declares its own knobs here (``TRANSPORT_SETTINGS``); ``distrib.settings``
declares the runtime's with the same class and lists them all
(``ALL_SETTINGS``), which docs/ARCHITECTURE.md prints as a table.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Setting", "SettingError", "KINDS", "TRANSPORT_SETTINGS",
           "HEARTBEAT_S", "CLUSTER_TOKEN", "CLUSTER_TOKEN_FILE", "TLS_CERT", "TLS_KEY", "TLS_CA",
           "MAX_FRAME_BYTES", "FRAME_TIMEOUT_S", "SHM_ARENA_BYTES"]


class SettingError(ValueError):
    """A ``DISTRIB_*`` variable holds a value its declaration refuses.
    ``name``, ``value`` (the text as set) and ``allowed`` (what would do)."""

    def __init__(self, name: str, value: str, allowed: str) -> None:
        super().__init__(f"{name} must be {allowed}, not {value!r}")
        self.name, self.value, self.allowed = name, value, allowed


@dataclass(frozen=True)
class Setting:
    """One environment variable: ``kind`` is one of :data:`KINDS`; ``default``
    is what ``get()`` gives when the variable is unset or blank (None: the
    reader works one out, as ``default_text`` says). ``minimum`` (inclusive)
    or ``above`` (exclusive) bound a number; ``choices`` a choice. ``strip``:
    surrounding blanks are dropped (not for a secret, taken as it is).
    ``read_by`` names the module that reads it, or "reserved"."""

    name: str
    kind: str
    default: Any
    help: str
    read_by: str
    minimum: float | None = None
    above: float | None = None
    choices: tuple[str, ...] = ()
    default_text: str = ""
    strip: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {sorted(KINDS)}")

    def text(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's text as set (stripped unless ``strip`` is off), or
        None when unset or blank. ``environ`` replaces ``os.environ``."""
        raw = (os.environ if environ is None else environ).get(self.name)
        if raw is not None and self.strip:
            raw = raw.strip()
        return raw or None

    def get(self, environ: Mapping[str, str] | None = None) -> Any:
        """The value now: the variable parsed, or ``default`` when unset."""
        raw = self.text(environ)
        return self.default if raw is None else self.parse(raw)

    def parse(self, text: str) -> Any:
        """``text`` as this setting's type; a :class:`SettingError` if refused."""
        return KINDS[self.kind][0](self, text)

    @property
    def allowed(self) -> str:
        """What the setting accepts, in words (for errors and the table)."""
        return KINDS[self.kind][1](self)

    def shown_default(self) -> str:
        """The default as the table shows it."""
        if self.default_text:
            return self.default_text
        if self.default is None or self.default == "":
            return "(unset)"
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        return str(self.default)

    def refuse(self, text: str) -> SettingError:
        return SettingError(self.name, text, self.allowed)


# -- one parser per kind, each with the words for what it allows ----------------

def _bound(s: Setting, value: float) -> bool:
    return (s.minimum is None or value >= s.minimum) and (s.above is None or value > s.above)


def _number_words(s: Setting, unit: str) -> str:
    """``>= 0 (seconds)``: the bound first, as a reader checks it first."""
    if s.above is not None:
        return f"> {s.above:g} ({unit})"
    return f">= {s.minimum:g} ({unit})" if s.minimum is not None else unit


def _parse_seconds(s: Setting, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise s.refuse(text) from None
    if not (math.isfinite(value) and _bound(s, value)):
        raise s.refuse(text)
    return value


_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _parse_bytes(s: Setting, text: str) -> int:
    scale = _UNITS.get(text[-1].lower(), 1)
    number = text[:-1] if scale > 1 else text
    try:
        value = int(number) * scale if number.isdigit() else int(float(number) * scale)
    except (ValueError, OverflowError):   # not a number, nan or inf
        raise s.refuse(text) from None
    if not _bound(s, value):
        raise s.refuse(text)
    return value


def _parse_int(s: Setting, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise s.refuse(text) from None
    if not _bound(s, value):
        raise s.refuse(text)
    return value


def _parse_choice(s: Setting, text: str) -> str:
    if text not in s.choices:
        raise s.refuse(text)
    return text


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _parse_bool(s: Setting, text: str) -> bool:
    word = text.lower()
    if word not in _TRUE + _FALSE:
        raise s.refuse(text)
    return word in _TRUE


def _parse_text(s: Setting, text: str) -> str:
    return text


KINDS: dict[str, tuple[Callable[[Setting, str], Any], Callable[[Setting], str]]] = {
    "seconds": (_parse_seconds, lambda s: _number_words(s, "seconds")),
    "bytes": (_parse_bytes, lambda s: _number_words(s, "bytes; a K, M or G suffix allowed")),
    "int": (_parse_int, lambda s: _number_words(s, "a whole number")),
    "choice": (_parse_choice, lambda s: "one of " + ", ".join(s.choices)),
    "bool": (_parse_bool, lambda s: "one of " + ", ".join(_TRUE + _FALSE)),
    "string": (_parse_text, lambda s: "any text"),
    "path": (_parse_text, lambda s: "a file or folder path"),
}


# -- the transport layer's own knobs -------------------------------------------

HEARTBEAT_S = Setting(
    "DISTRIB_HEARTBEAT_S", "seconds", 1.0, minimum=0,
    help="Seconds between heartbeats on every connection; silence for 3 of them is death "
         "(0 turns failure detection off).",
    read_by="distrib.runtime.actors.failure_detector, transports.config")
CLUSTER_TOKEN = Setting(
    "DISTRIB_CLUSTER_TOKEN", "string", "", strip=False,
    help="The cluster's shared secret, checked in every handshake (empty: no authentication).",
    read_by="transports.config")
CLUSTER_TOKEN_FILE = Setting(
    "DISTRIB_CLUSTER_TOKEN_FILE", "path", "",
    help="A file holding the cluster's secret, when DISTRIB_CLUSTER_TOKEN is unset.",
    read_by="transports.config")
TLS_CERT = Setting(
    "DISTRIB_TLS_CERT", "path", "",
    help="This task's certificate (PEM) for mutual TLS on TCP; with DISTRIB_TLS_KEY and "
         "DISTRIB_TLS_CA, all three or none.",
    read_by="transports.config")
TLS_KEY = Setting(
    "DISTRIB_TLS_KEY", "path", "", help="The private key of DISTRIB_TLS_CERT (PEM).",
    read_by="transports.config")
TLS_CA = Setting(
    "DISTRIB_TLS_CA", "path", "",
    help="The certificate authority (PEM) every peer's certificate must be signed by.",
    read_by="transports.config")
# 2 GiB: the int32 limit of TF's gRPC channels and of protobuf, so nothing TF
# could send in one RPC is refused; at least 64 KiB, so the handshake fits
MAX_FRAME_BYTES = Setting(
    "DISTRIB_MAX_FRAME_BYTES", "bytes", 2**31, minimum=64 * 1024, default_text="2G",
    help="The biggest message this side accepts; a sender refuses a bigger one before sending.",
    read_by="transports.config")
FRAME_TIMEOUT_S = Setting(
    "DISTRIB_FRAME_TIMEOUT_S", "seconds", None, minimum=0,
    default_text="3 heartbeats, at least 10",
    help="A frame in progress that gets no byte for this long closes the connection (0: off).",
    read_by="transports.config")
SHM_ARENA_BYTES = Setting(
    "DISTRIB_SHM_ARENA_BYTES", "bytes", 1 << 30, minimum=0, default_text="1G",
    help="Shared memory kept for arrays lent to same-host peers (0: every send copies); "
         "read once, at import.",
    read_by="transports.shm")

TRANSPORT_SETTINGS: tuple[Setting, ...] = (
    HEARTBEAT_S, CLUSTER_TOKEN, CLUSTER_TOKEN_FILE, TLS_CERT, TLS_KEY, TLS_CA,
    MAX_FRAME_BYTES, FRAME_TIMEOUT_S, SHM_ARENA_BYTES)
