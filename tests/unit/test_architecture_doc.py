"""docs/architecture.md names every module of tui/kvtop/ at its place, and only modules that exist.

Each module has one line of its own in its wing's section (`- `tui/kvtop/path/module.py` — what it is
for`); each package is named by its folder (`tui/kvtop/model/sizing/`). A module added without its
line, or a line left behind by a module that moved or went, fails here, so the map a newcomer
reads is the package as it is.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path


def _root() -> Path:
    here = Path(__file__).resolve().parent
    while not (here / "pyproject.toml").is_file():
        here = here.parent
    return here


ROOT = _root()
TUI = ROOT / "tui" / "kvtop"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")

# A module's own line: a list item that starts with its path in backticks and a dash.
MODULE_LINE = re.compile(r"^- `(tui/kvtop/[\w/]+\.py)` — \S", re.MULTILINE)
# Any path into tui/kvtop/ the text names: a module (`tui/kvtop/live/app.py`) or a folder (`tui/kvtop/fleet/`).
NAMED_MODULE = re.compile(r"(?<![\w/.])tui/kvtop/(?:\w+/)*\w+\.py\b")
NAMED_FOLDER = re.compile(r"(?<![\w/.])tui/kvtop/(?:\w+/)+(?![\w.<])")


def _repo_path(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def modules() -> list[str]:
    """Every module of the package but the packages' own __init__.py."""
    return sorted(_repo_path(p) for p in TUI.rglob("*.py") if p.name != "__init__.py")


def packages() -> list[str]:
    """Every package under tui/kvtop/, as its folder (`tui/kvtop/model/sizing/`)."""
    return sorted(_repo_path(p.parent) + "/" for p in TUI.rglob("__init__.py") if p.parent != TUI)


def test_every_module_has_one_line_of_its_own() -> None:
    lines = Counter(MODULE_LINE.findall(DOC))
    assert sorted(set(modules()) - set(lines)) == []  # added without a line
    assert sorted(set(lines) - set(modules())) == []  # a line for a module that is gone
    assert sorted(path for path, count in lines.items() if count > 1) == []  # one line each


def test_every_package_is_named_by_its_folder() -> None:
    named = set(NAMED_FOLDER.findall(DOC))
    assert sorted(set(packages()) - named) == []


def test_every_path_the_doc_names_exists() -> None:
    gone = [p for p in NAMED_MODULE.findall(DOC) if not (ROOT / p).is_file()]
    gone += [p for p in NAMED_FOLDER.findall(DOC) if not (ROOT / p).is_dir()]
    assert sorted(set(gone)) == []


def test_the_checks_see_what_they_must_refuse() -> None:
    """The patterns find a module's line, a named module and a named folder, and nothing else."""
    text = (
        "- `tui/kvtop/live/app.py` — the app\n"
        "see `tui/kvtop/fleet/` and tui/kvtop/model/sizing/formula.py, not `tui/kvtop/sources/<name>.py`\n"
        "  - `tui/kvtop/fmt.py` — indented: not a line of its own\n"
    )
    assert MODULE_LINE.findall(text) == ["tui/kvtop/live/app.py"]
    assert NAMED_MODULE.findall(text) == [
        "tui/kvtop/live/app.py",
        "tui/kvtop/model/sizing/formula.py",
        "tui/kvtop/fmt.py",
    ]
    assert NAMED_FOLDER.findall(text) == ["tui/kvtop/fleet/"]
