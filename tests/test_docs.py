"""The repository's documents stand on their own.

- No tracked text file (Python, Markdown, TOML, YAML, the Makefile, the CI
  script) names a document that is not in the repository (the team's design
  brief) or a path outside it: whatever a reader needs is said here, in
  ``docs/CONTRACT.md`` (the public contract) and ``docs/ARCHITECTURE.md``.
- Every relative link in ``README.md`` and ``docs/*.md`` leads to a file of
  the repository (and, with an ``#anchor``, to a heading of that file), and
  every file a page names in backticks (``docs/ops.md``,
  ``runtime/step/master.py``, ``executor.py``) exists.

A backticked path is resolved as the pages write them: from the repository's
root, from ``distrib/`` (the module tables leave it out), as the end of a
repository path, or, for a bare file name, as any file of that name.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = (".py", ".md", ".toml", ".yml", ".yaml", ".sbatch", ".cfg", ".ini")
TEXT_NAMES = ("Makefile", "Dockerfile", "run")
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".pytest_cache",
             ".ruff_cache", ".mypy_cache"}
# spelled in pieces so that this file does not name them itself
FORBIDDEN = ("DESIGN" + ".md", "../" + "shared", "/" + "work/")


def repo_files() -> list[str]:
    """The repository's files, relative to its root: tracked and new ones (not
    ignored) when git can say, else a walk that skips build and cache folders."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if f and (ROOT / f).is_file()]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        files += [str((Path(folder) / n).relative_to(ROOT)) for n in names]
    return files


FILES = repo_files()


def text_files() -> list[str]:
    return sorted(f for f in FILES
                  if f.endswith(TEXT_SUFFIXES) or Path(f).name in TEXT_NAMES)


def pages() -> list[str]:
    return sorted(f for f in FILES if f == "README.md"
                  or (f.startswith("docs/") and f.endswith(".md")))


def test_the_files_are_found() -> None:
    assert "README.md" in FILES and "docs/CONTRACT.md" in FILES
    assert "tests/test_docs.py" in text_files()
    assert {"README.md", "docs/ARCHITECTURE.md", "docs/CONTRACT.md"} <= set(pages())


def outside_references(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that names something outside the repository."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if any(bad in line for bad in FORBIDDEN)]


def test_no_file_points_outside_the_repository() -> None:
    found = []
    for f in text_files():
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        found += [f"{f}:{n}: {line}" for n, line in outside_references(text)]
    assert not found, ("these lines point outside the repository; say what the reader "
                       "needs here (docs/CONTRACT.md, docs/ARCHITECTURE.md) instead:\n"
                       + "\n".join(found))


def test_the_outside_check_catches_each_form() -> None:
    for bad in FORBIDDEN:
        assert outside_references(f"ok\nsee {bad} for why\n") == [(2, f"see {bad} for why")]
    assert outside_references("docs/CONTRACT.md, ../README.md, distrib/work.py") == []


# -- links and named files ---------------------------------------------------

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`\n]+)`")
NAMED_FILE = re.compile(r"(?<![\w.:/-])((?:\.\./|\./)?[\w./*-]*[\w*]\.(?:py|md))(?![\w/]|\.\w)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def broken_links(page: str) -> list[str]:
    text = FENCE.sub("", (ROOT / page).read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (ROOT / page).parent / path if path else ROOT / page
        if not dest.resolve().is_relative_to(ROOT) or not dest.exists():
            broken.append(f"{page}: link to {target!r}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{page}: link to {target!r}: no such heading")
    return broken


def named_files(text: str) -> list[str]:
    """The .py and .md paths a page names in backticks (inline or fenced)."""
    names = []
    for block in [m.group(0) for m in FENCE.finditer(text)] + CODE.findall(FENCE.sub("", text)):
        names += NAMED_FILE.findall(block)
    return names


def exists(name: str) -> bool:
    """Whether a path as a page writes it names a file of the repository."""
    name = name.removeprefix("./")
    while name.startswith("../"):
        name = name[3:]
    if "*" in name:
        pattern = re.compile(".*".join(map(re.escape, name.split("*"))) + "$")
        return any(pattern.search(f) for f in FILES)
    if "/" not in name:
        return any(Path(f).name == name for f in FILES)
    return any(f == name or f == "distrib/" + name or f.endswith("/" + name) for f in FILES)


def missing_files(page: str) -> list[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [f"{page}: `{name}` is not a file of the repository"
            for name in named_files(text) if not exists(name)]


@pytest.mark.parametrize("page", pages())
def test_every_link_and_named_file_exists(page: str) -> None:
    problems = broken_links(page) + missing_files(page)
    assert not problems, "\n".join(problems)


def test_the_link_checks_catch_what_they_should() -> None:
    assert slug("The `dt` namespace and its TensorFlow names") == \
        "the-dt-namespace-and-its-tensorflow-names"
    assert named_files("see `docs/ops.md` and `python bench/step.py --json`\n```\nrun x.py\n```") \
        == ["x.py", "docs/ops.md", "bench/step.py"]
    assert named_files("`dt.train.Saver`, `a.py.bak`, `distrib.py_compile`") == []
    assert exists("docs/CONTRACT.md") and exists("runtime/step/master.py")
    assert exists("executor.py") and exists("kernels/cpu/math.py")
    assert not exists("runtime/nowhere.py") and not exists("NOWHERE.md")
    assert not exists("runtime/collective_nowhere_*.py")
    page = ROOT / "docs" / "CONTRACT.md"
    assert "fault-tolerance" in anchors(page)
