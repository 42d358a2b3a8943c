"""The package as PyPI would get it: the real `python -m build` makes the sdist and, from that
sdist, the wheel (so the sdist alone is enough to build kvtop); each is installed by the real pip
into a fresh venv, and the installed `kvtop` runs there (`--version`, `--demo --once`, the
stylesheet the live view loads) with no file of this checkout in reach.

Offline and quick: the build runs without isolation (setuptools and build come with the test
extra), pip installs with --no-index and --no-deps, and the fresh venv reaches the test venv's
site-packages through a .pth line for the dependencies (a path added that way has its
distributions but not its .pth files: the checkout's editable `kvtop` stays out, as the assertion
on `kvtop.__file__` checks). `pip check` then says the installed metadata's requirements are met.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from kvtop import __version__

pytestmark = pytest.mark.slow  # a build and two installs: ~10 s

ROOT = Path(__file__).resolve().parents[2]
DIST_NAME = "kvtop-sglang"
# What the sdist carries besides the packages: enough to build the wheel, and what the README
# links to.
SOURCE = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "MANIFEST.in",
    "tui",
    "styles",
    "docs",
    "dashboards",
)


def clean_env() -> dict[str, str]:
    """The environment without anything that would put this checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(NO_COLOR="1", COLUMNS="100", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("VIRTUAL_ENV", None)
    return env


def run(*argv: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel built from it, from a copy of the sources (the build writes
    build/ and *.egg-info beside them, never into the checkout)."""
    tmp = tmp_path_factory.mktemp("package")
    src = tmp / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCE:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=skip)
        else:
            shutil.copy2(path, src / name)
    dist = tmp / "dist"
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, src, cwd=tmp)
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def fresh_venv(directory: Path) -> Path:
    """A venv without pip, seeing the test venv's distributions after its own."""
    run(sys.executable, "-m", "venv", "--without-pip", directory, cwd=directory.parent)
    python = directory / "bin" / "python"
    own = run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=directory)
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    Path(own.stdout.strip(), "test-venv-dependencies.pth").write_text("\n".join(sorted(deps)))
    return python


def test_the_artifacts_carry_the_name_the_version_and_the_package_data(
    built: dict[str, Path],
) -> None:
    assert built["wheel"].name == f"kvtop_sglang-{__version__}-py3-none-any.whl"
    assert built["sdist"].name == f"kvtop_sglang-{__version__}.tar.gz"
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        meta = wheel.read(f"kvtop_sglang-{__version__}.dist-info/METADATA").decode()
        entry = wheel.read(f"kvtop_sglang-{__version__}.dist-info/entry_points.txt").decode()
    # What kvtop loads at run time: the stylesheet (the live view), the story log (--demo) and
    # the typing marker.
    assert {"kvtop/styles/kvtop.tcss", "kvtop/py.typed"} <= names
    assert any(re.fullmatch(r"kvtop/data/[^/]+\.log", n) for n in names)
    assert not any(n.startswith(("tui/", "tests/", "bench/", "scripts/")) for n in names)
    assert f"kvtop_sglang-{__version__}.dist-info/licenses/LICENSE" in names
    assert "kvtop = kvtop.cli:main" in entry
    headers = dict(
        line.split(": ", 1) for line in meta.split("\n\n", 1)[0].splitlines() if ": " in line
    )
    assert headers["Name"] == DIST_NAME and headers["Version"] == __version__
    assert headers["License-Expression"] == "Apache-2.0"
    assert headers["Requires-Python"] == ">=3.10"
    assert headers["Description-Content-Type"] == "text/markdown"
    classifiers = set(re.findall(r"^Classifier: (.+)$", meta, re.M))
    assert {"Environment :: Console :: Curses", "Topic :: System :: Monitoring"} <= classifiers
    assert "pipx install kvtop-sglang" in meta  # the README is the long description
    with tarfile.open(built["sdist"]) as sdist:
        files = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "styles/kvtop.tcss",
        "dashboards/kvtop.json",
    } <= files
    assert "docs/exporter.md" in files


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installed_in_a_fresh_venv_kvtop_runs(
    kind: str, built: dict[str, Path], tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv")
    pip = (sys.executable, "-m", "pip", "--python", python)
    # --no-build-isolation: pip builds the sdist with the setuptools the venv sees (offline).
    run(
        *pip,
        "install",
        "--no-index",
        "--no-deps",
        "--no-build-isolation",
        built[kind],
        cwd=tmp_path,
    )
    run(*pip, "check", cwd=tmp_path)  # every requirement of the installed metadata is met
    kvtop = tmp_path / "venv" / "bin" / "kvtop"

    where = run(python, "-c", "import kvtop; print(kvtop.__file__)", cwd=tmp_path).stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "venv"), where
    assert run(kvtop, "--version", cwd=tmp_path).stdout.strip() == f"kvtop {__version__}"
    module = run(python, "-m", "kvtop", "--version", cwd=tmp_path).stdout.strip()
    assert module == f"kvtop {__version__}"
    # Nothing named `tui` is installed: PyPI's unrelated `tui` can sit beside kvtop.
    no_tui = "import importlib.util; print(importlib.util.find_spec('tui'))"
    assert run(python, "-c", no_tui, cwd=tmp_path).stdout.strip() == "None"
    report = run(kvtop, "--demo", "--once", cwd=tmp_path).stdout
    assert report.startswith("verdict: ") and "moonshotai/Kimi-K2.5 · TP8" in report
    # The live view's stylesheet, from the installed package, parsed by Textual as the app does.
    parse = (
        "from textual.app import App\n"
        "from textual.css.stylesheet import Stylesheet\n"
        "from kvtop.live.base import stylesheet\n"
        "sheet = Stylesheet(variables=App().get_css_variables())\n"
        "sheet.read(stylesheet()); sheet.parse()\n"
        "print(stylesheet(), len(sheet.rules))\n"
    )
    path, rules = run(python, "-c", parse, cwd=tmp_path).stdout.split()
    assert Path(path).is_relative_to(tmp_path / "venv") and int(rules) > 10
