"""The layout's rules, pinned: imports go one way and no module grows too long.

- ``distrib`` may import ``transports`` and ``kernels``; neither imports
  ``distrib``, and they never import each other.
- Inside ``distrib``, a subpackage imports only those before it in
  ``LAYERS``' order (docs/ARCHITECTURE.md, "Packages and layers");
  ``settings`` (the environment's knobs) and ``errors`` come first; the
  package's ``__init__`` and the ``demo`` program stand above everything.
- No import cycles between modules, in any of the three packages. An import
  inside a function counts (it is a cycle deferred, not removed); one under
  ``if TYPE_CHECKING:`` does not (it never runs), nor does a package's
  implicit import of its parent package.
- Inside ``distrib.runtime``, ``distrib.train`` and ``distrib.distribute``, a
  wing imports only the wings before it in that subpackage's row of
  ``WINGS`` (its own included); no module sits in those subpackages outside
  a wing (the subpackage's ``__init__`` aside), and every folder there is a
  wing.
- Inside ``kernels``, likewise between ``KERNEL_WINGS`` (cpu, then cuda: the
  CUDA wing may import the CPU one for its host fallbacks, never the
  reverse); the shared modules at the top of ``kernels/`` (registry, dtypes,
  counters, constants) import no wing, and a wing's ``__init__`` imports
  nothing (``import kernels`` must not load numba).
- No module is over ``MAX_LINES`` lines: a module that grows past that holds
  two ideas.
- No module uses another module's private name: neither ``from mod import
  _name`` nor ``mod._name`` where ``mod`` is a module of ours (dunders are
  public): a name siblings share is public.

The checker parses the source (nothing is imported) and reads
``importlib.import_module("literal")`` calls as imports too. Its own tests
build small trees in a temporary folder and show each rule can fail.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("distrib", "transports", "kernels")
LAYERS = ("settings", "errors", "io", "cluster", "app", "framework", "eager", "ops", "client", "runtime", "server",
          "summary", "train", "data", "distribute", "keras", "launch", "status", "compat")
# distrib's subpackages split into wings: each one's wings, bottom first
# (docs/ARCHITECTURE.md, "Packages and layers")
WINGS = {
    "runtime": ("core", "actors", "chief", "state", "collective", "step"),
    "train": ("checkpoints", "optimizers", "chief", "sessions", "replicas", "input"),
    "distribute": ("core", "elastic", "functions", "preemption", "strategies", "coordinator",
                   "experimental"),
}
# kernels' wings, bottom first (kernels/README.md); its top-level modules are shared
# by both and sit below them, and ``kernels/__init__`` stands above everything
KERNEL_WINGS = ("cpu", "cuda")
TOP = ("__init__", "demo", "process")   # distrib's own modules that stand above every layer
MAX_LINES = 500   # issue 37: split by concern, before a module holds two ideas


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file, for every .py file of the three packages under ``root``."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[str], int]]:
    """(module, names imported from it, line) for every import that can run."""
    out: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[:len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            out.append((base, [alias.name for alias in node.names], node.lineno))
        elif isinstance(node, ast.Call) and _is_import_module(node):
            out.append((node.args[0].value, [], node.lineno))  # type: ignore[attr-defined]
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _is_import_module(call: ast.Call) -> bool:
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
    return (name == "import_module" and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str))


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """Module -> {module of ours it imports: line of the first such import}."""
    files = module_files(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        edges: dict[str, int] = {}
        for base, names, line in _imported_names(tree, module, path.name == "__init__.py"):
            # "from pkg import mod" imports the module pkg.mod; "from mod import name" mod
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in files] or [base]
            for target in targets:
                if target in files and target != module:
                    edges.setdefault(target, line)
        graph[module] = edges
    return graph


def layer_of(module: str) -> tuple[str, int]:
    """(package, rank): a module may import only ranks at or below its own, in
    its own package (or transports/kernels, from distrib)."""
    parts = module.split(".")
    if parts[0] != "distrib":
        return parts[0], 0
    if len(parts) == 1 or parts[1] in TOP:
        return "distrib", len(LAYERS)
    if parts[1] not in LAYERS:
        return "distrib", -1   # unknown: a new subpackage must be placed in LAYERS
    return "distrib", LAYERS.index(parts[1])


def order_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for module, edges in sorted(graph.items()):
        pkg, rank = layer_of(module)
        if rank < 0:
            bad.append(f"{module}: subpackage not in the layer order {LAYERS}")
            continue
        for target, line in sorted(edges.items()):
            tpkg, trank = layer_of(target)
            if tpkg != pkg:
                if not (pkg == "distrib" and tpkg in ("transports", "kernels")):
                    bad.append(f"{module}:{line} imports {target} ({pkg} must not import {tpkg})")
            elif trank > rank:
                bad.append(f"{module}:{line} imports {target}, a later layer "
                           f"({LAYERS[trank] if trank < len(LAYERS) else target})")
    return bad


def wing_of(module: str) -> tuple[str, int] | None:
    """(subpackage, rank of the module's wing in ``WINGS[subpackage]``; -1 for a
    module outside every wing) for a module of a winged subpackage of
    ``distrib``; None for any other module, or the subpackage's ``__init__``."""
    parts = module.split(".")
    if parts[0] != "distrib" or len(parts) < 3 or parts[1] not in WINGS:
        return None
    wings = WINGS[parts[1]]
    return parts[1], (wings.index(parts[2]) if parts[2] in wings else -1)


def wing_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for module, edges in sorted(graph.items()):
        place = wing_of(module)
        if place is None:
            continue
        pkg, rank = place
        if rank < 0:
            bad.append(f"{module}: not in a wing of distrib.{pkg} {WINGS[pkg]}")
            continue
        for target, line in sorted(edges.items()):
            tplace = wing_of(target)
            if tplace is not None and tplace[0] == pkg and tplace[1] > rank:
                bad.append(f"{module}:{line} imports {target}, a later wing "
                           f"({WINGS[pkg][tplace[1]]})")
    return bad


def kernel_wing_of(module: str) -> int | None:
    """The rank of a ``kernels`` module's wing: -1 for a shared top-level
    module (below every wing), -2 for a folder that is no wing; None for a
    module outside ``kernels``, or its ``__init__``."""
    parts = module.split(".")
    if parts[0] != "kernels" or len(parts) == 1:
        return None
    if parts[1] in KERNEL_WINGS:
        return KERNEL_WINGS.index(parts[1])
    return -1 if len(parts) == 2 else -2


def kernel_wing_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for module, edges in sorted(graph.items()):
        rank = kernel_wing_of(module)
        if rank is None:
            continue
        if rank == -2:
            bad.append(f"{module}: not in a wing of kernels {KERNEL_WINGS}")
            continue
        for target, line in sorted(edges.items()):
            trank = kernel_wing_of(target)
            if trank is not None and trank > rank:
                what = "a shared module imports" if rank == -1 else "imports"
                bad.append(f"{module}:{line} {what} {target}, a later wing ({KERNEL_WINGS[trank]})")
    return bad


def wing_init_imports(root: Path) -> list[str]:
    """Each import in a kernels wing's ``__init__`` (``__future__`` aside)."""
    bad = []
    for wing in KERNEL_WINGS:
        path = root / "kernels" / wing / "__init__.py"
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                    not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
                bad.append(f"kernels/{wing}/__init__.py:{node.lineno} imports (a wing's "
                           "__init__ imports nothing: import kernels must not load numba)")
    return bad


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Each strongly connected group of two or more modules, as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def strongconnect(v: str) -> None:   # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(_one_cycle(graph, sorted(group)))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return groups


def _one_cycle(graph: dict[str, dict[str, int]], group: list[str]) -> list[str]:
    """A path from group[0] back to itself inside the group (for the message)."""
    members = set(group)
    start = group[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w == start:
                    return paths[v] + [start]
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return group


def long_modules(root: Path, limit: int = MAX_LINES) -> list[str]:
    return [f"{module} has {n} lines (at most {limit}: split it by idea)"
            for module, path in sorted(module_files(root).items())
            if (n := len(path.read_text().splitlines())) > limit]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _scope_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope``'s own code: nested functions and classes left out
    (their decorators, defaults and bases stay: they run in ``scope``)."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, _SCOPES):
            todo.extend(getattr(node, "decorator_list", []) + getattr(node, "bases", []))
            args = getattr(node, "args", None)
            if isinstance(args, ast.arguments):
                todo.extend(d for d in args.defaults + args.kw_defaults if d is not None)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return out


def private_name_uses(root: Path) -> list[tuple[str, int, str, str]]:
    """(module, line, other module, private name) for each use of another module's
    private name: ``from other import _name``, or ``other._name`` where ``other``
    names a module of ours (an import bound it; the module-attribute form).
    Dunder names are public. A name bound otherwise in a function (an argument,
    an assignment) is that function's, not the module."""
    files = module_files(root)
    found: list[tuple[str, int, str, str]] = []
    for module, path in sorted(files.items()):
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"

        def imported(node: ast.ImportFrom) -> str:
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[:len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            return base

        def visit(scope: ast.AST, outer: dict[str, str | None]) -> None:
            nodes = _scope_nodes(scope)
            names: dict[str, str | None] = {}
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = scope.args
                for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
                    if arg is not None:
                        names[arg.arg] = None
            for node in nodes:
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.setdefault(node.id, None)
            for node in nodes:   # an import binds a module; it wins over other bindings
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name in files:
                            top = alias.name.split(".")[0]
                            names[alias.asname or top] = alias.name if alias.asname else top
                elif isinstance(node, ast.ImportFrom):
                    base = imported(node)
                    for alias in node.names:
                        if base in files and base != module and _is_private(alias.name):
                            found.append((module, node.lineno, base, alias.name))
                        if f"{base}.{alias.name}" in files:
                            names[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                        and _is_import_module(node.value):   # m = importlib.import_module("...")
                    name = node.value.args[0].value  # type: ignore[attr-defined]
                    for target in node.targets:
                        if isinstance(target, ast.Name) and name in files:
                            names[target.id] = name
            env = {**outer, **names}

            def resolve(expr: ast.expr) -> str | None:
                if isinstance(expr, ast.Name):
                    return env.get(expr.id)
                if isinstance(expr, ast.Attribute):
                    base = resolve(expr.value)
                    if base is not None and f"{base}.{expr.attr}" in files:
                        return f"{base}.{expr.attr}"
                return None

            for node in nodes:
                if isinstance(node, ast.Attribute) and _is_private(node.attr):
                    target = resolve(node.value)
                    if target is not None and target != module:
                        found.append((module, node.lineno, target, node.attr))
                if isinstance(node, _SCOPES):
                    visit(node, env)

        visit(tree, {})
    return sorted(set(found))


# Private names that distrib/runtime, distrib/train and distrib/server still use
# across modules, until those are cleaned: (module, other module, name). The list
# may only shrink: an entry no longer in use fails the check, and nothing outside
# those three subpackages may be listed.
def private_use_violations(uses: list[tuple[str, int, str, str]]) -> list[str]:
    """Each use of another module's private name, as a line of the failure."""
    return [f"{module}:{line} uses {name}, private to {other} (give it a public name)"
            for module, line, other, name in uses]


# -- the rules, on this repository -------------------------------------------------------

def test_imports_follow_the_layer_order() -> None:
    assert order_violations(import_graph(ROOT)) == []


def test_wings_import_downward_only() -> None:
    assert wing_violations(import_graph(ROOT)) == []


@pytest.mark.parametrize("pkg", sorted(WINGS))
def test_every_folder_of_a_winged_subpackage_is_a_wing(pkg: str) -> None:
    folders = {p.name for p in (ROOT / "distrib" / pkg).iterdir()
               if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(WINGS[pkg])
    # and no module sits beside the wings: the flat modules moved into them
    assert [p.name for p in (ROOT / "distrib" / pkg).glob("*.py")] == ["__init__.py"]


def test_kernel_wings_import_downward_only() -> None:
    assert kernel_wing_violations(import_graph(ROOT)) == []


def test_every_kernels_folder_is_a_wing_and_wings_import_nothing() -> None:
    folders = {p.name for p in (ROOT / "kernels").iterdir()
               if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(KERNEL_WINGS)
    assert wing_init_imports(ROOT) == []


def test_no_import_cycles() -> None:
    found = cycles(import_graph(ROOT))
    assert found == [], "\n".join(" -> ".join(c) for c in found)


def test_no_module_is_too_long() -> None:
    assert long_modules(ROOT) == []


def test_no_module_uses_another_modules_private_names() -> None:
    assert private_use_violations(private_name_uses(ROOT)) == []


def test_every_distrib_subpackage_has_a_place_in_the_order() -> None:
    subpackages = {p.name for p in (ROOT / "distrib").iterdir()
                   if p.is_dir() and (p / "__init__.py").exists()}
    assert subpackages <= set(LAYERS), subpackages - set(LAYERS)


def test_old_module_paths_are_gone() -> None:
    # the flat modules moved into subpackages; nothing may come back at the old paths
    for old in ("executor", "graph", "ops.py", "session", "actors", "master", "worker",
                "training", "train.py", "cluster.py", "_graph_exports"):
        assert not (ROOT / "distrib" / old).exists() and \
            not (ROOT / "distrib" / f"{old}.py").exists(), old
    # runtime's and train's flat modules moved into wings (checked with the wings above)
    # kernels' cpu_*/cuda_* modules moved into its wings: no prefix stands in for a folder
    assert sorted(p.name for p in (ROOT / "kernels").glob("*.py")) == \
        ["__init__.py", "constants.py", "counters.py", "dtypes.py", "registry.py"]


# -- the checker can fail ------------------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_checker_finds_a_cycle_through_a_late_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "distrib/framework/__init__.py": "",
        "distrib/framework/a.py": "from distrib.framework import b\n",
        "distrib/framework/b.py": "def f():\n    from distrib.framework.a import x\n",
    })
    assert cycles(import_graph(root)) == [["distrib.framework.a", "distrib.framework.b",
                                           "distrib.framework.a"]]


def test_checker_ignores_type_checking_imports(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "distrib/framework/__init__.py": "",
        "distrib/framework/a.py": "from distrib.framework import b\n",
        "distrib/framework/b.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from distrib.framework.a import x\n"),
    })
    assert cycles(import_graph(root)) == []


def test_checker_finds_an_import_against_the_order(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "distrib/framework/__init__.py": "",
        "distrib/framework/graph.py": "from distrib.runtime.step.worker import W\n",
        "distrib/runtime/__init__.py": "",
        "distrib/runtime/step/worker.py": "import kernels\nimport transports\n",
        "transports/wire.py": "from distrib import errors\n",
        "kernels/cpu/math.py": "import importlib\nimportlib.import_module('transports.wire')\n",
        "distrib/errors.py": "",
    })
    assert order_violations(import_graph(root)) == [
        "distrib.framework.graph:1 imports distrib.runtime.step.worker, a later layer (runtime)",
        "kernels.cpu.math:2 imports transports.wire (kernels must not import transports)",
        "transports.wire:1 imports distrib.errors (transports must not import distrib)",
    ]


def test_checker_finds_a_wing_importing_upward(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "distrib/runtime/__init__.py": "",
        "distrib/runtime/state/__init__.py": "",
        "distrib/runtime/state/store.py": "from distrib.runtime.step import master\n",
        "distrib/runtime/step/__init__.py": "",
        "distrib/runtime/step/master.py": "from distrib.runtime.state import store\n",
        "distrib/runtime/loose.py": "",
        "distrib/train/__init__.py": "from distrib.train.sessions import hooks\n",
        "distrib/train/checkpoints/__init__.py": "",
        "distrib/train/checkpoints/saver.py": "from distrib.train.sessions import hooks\n",
        "distrib/train/sessions/__init__.py": "",
        "distrib/train/sessions/hooks.py": ("from distrib.train.checkpoints import saver\n"
                                            "from distrib.runtime.step import master\n"),
        "distrib/train/global_step.py": "",
    })
    assert wing_violations(import_graph(root)) == [
        "distrib.runtime.loose: not in a wing of distrib.runtime " + str(WINGS["runtime"]),
        "distrib.runtime.state.store:1 imports distrib.runtime.step.master, a later wing (step)",
        "distrib.train.checkpoints.saver:1 imports distrib.train.sessions.hooks, a later wing (sessions)",
        "distrib.train.global_step: not in a wing of distrib.train " + str(WINGS["train"]),
    ]


def test_checker_finds_a_kernels_wing_importing_upward(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "kernels/registry.py": "def f():\n    from kernels.cuda import memory\n",
        "kernels/cpu/__init__.py": "from kernels.cpu import math\n",
        "kernels/cpu/math.py": "from kernels.cuda.memory import mark\nfrom kernels import registry\n",
        "kernels/cuda/__init__.py": "",
        "kernels/cuda/memory.py": "from kernels.cpu import math\nfrom kernels import registry\n",
        "kernels/metal/ops.py": "",
    })
    assert kernel_wing_violations(import_graph(root)) == [
        "kernels.cpu.math:1 imports kernels.cuda.memory, a later wing (cuda)",
        "kernels.metal.ops: not in a wing of kernels " + str(KERNEL_WINGS),
        "kernels.registry:2 a shared module imports kernels.cuda.memory, a later wing (cuda)",
    ]
    assert wing_init_imports(root) == [
        "kernels/cpu/__init__.py:1 imports (a wing's __init__ imports nothing: "
        "import kernels must not load numba)"]


def test_checker_resolves_relative_imports_and_package_inits(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "transports/__init__.py": "from .wire import Wire\n",
        "transports/wire.py": "from . import codec\n",
        "transports/codec.py": "from transports import Wire\n",
    })
    assert cycles(import_graph(root)) == [["transports", "transports.wire", "transports.codec",
                                           "transports"]]


def test_checker_finds_a_long_module(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"kernels/big.py": "x = 1\n" * (MAX_LINES + 1)})
    assert long_modules(root) == [f"kernels.big has {MAX_LINES + 1} lines (at most {MAX_LINES}: "
                                  "split it by idea)"]


@pytest.mark.parametrize("module, expected", [
    ("distrib", ("distrib", len(LAYERS))), ("distrib.demo", ("distrib", len(LAYERS))),
    ("distrib.settings", ("distrib", 0)), ("distrib.errors", ("distrib", 1)),
    ("distrib.client.session", ("distrib", LAYERS.index("client"))),
    ("distrib.app.flags", ("distrib", LAYERS.index("app"))),
    ("transports.wire", ("transports", 0)), ("distrib.gadgets.x", ("distrib", -1)),
])
def test_layer_of(module: str, expected: tuple[str, int]) -> None:
    assert layer_of(module) == expected


def test_checker_finds_a_private_name_imported_from_another_module(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "distrib/framework/__init__.py": "",
        "distrib/framework/a.py": "def _helper(): ...\n_LIMIT = 3\n__version__ = '1'\n",
        "distrib/framework/b.py": ("from distrib.framework.a import _helper, __version__\n"
                                   "from .a import _LIMIT\nfrom typing import _SpecialForm\n"),
        "distrib/framework/c.py": "def f():\n    from distrib.framework.a import _helper\n",
    })
    assert private_name_uses(root) == [
        ("distrib.framework.b", 1, "distrib.framework.a", "_helper"),
        ("distrib.framework.b", 2, "distrib.framework.a", "_LIMIT"),
        ("distrib.framework.c", 2, "distrib.framework.a", "_helper"),
    ]


def test_checker_finds_a_private_name_read_off_an_imported_module(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "distrib/ops/__init__.py": "",
        "distrib/ops/m.py": "def _out(): ...\n",
        "distrib/ops/n.py": ("from distrib.ops import m as ops\nimport distrib.ops.m\n"
                             "import transports.wire as w\n"
                             "ops._out()\ndistrib.ops.m._out()\nw._frame\nops.__name__\n"
                             "def f(ops):\n    return ops._out()\n"      # an argument: not the module
                             "def g():\n    import importlib\n"
                             "    x = importlib.import_module('distrib.ops.m')\n    x._out()\n"),
        "transports/wire.py": "",
    })
    assert private_name_uses(root) == [
        ("distrib.ops.n", 4, "distrib.ops.m", "_out"),
        ("distrib.ops.n", 5, "distrib.ops.m", "_out"),
        ("distrib.ops.n", 6, "transports.wire", "_frame"),
        ("distrib.ops.n", 13, "distrib.ops.m", "_out"),
    ]


def test_a_private_use_is_named_with_its_owner() -> None:
    uses = [("distrib.train.a", 3, "distrib.train.b", "_x")]
    assert private_use_violations(uses) == [
        "distrib.train.a:3 uses _x, private to distrib.train.b (give it a public name)"]
