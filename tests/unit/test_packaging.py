"""pyproject.toml lists the packages by hand (the stylesheets install as kvtop.styles from the
top-level styles/): the list must name every package under tui/kvtop/, and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info < (3, 11):  # pragma: no cover - tomllib is 3.11+
    pytest.skip("tomllib needs Python 3.11", allow_module_level=True)

import tomllib  # noqa: E402


def test_the_package_list_names_every_package_under_tui_kvtop() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT / "tui").parts)
        for init in (ROOT / "tui" / "kvtop").rglob("__init__.py")
    }
    assert listed - {"kvtop.styles"} == on_disk
    assert config["tool"]["setuptools"]["package-dir"] == {"": "tui", "kvtop.styles": "styles"}
    assert (ROOT / "styles" / "kvtop.tcss").is_file()
