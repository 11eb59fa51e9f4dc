"""The ``DISTRIB_*`` settings: one declaration each, one parser per type, one table.

- Each type's parser refuses a bad value with the one error
  (``SettingError``, a ``ValueError``) that names the variable, the value
  and what is allowed; an unset or blank variable is the default; a value
  set at run time is seen by the next ``get()``.
- docs/ARCHITECTURE.md's "Settings" table is ``markdown_table()`` exactly.
- Every ``DISTRIB_*`` name in the sources, the examples, the benchmarks and
  the documents is declared (a name ending in ``_`` is a prefix, e.g.
  ``DISTRIB_LAUNCH_<FLAG>``, and must start a declared one), and no module
  of the three packages reads one from ``os.environ`` itself.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from distrib.settings import ALL_SETTINGS, RUNTIME_SETTINGS, markdown_table
from transports.settings import KINDS, TRANSPORT_SETTINGS, Setting, SettingError

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"DISTRIB_[A-Z0-9_]+")
SCANNED = ("distrib", "transports", "kernels", "bench", "examples", "docs")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sbatch", ".sh", ".toml", ".txt", ".cfg"}
SETTINGS_MODULES = {ROOT / "distrib" / "settings.py", ROOT / "transports" / "settings.py"}
DECLARED = {s.name for s in ALL_SETTINGS}


def setting(kind: str, default: object = None, **kw: object) -> Setting:
    return Setting("DISTRIB_TEST_X", kind, default, help="A test knob.", read_by="tests", **kw)


# -- the parsers --------------------------------------------------------------------

@pytest.mark.parametrize("decl, bad, allowed", [
    (setting("seconds", 1.0, minimum=0), "-1", ">= 0 (seconds)"),
    (setting("seconds", 1.0, minimum=0), "soon", ">= 0 (seconds)"),
    (setting("seconds", 1.0, minimum=0), "inf", ">= 0 (seconds)"),
    (setting("seconds", 1.0, minimum=0), "nan", ">= 0 (seconds)"),
    (setting("seconds", 1.0, above=0), "0", "> 0 (seconds)"),
    (setting("bytes", 0, minimum=1024), "1000", ">= 1024 (bytes"),
    (setting("bytes", 0, minimum=0), "lots", ">= 0 (bytes"),
    (setting("bytes", 0, minimum=0), "2X", ">= 0 (bytes"),
    (setting("bytes", 0, minimum=0), "G", ">= 0 (bytes"),
    (setting("bytes", 0, minimum=0), "infG", ">= 0 (bytes"),
    (setting("int", 0, minimum=0), "-3", ">= 0 (a whole number)"),
    (setting("int", 0, minimum=0), "2.5", ">= 0 (a whole number)"),
    (setting("choice", "a", choices=("a", "b")), "c", "one of a, b"),
    (setting("bool", False), "maybe", "one of 1, true"),
])
def test_a_bad_value_is_one_error_naming_the_variable_value_and_what_is_allowed(
        monkeypatch, decl: Setting, bad: str, allowed: str) -> None:
    monkeypatch.setenv(decl.name, bad)
    with pytest.raises(SettingError) as info:
        decl.get()
    e = info.value
    assert isinstance(e, ValueError) and e.name == decl.name and e.value == bad
    assert str(e) == f"{decl.name} must be {decl.allowed}, not {bad!r}"
    assert allowed in str(e)


@pytest.mark.parametrize("decl, text, value", [
    (setting("seconds", 1.0, minimum=0), " 0.25 ", 0.25),
    (setting("seconds", 1.0, minimum=0), "0", 0.0),
    (setting("bytes", 0, minimum=0), "4096", 4096),
    (setting("bytes", 0, minimum=0), "64k", 64 << 10),
    (setting("bytes", 0, minimum=0), "3M", 3 << 20),
    (setting("bytes", 0, minimum=0), "2G", 2 << 30),
    (setting("bytes", 0, minimum=0), "1e6", 1_000_000),
    (setting("int", 0, minimum=0), "7", 7),
    (setting("choice", "a", choices=("a", "b")), "b", "b"),
    (setting("bool", False), "yes", True), (setting("bool", True), "OFF", False),
    (setting("bool", True), "0", False), (setting("bool", False), "1", True),
    (setting("string", ""), " some text ", "some text"),
    (setting("path", ""), "/tmp/x.pem", "/tmp/x.pem"),
])
def test_a_good_value_parses_to_its_type(monkeypatch, decl: Setting, text: str, value: object) -> None:
    monkeypatch.setenv(decl.name, text)
    got = decl.get()
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_unset_or_blank_is_the_default(monkeypatch, kind: str) -> None:
    default = object()
    decl = setting(kind, default, choices=("a",))
    monkeypatch.delenv(decl.name, raising=False)
    assert decl.get() is default and decl.text() is None
    monkeypatch.setenv(decl.name, "   ")
    assert decl.get() is default


def test_a_value_set_at_run_time_is_seen_by_the_next_get(monkeypatch) -> None:
    decl = setting("seconds", 1.0, minimum=0)
    monkeypatch.delenv(decl.name, raising=False)
    assert decl.get() == 1.0
    monkeypatch.setenv(decl.name, "2.5")
    assert decl.get() == 2.5
    monkeypatch.setenv(decl.name, "0.5")
    assert decl.get() == 0.5


def test_an_environment_mapping_replaces_os_environ(monkeypatch) -> None:
    decl = setting("int", 8888, minimum=0)
    monkeypatch.setenv(decl.name, "1")
    assert decl.get({decl.name: "7000"}) == 7000 and decl.get({}) == 8888


def test_a_secret_keeps_its_blanks() -> None:
    secret = setting("string", "", strip=False)
    assert secret.get({secret.name: " s3cret "}) == " s3cret "
    assert secret.get({secret.name: "  "}) == "  " and secret.get({secret.name: ""}) == ""


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        setting("float")


def test_the_real_knobs_read_the_environment_when_asked(monkeypatch) -> None:
    from distrib.runtime.actors.failure_detector import heartbeat_s
    from distrib.runtime.actors.system import default_transport_config, session_gc_s
    from distrib.runtime.core.kernel_pool import inter_op_threads
    for name in ("DISTRIB_HEARTBEAT_S", "DISTRIB_SESSION_GC_S", "DISTRIB_TRANSPORT",
                 "DISTRIB_CONNECT_TIMEOUT_S", "DISTRIB_INTER_OP_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert heartbeat_s() == 1.0 and session_gc_s() == 60.0
    config = default_transport_config()
    assert config.mode == "auto" and config.connect_timeout_s == 10.0
    monkeypatch.setenv("DISTRIB_SESSION_GC_S", "5")
    monkeypatch.setenv("DISTRIB_TRANSPORT", "tcp")
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "2.5")
    monkeypatch.setenv("DISTRIB_INTER_OP_THREADS", "1")
    config = default_transport_config()
    assert session_gc_s() == 5.0 and config.mode == "tcp" and config.connect_timeout_s == 2.5
    assert inter_op_threads() == 1
    monkeypatch.setenv("DISTRIB_TRANSPORT", "udp")
    with pytest.raises(SettingError, match="DISTRIB_TRANSPORT must be one of auto, tcp, shm, not 'udp'"):
        default_transport_config()


# -- the declarations ---------------------------------------------------------------

def test_every_declaration_is_well_formed() -> None:
    names = [s.name for s in ALL_SETTINGS]
    assert len(names) == len(set(names)), "a variable declared twice"
    assert ALL_SETTINGS == TRANSPORT_SETTINGS + RUNTIME_SETTINGS
    for s in ALL_SETTINGS:
        assert NAME.fullmatch(s.name) and not s.name.endswith("_"), s.name
        assert s.help.endswith(".") and "|" not in s.help + s.allowed + s.shown_default(), s.name
        assert (s.kind == "choice") == bool(s.choices), s.name
        for module in s.read_by.split(", "):
            if module != "reserved":
                path = ROOT / Path(*module.split("."))
                assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), \
                    f"{s.name}: read_by names {module}, which is not a module"


def test_the_contracts_reserved_settings_are_declared() -> None:
    by_name = {s.name: s for s in ALL_SETTINGS}
    assert by_name["DISTRIB_GRAPH_OPTIMIZER"].choices == ("on", "off")
    assert by_name["DISTRIB_GRAPH_OPTIMIZER"].default == "on"
    assert by_name["DISTRIB_GPU_MATMUL"].choices == ("auto", "numba", "cublas")
    assert by_name["DISTRIB_GPU_MATMUL"].default == "auto"


# -- the document and the sources ---------------------------------------------------

def settings_section(text: str) -> str:
    start = text.index("\n## Settings\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_the_architecture_table_is_all_settings() -> None:
    section = settings_section((ROOT / "docs" / "ARCHITECTURE.md").read_text())
    table = "".join(line + "\n" for line in section.splitlines() if line.startswith("|"))
    assert table == markdown_table(), (
        "docs/ARCHITECTURE.md's Settings table differs from distrib.settings.ALL_SETTINGS: "
        "paste distrib.settings.markdown_table() in its place")


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in SCANNED:
        files += [p for p in sorted((ROOT / top).rglob("*"))
                  if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name.startswith("Dockerfile"))
                  and "__pycache__" not in p.parts]
    return files


def undeclared(names: set[str]) -> set[str]:
    """Names neither declared nor (ending in ``_``) a prefix of a declared one."""
    return {n for n in names
            if n not in DECLARED and not (n.endswith("_") and any(d.startswith(n) for d in DECLARED))}


def test_every_distrib_variable_named_anywhere_is_declared() -> None:
    found: dict[str, list[str]] = {}
    for path in scanned_files():
        for name in set(NAME.findall(path.read_text(errors="replace"))):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    bad = {name: found[name] for name in undeclared(set(found))}
    assert bad == {}, f"declare these in distrib/settings.py (or transports/settings.py): {bad}"


def test_the_scan_finds_an_undeclared_name() -> None:
    assert undeclared({"DISTRIB_HEARTBEAT_S", "DISTRIB_LAUNCH_", "DISTRIB_NO_SUCH_KNOB", "DISTRIB_NOPE_"}) \
        == {"DISTRIB_NO_SUCH_KNOB", "DISTRIB_NOPE_"}


def _environ_reads(tree: ast.AST) -> list[int]:
    """Lines reading a ``DISTRIB_*`` literal from an environment: ``environ[...]``,
    ``environ.get(...)``, ``os.getenv(...)`` (writing one, for a child, is fine)."""
    lines = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                and "environ" in ast.unparse(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) \
                and (node.func.attr == "getenv"
                     or (node.func.attr == "get" and "environ" in ast.unparse(node.func.value))):
            key = node.args[0]
        if key is not None and "DISTRIB_" in ast.unparse(key):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_module_reads_a_distrib_variable_itself() -> None:
    bad = []
    for top in ("distrib", "transports", "kernels"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path in SETTINGS_MODULES:
                continue
            bad += [f"{path.relative_to(ROOT)}:{line}" for line in _environ_reads(ast.parse(path.read_text()))]
    assert bad == [], f"read these through their declaration (distrib.settings): {bad}"


def test_the_reader_scan_finds_a_hand_read() -> None:
    code = ('import os\nx = os.environ.get("DISTRIB_STALL_S")\ny = os.getenv("DISTRIB_X")\n'
            'z = environ["DISTRIB_Y"]\nos.environ["DISTRIB_Z"] = "1"\nw = os.environ.get("HOME")\n')
    assert _environ_reads(ast.parse(code)) == [2, 3, 4]
