"""The front page a newcomer reads: short, the real host first, the keys the views really bind,
every link to a page that exists; the licence it declares; the complexity gate CI applies."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from kvtop.live.app import KvtopApp
from kvtop.live.base import FeedApp
from kvtop.live.screens.overview import OverviewScreen
from kvtop.live.screens.processes import ProcessesScreen

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# The README's names for keys, in Textual's.
KEY_NAMES = {
    "↑": "up",
    "↓": "down",
    "PgUp": "pageup",
    "PgDn": "pagedown",
    "Home": "home",
    "End": "end",
    "Enter": "enter",
    "Esc": "escape",
    "space": "space",
    "+": "plus",
    "-": "minus",
    "?": "question_mark",
    "F1": "f1",
}


def bound_keys() -> set[str]:
    """Every key the overview answers: the app's, its base's, the overview's, the processes
    view's, and Textual's command palette."""
    keys = {KvtopApp.COMMAND_PALETTE_BINDING}
    for owner in (KvtopApp, FeedApp, OverviewScreen, ProcessesScreen):
        for binding in owner.BINDINGS:
            keys.update(binding.key.split(","))  # type: ignore[union-attr]
    return keys


def shown_keys() -> set[str]:
    """The keys the overview's own bindings name (what the README's table must list)."""
    keys = set()
    for owner in (KvtopApp, FeedApp, OverviewScreen):
        for binding in owner.BINDINGS:
            keys.add(binding.key.split(",")[0])  # type: ignore[union-attr]
    return keys


def readme_keys(whole_rows: bool = False) -> set[str]:
    """The keys of the README's table: its first column, or (`whole_rows`) every key named in a
    row (`PgUp` in the selection's row)."""
    table = README.split("## Keys", 1)[1].split("\n\n", 2)[1]
    keys: set[str] = set()
    for line in table.splitlines()[2:]:
        cells = line if whole_rows else line.split(" | ")[0]
        for key in re.findall(r"`([^`]+)`", cells):
            keys.update(KEY_NAMES.get(word, word) for word in key.split())
    return keys


def test_short_and_the_real_host_first() -> None:
    lines = README.splitlines()
    assert len(lines) <= 300
    assert any("kvtop --unit sglang-kimi" in line for line in lines[:60])
    assert "./scripts/demo.sh" in README and "./scripts/test.sh" in README
    assert max(len(line) for line in lines) <= 120  # no 1,000-character table cell


def test_the_keys_table_lists_what_the_views_bind() -> None:
    listed = readme_keys()
    assert listed - bound_keys() == set(), "keys in the README that nothing binds"
    named = readme_keys(whole_rows=True)
    assert shown_keys() - named == set(), "keys the overview binds that the README leaves out"
    assert {"e", "l", "t"} <= listed


def test_every_link_names_a_file_that_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} → {target}")
    assert missing == []


def test_the_licence_is_the_one_declared() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is in Python 3.11 and later")
def test_the_complexity_gate_is_on() -> None:
    import tomllib

    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"][
        "lint"
    ]
    assert "C901" in lint["select"]
    assert lint["mccabe"]["max-complexity"] <= 20
